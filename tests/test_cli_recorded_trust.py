"""A session file is data: ``kimik3 resume SESSION`` without engine options never takes from it the
options that run code (``--trust-remote-code``, ``--engine-arg``) unless given again, takes none
from a file that is not the user's own or that lies in the workspace (where the agent's tools can
rewrite it), refuses a value that would read as an option, and the header never holds a credential
(attack 4 on the recorded engine options)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from kimik3.cli import engine as cli_engine
from kimik3.cli import recorded
from kimik3.cli import run as cli_run
from tests.test_cli import invoke, make_repo, write_script
from tests.test_cli_papercuts import WRITE_B, first_run, header_with


class Chosen(Exception):
    """Raised by the spy engine_from: the options resume would start an engine with."""


def spy(monkeypatch: pytest.MonkeyPatch) -> list[cli_engine.Options]:
    """From now on, the options resume builds its engine from (nothing is started: exit 7)."""
    seen: list[cli_engine.Options] = []

    def engine_from(o: cli_engine.Options) -> object:
        seen.append(o)
        raise SystemExit(7)

    monkeypatch.setattr(cli_run, "engine_from", engine_from)
    return seen


def resume(session: Path, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    out = invoke(["resume", str(session), "again", "--plain", "--sandbox", "none", *extra], tmp_path / "home")
    return out.exit_code, out.stdout, out.stderr


@pytest.mark.parametrize(("engine", "missing"), [
    (["--model-path", "MODEL", "--trust-remote-code"], "--trust-remote-code"),
    (["--model-path", "MODEL", "--engine-arg", 'worker_extension_cls="evil.X"', "--max-model-len", "64"],
     "--engine-arg 'worker_extension_cls=\"evil.X\"'"),
    (["--trust-remote-code", "--model-path", "MODEL", "--engine-arg", "logits_processors=[\"evil.P\"]"],
     "--trust-remote-code --engine-arg 'logits_processors=[\"evil.P\"]'"),
    # every preset turns trust_remote_code on (the K3 recipe's base_args)
    (["--model-path", "MODEL", "--preset", "auto", "--feature", "spec_decoding"], "--preset auto"),
])
def test_recorded_code_options_are_never_taken_without_being_given_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: list[str], missing: str) -> None:
    session, _, _ = first_run(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    before = header_with(session, engine=[str(model) if e == "MODEL" else e for e in engine])
    chosen = spy(monkeypatch)
    code, stdout, stderr = resume(session, tmp_path)
    assert (code, stdout, chosen) == (1, "", [])
    assert stderr == (f"error: SessionError: session {session} records {missing}, which can run code and is never "
                      f"taken from a session file; nothing was run: give it again (kimik3 resume {session} "
                      f"{missing})\n")
    assert session.read_bytes() == before


def test_code_options_given_again_run_with_the_recorded_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session, _, _ = first_run(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    header_with(session, engine=["--model-path", str(model), "--trust-remote-code", "--engine-arg", "a=1",
                                 "--max-model-len", "64", "--preset", "auto"])
    chosen = spy(monkeypatch)
    code, stdout, _ = resume(session, tmp_path, "--trust-remote-code", "--engine-arg", "b=2", "--preset", "auto")
    assert code == 7
    assert stdout.splitlines()[0] == f"engine as the session records it: --model-path {model} --max-model-len 64"
    (o,) = chosen
    # the given engine args replace the recorded ones; trust as given on this command line
    assert (o.model_path, o.trust_remote_code, o.engine_arg, o.max_model_len, o.preset) == (
        str(model), True, [("b", 2)], 64, "auto")


def test_a_base_url_is_taken_only_from_the_users_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session, _, _ = first_run(tmp_path)
    header_with(session, engine=["--base-url", "http://attacker.example/v1", "--model", "k3"])
    session.chmod(0o666)  # anyone may have written it (variant: group-writable)
    chosen = spy(monkeypatch)
    code, stdout, stderr = resume(session, tmp_path)
    assert (code, stdout, chosen) == (1, "", [])
    assert stderr == (f"error: SessionError: session {session} is not only yours (owner uid {os.geteuid()}, mode "
                      "666), so its engine options are not taken; nothing was run: give the engine options "
                      "(--base-url URL ...)\n")
    session.chmod(0o620)
    assert resume(session, tmp_path)[2].startswith(f"error: SessionError: session {session} is not only yours")
    session.chmod(0o600)  # the user's own: taken, and the first line says exactly what
    code, stdout, _ = resume(session, tmp_path)
    assert code == 7
    assert stdout.splitlines()[0] == "engine as the session records it: --base-url http://attacker.example/v1 --model k3"
    assert chosen[0].base_url == "http://attacker.example/v1"


def test_a_session_in_its_workspace_chooses_no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path)
    session = repo / "notes" / "s.jsonl"  # where the agent's write_file reaches
    session.parent.mkdir()
    script = write_script(tmp_path / "write.json", WRITE_B)
    out = invoke(["run", "write b", "-w", str(repo), "--script", str(script), "--session", str(session), "--plain",
                  "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 0, out.output
    before = header_with(session, engine=["--base-url", "http://attacker.example/v1", "--model", "k3"])
    chosen = spy(monkeypatch)
    code, stdout, stderr = resume(session, tmp_path)
    assert (code, stdout, chosen) == (1, "", [])
    assert stderr == (f"error: SessionError: session {session} lies in its workspace {repo}, where the agent's "
                      "tools can rewrite it, so its engine options are not taken; nothing was run: give the engine "
                      "options (--base-url URL ...)\n")
    assert session.read_bytes() == before
    # variant: the session named through a linked folder outside is still in the workspace
    alias = tmp_path / "alias"
    alias.symlink_to(session.parent)
    assert resume(alias / "s.jsonl", tmp_path)[2].startswith(
        f"error: SessionError: session {alias / 's.jsonl'} lies in its workspace {repo}, where")
    # an engine given on the command line runs it as before
    other = write_script(tmp_path / "other.json", [])
    assert resume(session, tmp_path, "--script", str(other))[0] == 7


@pytest.mark.parametrize("engine", [
    ["--model", "--trust-remote-code"],
    ["--dtype", "-x", "--model-path", "/"],
    ["--base-url", "--engine-arg", "--model", "k3"],
])
def test_a_value_that_reads_as_an_option_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          engine: list[str]) -> None:
    session, _, _ = first_run(tmp_path)
    header_with(session, engine=engine)
    chosen = spy(monkeypatch)
    code, _, stderr = resume(session, tmp_path)
    assert (code, chosen) == (1, [])
    assert stderr == (f'error: SessionError: {session}:1: malformed session header: "engine" gives {engine[0]} the '
                      f"value {engine[1]!r}, which would read as an option\n")


def test_the_header_holds_no_credential_from_the_environment_or_an_engine_arg(tmp_path: Path) -> None:
    ctx = recorded.recorded_command.make_context("kimik3 run", [
        "--model-path", str(tmp_path), "--engine-arg", 'kv_transfer_config={"auth_token": "t0p"}',
        "--engine-arg", 'download_dir="https://u:pw@h/x"', "--engine-arg", "max_num_seqs=8"])
    assert recorded.engine_argv(cli_engine.options_from(ctx.params)) == [
        "--model-path", str(tmp_path), "--engine-arg", "max_num_seqs=8"]
    # names that only mention tokens are kept (the continue line would lose them); secret ones are not
    ctx = recorded.recorded_command.make_context("kimik3 run", [
        "--model-path", str(tmp_path), "--engine-arg", "max_num_batched_tokens=4096",
        "--engine-arg", 'tokenizer_mode="kimi_k3"', "--engine-arg", 'hf_token="hf_x"',
        "--engine-arg", 'hf_overrides={"rope": {"api_key": "k"}}'])
    assert recorded.engine_argv(cli_engine.options_from(ctx.params)) == [
        "--model-path", str(tmp_path), "--engine-arg", "max_num_batched_tokens=4096",
        "--engine-arg", 'tokenizer_mode="kimi_k3"']
    # a CLI run with the key in KIMIK3_API_KEY: not a byte of it in the session file
    repo, session = make_repo(tmp_path), tmp_path / "s.jsonl"
    script = write_script(tmp_path / "w.json", WRITE_B)
    env: dict[str, str | None] = {"KIMIK3_HOME": str(tmp_path / "home"), "KIMIK3_API_KEY": "sk-env-s3cret"}
    from click.testing import CliRunner

    from kimik3.cli import main
    out = CliRunner().invoke(main, ["run", "write b", "-w", str(repo), "--script", str(script), "--session",
                                    str(session), "--plain", "--sandbox", "none"], env=env)
    assert out.exit_code == 0, out.output
    assert json.loads(session.read_text().splitlines()[0])["engine"] == ["--script", str(script.resolve())]
    assert b"s3cret" not in session.read_bytes()
    assert shlex.split(shlex.join(["--script", str(script)])) == ["--script", str(script)]


def test_the_continue_line_gives_the_code_options_again_and_runs_as_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3 import ScriptedEngine

    model, ws = tmp_path / "model", tmp_path / "ws"
    model.mkdir()
    ws.mkdir()
    session = tmp_path / "s.jsonl"
    monkeypatch.setattr(cli_run, "engine_from", lambda o: ScriptedEngine([]))  # no reply: the task is kept
    out = invoke(["run", "task", "--model-path", str(model), "--preset", "auto", "--trust-remote-code",
                  "--engine-arg", "max_num_seqs=8", "--max-model-len", "64", "-w", str(ws), "--session",
                  str(session), "--plain", "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 1, out.output
    line = (f"kimik3 resume {session} -w {ws} --preset auto --trust-remote-code --engine-arg max_num_seqs=8")
    assert out.stdout.splitlines()[-1] == f"the task is kept, unanswered, in {session}; continue with: {line}"
    chosen = spy(monkeypatch)
    again = invoke([*shlex.split(line)[1:], "--plain", "--sandbox", "none"], tmp_path / "home")
    assert again.exit_code == 7, again.output
    (o,) = chosen
    assert (o.model_path, o.preset, o.trust_remote_code, o.engine_arg, o.max_model_len) == (
        str(model), "auto", True, [("max_num_seqs", 8)], 64)
    assert again.stdout.splitlines()[0] == f"engine as the session records it: --model-path {model} --max-model-len 64"


def test_the_first_line_names_only_the_recorded_options_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from kimik3.cli import main

    session, _, _ = first_run(tmp_path)
    header_with(session, engine=["--base-url", "http://127.0.0.1:9/v1", "--model", "k3", "--request-timeout", "30"])
    chosen = spy(monkeypatch)
    code, stdout, _ = resume(session, tmp_path, "--model", "mine")  # given anew on the command line
    assert code == 7
    assert stdout.splitlines()[0] == "engine as the session records it: --base-url http://127.0.0.1:9/v1 --request-timeout 30"
    assert (chosen[0].base_url, chosen[0].model, chosen[0].request_timeout) == ("http://127.0.0.1:9/v1", "mine", 30.0)
    # variant: by its environment variable
    out = CliRunner().invoke(main, ["resume", str(session), "again", "--plain", "--sandbox", "none"],
                             env={"KIMIK3_HOME": str(tmp_path / "home"), "KIMIK3_MODEL": "from-env"})
    assert out.exit_code == 7
    assert out.stdout.splitlines()[0] == ("engine as the session records it: --base-url http://127.0.0.1:9/v1 "
                                          "--request-timeout 30")
    assert chosen[1].model == "from-env"


def test_approves_continue_line_gives_the_recorded_code_options_again_and_runs_as_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 40 point 5, variant: `kimik3 approve` printed `kimik3 resume SESSION` alone for a run on
    # an engine with code options, which resume then refused; from another folder
    from tests.harness.test_resume_workspace import deferred

    session, ws, other = deferred(tmp_path)
    model = tmp_path / "my model"
    model.mkdir()
    header_with(session, engine=["--model-path", str(model), "--preset", "auto", "--trust-remote-code",
                                 "--engine-arg", "max_num_seqs=8"])
    monkeypatch.chdir(other)
    out = invoke(["approve", str(session), "--all"], tmp_path / "home")
    assert out.exit_code == 0, out.output
    line = out.stdout.splitlines()[-1]
    assert line == (f"continue with: kimik3 resume {shlex.quote(str(session))} --preset auto --trust-remote-code "
                    "--engine-arg max_num_seqs=8")
    chosen = spy(monkeypatch)
    again = invoke([*shlex.split(line.removeprefix("continue with: "))[1:], "--plain", "--sandbox", "none"],
                   tmp_path / "home")
    assert again.exit_code == 7, again.output  # the engine chosen, as recorded and given again
    (o,) = chosen
    assert (o.model_path, o.preset, o.trust_remote_code, o.engine_arg) == (str(model), "auto", True,
                                                                           [("max_num_seqs", 8)])
    assert (ws / "marker.txt").exists() and (other / "marker.txt").exists()  # nothing ran yet


@pytest.mark.parametrize("inside", [True, False])
def test_the_continue_line_of_a_credentialed_base_url_runs_as_printed_without_it(tmp_path: Path,
                                                                                inside: bool) -> None:
    # attacker variant (x40b): the continue line gave `--base-url 'http://***@HOST/v1?key=***'`,
    # which connects as the user "***" with the key "***"; a URL whose credentials are not printed
    # is left out, and the line runs as printed where the URL came from, KIMIK3_BASE_URL
    from click.testing import CliRunner

    from kimik3.cli import main
    from tests.test_redaction import _CLEAN, dead_url, no_secret

    ws = tmp_path / "ws"
    ws.mkdir()
    session = (ws if inside else tmp_path) / "s.jsonl"
    url = dead_url()
    env = {**_CLEAN, "KIMIK3_HOME": str(tmp_path / "home"), "KIMIK3_BASE_URL": url}
    first = CliRunner().invoke(main, ["run", "task", "-w", str(ws), "--model", "k3", "--session", str(session),
                                      "--plain", "--sandbox", "none"], env=env)
    assert first.exit_code == 1, first.output
    line = first.stdout.splitlines()[-1].split("; continue with: ")[1]
    assert line == f"kimik3 resume {session} -w {ws}" + (" --model k3" if inside else "")
    again = CliRunner().invoke(main, [*shlex.split(line)[1:], "--plain", "--sandbox", "none"], env=env)
    assert again.exit_code == 1, again.output
    assert again.stderr.startswith(f"error: APIConnectionError: cannot reach the endpoint http://***@"
                                   f"127.0.0.1:{url.split(':')[3].split('/')[0]}/v1/?api-key=***"), again.stderr
    no_secret(first.output, again.output, session.read_bytes())


def test_a_continue_line_naming_a_path_with_control_characters_runs_as_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # attacker variant (x40b): the printed line drops control characters and bidi overrides
    # (printable), so a workspace or session path holding them was named as another path;
    # such a word is printed in bash's $'...' form, which runs as printed; $ ` and - stay quoted
    import subprocess

    from kimik3 import ScriptedEngine

    ws = tmp_path / "w\x01s\u202e$(x)`y`"
    ws.mkdir()
    session = tmp_path / "-s $HOME\x7f\x9b.jsonl"
    monkeypatch.setattr(cli_run, "engine_from", lambda o: ScriptedEngine([]))  # no reply: the task is kept
    out = invoke(["run", "task", "--model", "k3", "--base-url", "http://127.0.0.1:9/v1", "-w", str(ws),
                  "--session", str(session), "--plain", "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 1, out.output
    line = out.stdout.splitlines()[-1].split("; continue with: ")[1]
    assert line == f"kimik3 resume $'{tmp_path}/-s $HOME\\x7f\\u009b.jsonl' -w $'{tmp_path}/w\\x01s\\u202e$(x)`y`'"
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True).stdout
    assert words.split(b"\0") == [b"kimik3", b"resume", os.fsencode(session), b"-w", os.fsencode(ws), b""]
