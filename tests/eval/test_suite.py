"""The suite format: task.toml fields, each wrong input named, selection, the digest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimik3 import Budgets, UserError
from kimik3.eval import EvalError, load_suite

from .helpers import write_task

ROOT = Path(__file__).resolve().parents[2]


def test_a_task_reads_every_field(tmp_path: Path) -> None:
    write_task(tmp_path, "full", "Do it.", "test -f done", {"a.txt": "x\n"}, setup="touch ready", timeout=30,
               check_timeout=5.5, tags=["one", "two"], budgets={"turns": 4, "usd": 0.5})
    (tmp_path / "README.md").write_text("not a task\n")
    (tmp_path / "_shared").mkdir()  # skipped: leading underscore
    (task,) = load_suite(tmp_path).tasks
    assert (task.name, task.instruction, task.check, task.setup) == ("full", "Do it.", "test -f done", "touch ready")
    assert (task.timeout, task.check_timeout, task.tags) == (30.0, 5.5, ("one", "two"))
    assert task.budgets == Budgets(turns=4, usd=0.5)
    assert task.workspace == tmp_path.resolve() / "full" / "workspace" and task.repo is None


@pytest.mark.parametrize(("fields", "why"), [
    ({"instruction": None}, "`instruction` is missing"),
    ({"check": ""}, "`check` must be non-empty text"),
    ({"chek": "x"}, "unknown field chek"),
    ({"timeout": 0}, "`timeout` must be a number of seconds > 0"),
    ({"timeout": True}, "`timeout` must be a number of seconds > 0"),
    ({"tags": "a"}, "`tags` must be a list of non-empty strings"),
    ({"budgets": {"turn": 3}}, "unknown budget turn"),
    ({"budgets": {"turns": 0}}, r"Budgets.turns \(max_turns\) must be an integer >= 1"),
    ({"budgets": 3}, "`budgets` must be a table"),
    ({"repo": "x.git"}, "`repo` and `commit` go together"),
    ({"setup": 5}, "`setup` must be non-empty text"),
])
def test_each_wrong_field_is_an_eval_error_naming_the_file(tmp_path: Path, fields: dict[str, object], why: str) -> None:
    base: dict[str, object] = {"instruction": "Do it.", "check": "true"}
    base.update(fields)
    lines = [f"{k} = {v!r}".replace("'", '"') if not isinstance(v, dict) else
             f"{k} = {{ {', '.join(f'{a} = {b}' for a, b in v.items())} }}" for k, v in base.items() if v is not None]
    lines = [line.replace("True", "true") for line in lines]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "task.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(EvalError, match=rf"t/task.toml: {why}"):
        load_suite(tmp_path)


def test_unreadable_suites_are_named(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="is not a suite directory"):
        load_suite(tmp_path / "missing")
    with pytest.raises(EvalError, match="holds no task folder"):
        load_suite(tmp_path)
    (tmp_path / "t").mkdir()
    with pytest.raises(EvalError, match=r"a task folder without a task\.toml"):
        load_suite(tmp_path)
    (tmp_path / "t" / "task.toml").write_text('instruction = "unclosed\n')
    with pytest.raises(EvalError, match=r"t/task\.toml: cannot read it"):
        load_suite(tmp_path)
    (tmp_path / "t" / "task.toml").write_bytes(b'instruction = "\xff"\ncheck = "true"\n')
    with pytest.raises(EvalError, match="cannot read it"):
        load_suite(tmp_path)


def test_a_task_has_a_workspace_or_a_repo_not_both(tmp_path: Path) -> None:
    write_task(tmp_path, "t", "x", "true", {"a": "b"}, repo="r.git", commit="abc")
    with pytest.raises(EvalError, match="either `repo` or a workspace/ folder"):
        load_suite(tmp_path)


def test_a_workspace_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "s", "t", "x", "true")
    (tmp_path / "elsewhere").mkdir()
    (folder / "workspace").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(EvalError, match="must be a directory"):
        load_suite(tmp_path / "s")


def test_select_by_glob_or_tag(tmp_path: Path) -> None:
    for name, tags in (("grep-a", ["grep"]), ("grep-b", ["grep"]), ("plain-c", ["plain", "unknown"])):
        write_task(tmp_path, name, "x", "true", tags=tags)
    suite = load_suite(tmp_path)
    assert [t.name for t in suite.select("grep-*")] == ["grep-a", "grep-b"]
    assert [t.name for t in suite.select("unknown")] == ["plain-c"]
    assert len(suite.select(None)) == 3
    with pytest.raises(UserError, match=r"no task of .* matches 'zz'"):
        suite.select("zz")


def test_the_digest_changes_with_any_byte_name_or_link(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "t", "x", "true", {"a.txt": "one\n"})
    first = load_suite(tmp_path).digest
    assert load_suite(tmp_path).digest == first
    (folder / "workspace" / "a.txt").write_text("one!\n")
    second = load_suite(tmp_path).digest
    (folder / "workspace" / "a.txt").rename(folder / "workspace" / "b.txt")
    third = load_suite(tmp_path).digest
    (folder / "workspace" / "l").symlink_to("b.txt")
    fourth = load_suite(tmp_path).digest
    assert len({first, second, third, fourth}) == 4
    (tmp_path / "README.md").write_text("about the suite\n")  # not part of any task
    assert load_suite(tmp_path).digest == fourth


def test_the_shipped_suite_loads_with_its_unknown_tasks_tagged() -> None:
    suite = load_suite(ROOT / "evals" / "k3-tiny")
    assert len(suite.tasks) >= 20
    unknown = [t.name for t in suite.tasks if "unknown" in t.tags]
    assert unknown == ["unknown-fix-bug", "unknown-largest", "unknown-rename", "unknown-sort"]
    assert all(t.workspace is not None for t in suite.tasks)


# -- issue 40: a task.toml that is not a small regular file ----------------------------------

_LOAD_IN_A_CHILD = "import sys; from kimik3.eval import load_suite, EvalError\n" \
                   "try:\n    load_suite(sys.argv[1])\nexcept EvalError as e:\n    print(e)\n"


def _load_in_a_child(suite: Path) -> str:
    """load_suite in a child process (a blocking open would hang it: the limit ends it)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LOAD_IN_A_CHILD, str(suite)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_task_toml_that_is_a_fifo_is_an_eval_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    os.mkfifo(tmp_path / "t" / "task.toml")
    assert _load_in_a_child(tmp_path) == (f"{tmp_path.resolve()}/t/task.toml: cannot read it: "
                                          f"'{tmp_path.resolve()}/t/task.toml' is not a regular file "
                                          "(a FIFO, device or socket)")


