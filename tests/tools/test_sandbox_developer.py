"""The sandbox on an ordinary developer's machine (issue 39, a third attack): what the secret
patterns must not take from the user (their toolchain and projects whose names look like a
secret's), and the secrets they must still take (names in another case, one folder deeper).
Each through the real sandbox, bubblewrap and Landlock, reading what a real command printed."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimik3.tools import Tool
from kimik3.tools.coding import Sandbox, coding_tools

from ..procs import needs_bwrap
from .test_sandbox_policy import BACKENDS

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")


@pytest.fixture
def home(pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home outside /tmp and the real $HOME (pytest's cache in the checkout)."""
    h = pytestconfig.cache.mkdir("sbdev") / uuid.uuid4().hex[:8] / "home"
    h.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    yield h
    shutil.rmtree(h.parent, ignore_errors=True)


def put(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def tool(folder: Path, name: str) -> None:
    """A program ``name`` in ``folder`` printing ``ran <name>``."""
    put(folder / name, f"#!/bin/sh\necho ran {name}\n", 0o755)


async def run(bash: Tool, command: str) -> str:
    result = await bash.run({"command": command, "timeout": 60})
    assert isinstance(result.content, str), result.content
    return result.content


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_toolchain_named_like_a_secret_runs(backend: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A virtualenvwrapper venv ``~/.virtualenvs/tokenizers``, a pipenv venv of a project
    ``secret-santa`` (``~/.local/share/virtualenvs/secret-santa-Ab12``, off ``PATH``: found by its
    ``pyvenv.cfg``), a program folder on ``PATH`` in ``~/.config/token-service`` and tiktoken's
    cache run and read as outside; the secret files inside them are still masked."""
    tool(home / ".virtualenvs/tokenizers/bin", "tok")
    put(home / ".virtualenvs/tokenizers/pyvenv.cfg", "home = /usr/bin\n")
    tool(home / ".local/share/virtualenvs/secret-santa-Ab12/bin", "santa")
    put(home / ".local/share/virtualenvs/secret-santa-Ab12/pyvenv.cfg", "home = /usr/bin\n")
    tool(home / ".config/token-service/bin", "svc")
    put(home / ".config/token-service/token.json", "SECRET token.json\n")
    put(home / ".cache/tiktoken/9b5ad71b2ce5302211f9c61530b329a4922fc6a4", "bpe ranks\n")
    put(home / ".config/app-secrets/keys", "SECRET app-secrets\n")  # no toolchain in it: a secret by its name
    path = f"{home}/.virtualenvs/tokenizers/bin:{home}/.config/token-service/bin"
    monkeypatch.setenv("PATH", f"{path}:{os.environ['PATH']}")
    (home / "proj").mkdir()
    box = Sandbox(home / "proj", backend)
    out = await run(coding_tools(box.root, sandbox=box)[0],
                    "tok; ~/.local/share/virtualenvs/secret-santa-Ab12/bin/santa; svc; cat ~/.cache/tiktoken/*; "
                    "cat ~/.config/token-service/token.json ~/.config/app-secrets/keys 2>/dev/null; echo end")
    assert out.split("\n")[:5] == ["ran tok", "ran santa", "ran svc", "bpe ranks", "end"], out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", [".config/token-service", ".secrets-manager"])
async def test_a_workspace_named_like_a_secret_is_yours(backend: str, where: str, home: Path) -> None:
    """``-w ~/.config/token-service`` (a folder the patterns match) and ``-w ~/.secrets-manager``
    (a dotfolder ``.*secret*`` matches): the workspace is readable and writable; a secret file in
    it (``token.json``) stays masked (under Landlock, as with ``-w ~``, the folder holding it takes
    no new entries: docs/sandbox.md; its subfolders do)."""
    ws = home / where
    put(ws / "README", "mine\n")
    put(ws / "token.json", "SECRET token\n")
    (ws / "src").mkdir()
    made = "made.txt" if backend == "bwrap" else "src/made.txt"
    box = Sandbox(ws, backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = await run(coding_tools(box.root, sandbox=box)[0],
                        f"cat README; echo new > {made} && cat {made}; echo mine > README; cat README; "
                        "cat token.json 2>/dev/null; echo end")
    assert out.split("\n")[:4] == ["mine", "new", "mine", "end"], out
    said = [str(w.message) for w in caught if "writable folder" in str(w.message)]
    assert said == ([] if backend == "bwrap" else [
        f"kimik3: {ws}/token.json is a secret in a writable folder; Landlock keeps it unreadable only by letting the "
        f"folders on the way to it ({ws} and those above it in the workspace) take no new entries, renames or "
        "removals (their existing files and subfolders stay writable); move it out, or use bwrap (--sandbox bwrap)"])
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_secrets_named_in_another_case_or_one_folder_deeper_are_masked(backend: str, home: Path) -> None:
    """The name patterns match in any case (``~/.API_TOKEN``, ``~/.Zsh_History``,
    ``~/.config/app/Token.json``) and one folder deeper in ``~/.config`` (files only: an
    application's folder ``~/.config/app/plugins/secrets-plugin`` that deep stays readable); fish's
    universal variables (``set -U OPENAI_API_KEY``), an API key file by its name, the mongo
    shell's history and aider's settings are secrets."""
    for name in (".API_TOKEN", ".Zsh_History", ".config/app/Token.json", ".config/app/auth/credentials.json",
                 ".config/app/auth/Client_Secret.json", ".config/fish/fish_variables",
                 ".config/io.datasette.llm/keys.json", ".config/app/OpenAI-API-Key.txt", ".dbshell", ".aider.conf.yml"):
        put(home / name, f"SECRET {name}\n")
    put(home / ".config/app/plugins/secrets-plugin/README", "plugin\n")
    put(home / ".config/app/auth/settings.json", "settings\n")
    (home / "proj").mkdir()
    box = Sandbox(home / "proj", backend)
    out = await run(coding_tools(box.root, sandbox=box)[0],
                    "cat ~/.config/app/plugins/secrets-plugin/README ~/.config/app/auth/settings.json; cat ~/.API_TOKEN "
                    "~/.Zsh_History ~/.config/app/Token.json ~/.config/app/auth/credentials.json "
                    "~/.config/app/auth/Client_Secret.json ~/.config/fish/fish_variables ~/.dbshell ~/.aider.conf.yml "
                    "~/.config/io.datasette.llm/keys.json ~/.config/app/OpenAI-API-Key.txt 2>/dev/null; echo end")
    assert out.split("\n")[:3] == ["plugin", "settings", "end"], out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_hard_link_made_during_the_run_to_a_file_in_a_secret_folder_is_masked(backend: str,
                                                                                       home: Path) -> None:
    """The host links ``~/.aws/credentials`` (inside the secret folder ``~/.aws``) into the home
    and the workspace while the sandbox runs: both names are masked from the next command on (the
    sandbox restarts, and says so). A file inside replaced by rename (a token cache refreshed)
    restarts nothing."""
    put(home / ".aws/credentials", "SECRET aws\n")
    put(home / ".aws/sso/cache/t.json", "SECRET sso 1\n")
    put(home / "notes/ordinary", "ordinary\n")
    (home / "proj").mkdir()
    box = Sandbox(home / "proj", backend)
    bash = coding_tools(box.root, sandbox=box)[0]
    assert (await run(bash, "echo first")).split("\n")[0] == "first"
    put(home / ".aws/sso/cache/t.json.new", "SECRET sso 2\n").rename(home / ".aws/sso/cache/t.json")
    out = await run(bash, "cat ~/notes/ordinary; cat ~/.aws/sso/cache/t.json 2>/dev/null; echo end")
    assert out.split("\n")[:3] == ["ordinary", "end", "[exit code: 0, " + out.split("[exit code: 0, ")[1]], out
    os.link(home / ".aws/credentials", home / "notes/creds")
    os.link(home / ".aws/sso/cache/t.json", home / "proj/t.json")
    out = await run(bash, "cat ~/notes/creds t.json 2>/dev/null; echo end")
    tmp = "/tmp" if backend == "bwrap" else "TMPDIR"
    assert out.split("\n")[:2] == ["end", "[the secrets changed outside the sandbox (.aws/credentials, "
                                   ".aws/sso/cache/t.json); it was restarted to mask them: nothing was running in "
                                   f"it, its private {tmp} starts empty]"], out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_secret_name_linked_to_the_home_or_the_root_hides_neither(backend: str, home: Path) -> None:
    """``~/.histdb -> ~`` and ``~/.config/app/secrets -> /`` (a name the patterns match, linked
    to the home and to the root): the home's toolchain and the system still run, the real
    secrets in the home stay masked."""
    (home / ".histdb").symlink_to(home)
    put(home / ".config/app/x", "x\n")
    (home / ".config/app/secrets").symlink_to("/")
    tool(home / ".local/bin", "mine")
    put(home / ".netrc", "SECRET netrc\n")
    (home / "proj").mkdir()
    box = Sandbox(home / "proj", backend)
    out = await run(coding_tools(box.root, sandbox=box)[0],
                    "~/.local/bin/mine; /bin/echo system; cat ~/.netrc 2>/dev/null; echo end")
    assert out.split("\n")[:3] == ["ran mine", "system", "end"], out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_symlink_loops_and_a_fifo_or_socket_secret_do_not_stop_the_sandbox(backend: str, home: Path) -> None:
    """A home with symlink loops (``~/.loopa <-> ~/.loopb``, ``~/.config/loop -> ../.config``, ``~/.self
    -> .``) and secrets that are a FIFO (``~/.netrc``) and a listening unix socket
    (``~/.git-credentials``): the sandbox starts, reading the FIFO neither blocks nor reads the
    host's writer, the socket is not connectable under bwrap (Landlock: a documented limit)."""
    (home / ".loopa").symlink_to(home / ".loopb")
    (home / ".loopb").symlink_to(home / ".loopa")
    put(home / ".config/other/settings", "ordinary\n")
    (home / ".config/loop").symlink_to("../.config")
    (home / ".self").symlink_to(".")
    os.mkfifo(home / ".netrc")
    listener = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(home)  # a relative name: a unix socket's path is at most 107 bytes, the checkout's may be longer
    try:
        listener.bind(".git-credentials")
    finally:
        os.chdir(cwd)
    listener.listen(1)
    (home / "proj").mkdir()
    box = Sandbox(home / "proj", backend)
    probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('connected')\n"
             "except OSError: print('refused')")
    try:
        out = await run(coding_tools(box.root, sandbox=box)[0],
                        f"cat ~/.config/loop/other/settings; timeout 5 cat ~/.netrc 2>/dev/null; echo fifo=$?; "
                        f"cd ~ && {sys.executable} -c \"{probe}\" .git-credentials")
    finally:
        listener.close()
    connect = "refused" if backend == "bwrap" else "connected"
    assert out.split("\n")[:3] == ["ordinary", "fifo=1", connect], out
    await box.aclose()


@needs_bwrap
async def test_a_secret_replaced_while_a_command_runs_is_said_then_masked(home: Path) -> None:
    """bwrap, a foreground command still running when the host replaces ``~/.netrc`` by rename and
    a second command starts: the sandbox is not restarted under the running one (it finishes, its
    /tmp kept); the second's result says the secret is unmasked until it ends; the third restarts."""
    put(home / ".netrc", "SECRET 1\n")
    (home / "proj").mkdir()
    box = Sandbox(home / "proj", "bwrap")
    bash = coding_tools(box.root, sandbox=box)[0]
    await run(bash, "echo kept > /tmp/state")
    long = asyncio.create_task(run(bash, "sleep 2; cat /tmp/state"))
    await asyncio.sleep(0.5)
    put(home / ".netrc.new", "SECRET 2\n").rename(home / ".netrc")
    second = await run(bash, "echo second")
    assert (await long).split("\n")[0] == "kept"
    assert second.split("\n")[:2] == ["second", "[the secrets changed outside the sandbox (.netrc) while processes "
                                      "run in it (a background job, or what a command left running): they are not "
                                      "masked until those end; the sandbox is restarted at the next command after "
                                      "that]"], second
    third = await run(bash, "cat ~/.netrc 2>/dev/null; echo third")
    assert third.split("\n")[:2] == ["third", "[the secrets changed outside the sandbox (.netrc); it was restarted "
                                     "to mask them: nothing was running in it, its private /tmp starts empty]"], third
    await box.aclose()
