"""The engine options a session records: ``kimik3 run`` / ``resume`` / ``chat`` put them in the
header of a session they create (``"engine": [...]``, never a credential), and ``kimik3 resume``
given no engine takes them back, checked as untrusted data, so the printed ``continue with:``
line runs as printed. Only from a session file that is the user's own and outside the workspace
(where the agent's tools could rewrite it), and never the options that can run code
(``--trust-remote-code``, ``--preset``, which turns it on, ``--engine-arg``): those are given
again."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from .._exceptions import SessionError
from .._text import REDACTED, printable, redact_url, redact_urls
from ..agents import RunHooks, SessionLog
from ..tools.coding.api import credential_env
from .engine import Options, engine_options

__all__ = ["CODE_OPTIONS", "RECORDED_OPTIONS", "EngineHeader", "code_argv", "engine_argv", "given_again",
           "recorded_command", "recorded_engine", "recorded_params", "resume_argv"]


# The engine options a session's header records (``"engine": [argv]``) and resume takes back when
# given none: the option, and whether it takes a value. Never --api-key (issue: the printed
# "continue with" line must run as printed, without writing a credential anywhere).
RECORDED_OPTIONS: dict[str, bool] = {
    "--base-url": True, "--model": True, "--mode": True, "--tokenizer": True, "--model-path": True,
    "--preset": True, "--feature": True, "--tensor-parallel-size": True, "--max-model-len": True,
    "--enforce-eager": False, "--no-enforce-eager": False, "--gpu-memory-utilization": True, "--dtype": True,
    "--trust-remote-code": False, "--engine-arg": True, "--script": True, "--request-timeout": True,
}
# Recorded options never taken from a session file (they run code with the user's rights: vLLM's
# trust_remote_code imports the model folder's Python, and every preset turns it on (the K3
# recipe's base_args L37-42, engines/_presets.py); engine args name classes vLLM imports,
# worker_extension_cls, logits_processors, ...): resume refuses until they are given again.
CODE_OPTIONS = ("--trust-remote-code", "--preset", "--engine-arg")
MAX_RECORDED_ITEMS = 64
MAX_RECORDED_CHARS = 4096


def _secret_arg(key: str, text: str) -> bool:
    """Whether ``--engine-arg key=text`` (``text``: the value's JSON) carries a credential: its
    name or a name inside its value, with what it holds, by the sandbox's rule for environment
    variables (:func:`~kimik3.tools.coding.api.credential_env`: ``hf_token``, ``auth_token``,
    not ``max_num_batched_tokens`` or ``tokenizer_mode``), or a URL with credentials in it."""
    def named(value: Any) -> list[tuple[str, str]]:
        if isinstance(value, dict):
            return [(str(k), json.dumps(v)) for k, v in value.items()] + [p for v in value.values() for p in named(v)]
        return [p for v in value for p in named(v)] if isinstance(value, list) else []

    pairs = [(key, text), *named(json.loads(text))]
    return any(credential_env(name.upper(), held) for name, held in pairs) or redact_urls(text) != text


def engine_argv(o: Options) -> list[str]:
    """The engine options of ``o`` as command-line items, for a session's header: the base URL
    through :func:`~kimik3._text.redact_url` (its credentials become ``***``), paths absolute, an
    ``--engine-arg`` whose name looks secret (``hf_token``) left out; never the API key.

    Example: ``["--base-url", "http://127.0.0.1:8000/v1", "--model", "k3"]``.
    """
    argv: list[str] = []

    def add(flag: str, value: Any, path: bool = False) -> None:
        if value is not None:
            argv.extend([flag, os.path.abspath(value) if path else str(value)])

    add("--base-url", redact_url(o.base_url) if o.base_url else None)
    add("--model", o.model)
    add("--mode", o.mode if o.mode != "chat" else None)
    add("--tokenizer", o.tokenizer, path=True)
    add("--model-path", o.model_path, path=True)
    add("--preset", o.preset)
    for feature in o.feature:
        add("--feature", feature)
    add("--tensor-parallel-size", o.tensor_parallel_size)
    add("--max-model-len", o.max_model_len)
    if o.enforce_eager is not None:
        argv.append("--enforce-eager" if o.enforce_eager else "--no-enforce-eager")
    add("--gpu-memory-utilization", o.gpu_memory_utilization)
    add("--dtype", o.dtype)
    if o.trust_remote_code:
        argv.append("--trust-remote-code")
    for key, value in o.engine_arg:
        text = json.dumps(value)  # a secret-looking name, or one inside the value, or a URL's: left out
        if not _secret_arg(key, text):
            add("--engine-arg", f"{key}={text}")
    add("--script", o.script, path=True)
    add("--request-timeout", o.request_timeout)
    return argv


def code_argv(argv: list[str]) -> list[str]:
    """The :data:`CODE_OPTIONS` items of ``argv`` (:func:`engine_argv`'s), with their values: what
    a ``continue with: kimik3 resume ...`` line gives again, since resume never takes them from the
    session file. Example: ``["--preset", "auto", "--trust-remote-code"]``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        item = argv[i : i + (2 if RECORDED_OPTIONS[argv[i]] else 1)]
        i += len(item)
        if item[0] in CODE_OPTIONS:
            out += item
    return out


def resume_argv(argv: list[str], session: str | os.PathLike[str],
                workspace: str | os.PathLike[str] | None) -> list[str]:
    """What a ``continue with: kimik3 resume ...`` line gives again of the engine options ``argv``
    (:func:`engine_argv`'s): the code options (:func:`code_argv`), which resume never takes from
    the session file; all of them when the session lies in its ``workspace``, where resume takes
    none from it (:func:`_own_file`). Never a ``--base-url`` whose credentials are not recorded
    (``***``): given so, it would connect as the user ``***``; left out, the line runs as printed
    where the URL came from ``$KIMIK3_BASE_URL``, else resume says to give it."""
    inside = workspace is not None and Path(session).resolve().is_relative_to(Path(workspace).resolve())
    if not inside:
        return code_argv(argv)
    at = argv.index("--base-url") if "--base-url" in argv else -1
    return argv[:at] + argv[at + 2:] if at >= 0 and REDACTED in argv[at + 1] else list(argv)


def given_again(session: str | os.PathLike[str]) -> list[str]:
    """:func:`resume_argv` of the engine options ``session``'s header records, for the ``continue
    with: kimik3 resume ...`` line of a command that only reads the session (``kimik3 approve``,
    ``answer``). [] when none is recorded, or the file or its record cannot be read (resume then
    says why itself)."""
    try:
        log = SessionLog.read(session)
        return resume_argv(recorded_engine(log), session, log.workspace())
    except (SessionError, OSError):
        return []


class EngineHeader(RunHooks):
    """Run hooks that put the engine options (:func:`engine_argv`) in the header of a session the
    run creates, as ``"engine": [...]``, so ``kimik3 resume SESSION`` runs without them."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv

    def session_header(self) -> dict[str, Any]:
        return {"engine": self.argv} if self.argv else {}


def recorded_engine(log: SessionLog) -> list[str]:
    """The engine options ``log``'s header records (:func:`engine_argv`), checked as untrusted
    data: a list of at most :data:`MAX_RECORDED_ITEMS` strings of at most
    :data:`MAX_RECORDED_CHARS` printable characters, each option one of
    :data:`RECORDED_OPTIONS` followed by its value where it takes one; [] when none is recorded.
    The values' types are click's to check (:func:`recorded_params`).

    Raises:
        SessionError: a malformed ``"engine"`` (the session's line 1 and what is wrong), or a
            base URL recorded redacted (it held credentials, which are never recorded).
    """
    argv = log.header.get("engine", [])
    where = f"{log.path}:1: malformed session header: \"engine\""
    if not isinstance(argv, list) or len(argv) > MAX_RECORDED_ITEMS:
        raise SessionError(f"{where} must be a list of at most {MAX_RECORDED_ITEMS} strings")
    for item in argv:
        if not isinstance(item, str) or len(item) > MAX_RECORDED_CHARS or printable(item) != item or "\n" in item:
            raise SessionError(f"{where} holds {item!r:.80}, not a printable string of at most "
                               f"{MAX_RECORDED_CHARS} characters")
    i = 0
    while i < len(argv):
        takes = RECORDED_OPTIONS.get(argv[i])
        if takes is None:
            raise SessionError(f"{where} holds {argv[i]!r:.80}, not one of the engine options "
                               f"({', '.join(RECORDED_OPTIONS)})")
        if takes and i + 1 == len(argv):
            raise SessionError(f"{where} ends with {argv[i]} without its value")
        if takes and argv[i + 1].startswith("-"):
            raise SessionError(f"{where} gives {argv[i]} the value {argv[i + 1]!r:.80}, which would read as an option")
        if argv[i] == "--base-url" and REDACTED in argv[i + 1]:
            raise SessionError(f"session {log.path} ran on {argv[i + 1]}, whose credentials are not recorded; "
                               "nothing was run: give the engine options (--base-url URL ...)")
        i += 2 if takes else 1
    return argv


@click.command(name="kimik3 resume", add_help_option=False)
@engine_options
def recorded_command(**params: Any) -> None:
    """Parses recorded engine options with the options' own types (never invoked)."""


def _own_file(log: SessionLog, workspace: str) -> None:
    """Raise unless ``log``'s file may choose the engine: the user's own (owned by the effective
    user, writable by no one else: the rule of sshd's StrictModes and git's safe.directory,
    CVE-2022-24765) and outside ``workspace``, where the agent's tools could rewrite it.

    Raises:
        SessionError: which of the two fails, and that the engine options must be given.
    """
    path = Path(log.path).resolve()
    give = "nothing was run: give the engine options (--base-url URL ...)"
    info = os.stat(path)
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SessionError(f"session {log.path} is not only yours (owner uid {info.st_uid}, mode "
                           f"{stat.S_IMODE(info.st_mode):o}), so its engine options are not taken; {give}")
    if path.is_relative_to(Path(workspace).resolve()):
        raise SessionError(f"session {log.path} lies in its workspace {workspace}, where the agent's tools can "
                           f"rewrite it, so its engine options are not taken; {give}")


def recorded_params(log: SessionLog, params: dict[str, Any], workspace: str) -> list[str]:
    """Fill ``params`` (resume's, from the current click context) with the engine options ``log``
    records (:func:`recorded_engine`) when the command got no engine (no ``--base-url``,
    ``--model-path`` or ``--script``, nor their environment variables); an option given on the
    command line or by its environment variable still wins. The file must be the user's own and
    outside ``workspace`` (the run's folder); a recorded :data:`CODE_OPTIONS` item is never taken:
    it must be given again (``--trust-remote-code``, ``--preset``; ``--engine-arg``: the ones given
    replace the recorded). Returns the recorded items used, which the first line prints (not one
    given anew on the command line or by its environment variable; [] when none).

    Raises:
        SessionError: a malformed record (:func:`recorded_engine`); a file not the user's own or
            in the workspace; recorded code options not given again (the line to run, naming
            them); one that does not parse now (a recorded model directory gone: click's message).
    """
    if any(params.get(n) is not None for n in ("base_url", "model_path", "script")):
        return []
    argv = recorded_engine(log)
    if not argv:
        return []
    _own_file(log, workspace)
    taken: list[str] = []
    missing: list[str] = []
    i = 0
    while i < len(argv):
        item = argv[i : i + (2 if RECORDED_OPTIONS[argv[i]] else 1)]
        i += len(item)
        if item[0] not in CODE_OPTIONS:
            taken += item
        elif not params.get(item[0][2:].replace("-", "_")):  # not given again on this command line
            missing += item
    if missing:
        raise SessionError(f"session {log.path} records {shlex.join(missing)}, which can run code and is never taken "
                           f"from a session file; nothing was run: give it again (kimik3 resume "
                           f"{shlex.quote(str(log.path))} {shlex.join(missing)})")
    try:
        parsed = recorded_command.make_context("kimik3 resume", list(taken))
    except click.ClickException as e:
        raise SessionError(f"session {log.path} records engine options that do not hold now "
                           f"({e.format_message()}); nothing was run: give the engine options") from None
    ctx = click.get_current_context()
    applied = {name for name in parsed.params if parsed.get_parameter_source(name) == ParameterSource.COMMANDLINE
               and ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None)}
    for name in applied:
        params[name] = parsed.params[name]
    names = {flag: p.name for p in recorded_command.params for flag in (*p.opts, *p.secondary_opts)}
    used: list[str] = []  # the first line says what is used: not a recorded option given anew
    i = 0
    while i < len(taken):
        item = taken[i : i + (2 if RECORDED_OPTIONS[taken[i]] else 1)]
        i += len(item)
        if names[item[0]] in applied:
            used += item
    return used