def test_a_task_toml_linked_to_a_device_or_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "task.toml").symlink_to("/dev/zero")
    assert "zero/task.toml' is not a regular file (a FIFO, device or socket)" in _load_in_a_child(tmp_path)
    os.unlink(tmp_path / "zero" / "task.toml")
    (tmp_path / "zero").rmdir()
    huge = tmp_path / "huge.toml"  # a variant: a sparse 4 GiB regular file, linked in
    with open(huge, "wb") as f:
        f.truncate(4 << 30)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "task.toml").symlink_to(huge)
    with pytest.raises(EvalError, match=r"big/task.toml: cannot read it: '.*big/task.toml' is larger than "
                                        r"1,048,576 bytes$"):
        load_suite(tmp_path)


def test_a_task_toml_linked_to_a_socket_a_loop_or_a_folder_is_refused_unread(tmp_path: Path) -> None:
    # a variant of issue 40's FIFO (a40c): a link to a listening unix socket, a symlink loop, and a
    # folder named task.toml: each an EvalError naming the file, never a hang or a traceback
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.sock"))
    sock.listen()
    (tmp_path / "sock").mkdir()
    (tmp_path / "sock" / "task.toml").symlink_to(tmp_path / "s.sock")
    where = f"{tmp_path.resolve()}/sock/task.toml"
    assert _load_in_a_child(tmp_path) == f"{where}: cannot read it: '{where}' is not a regular file " \
                                         "(a FIFO, device or socket)"
    sock.close()
    os.unlink(tmp_path / "sock" / "task.toml")
    (tmp_path / "sock" / "task.toml").symlink_to("task.toml")  # a link to itself
    assert _load_in_a_child(tmp_path) == f"{where}: cannot read it: [Errno 40] Too many levels of symbolic " \
                                         f"links: '{where}'"
    os.unlink(tmp_path / "sock" / "task.toml")
    (tmp_path / "sock" / "task.toml").mkdir()
    assert _load_in_a_child(tmp_path) == f"{where}: cannot read it: '{where}' is a directory"
