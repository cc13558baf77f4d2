"""The sandbox's mechanics an attacker found open (issue 39), for each backend (real bubblewrap,
real Landlock): a secret reached by a hard link, a secret behind a symlinked folder (dotfiles),
masks that went stale (a secret replaced by rename, or made after the start), a toolchain whose
path goes through a symlink into a hidden folder, and git in a workspace that is a subfolder of a
repository under /tmp. Every check reads what a real command printed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimik3.tools.coding import Sandbox, _sandbox

from ..harness.helpers import make_repo
from ..procs import needs_bwrap
from .test_sandbox_policy import bash_in, run

needs_landlock = pytest.mark.skipif(_sandbox._landlock_abi() < 1, reason="this kernel has no Landlock")
BACKENDS = [pytest.param("bwrap", marks=needs_bwrap), pytest.param("landlock", marks=needs_landlock)]
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")


@pytest.fixture
def home(pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home outside /tmp and the real $HOME (pytest's cache in the checkout), with a workspace."""
    h = pytestconfig.cache.mkdir("sandbox") / uuid.uuid4().hex / "home"
    (h / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    yield h
    shutil.rmtree(h.parent, ignore_errors=True)


def put(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path




@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_hard_link_to_a_secret_is_masked_too(backend: str, home: Path) -> None:
    """Hard links made before the run to a secret (in the home's top, deep in the home, in the
    workspace) are not readable, and the secret itself stays unreadable under Landlock (a rule on
    the link would re-open its inode)."""
    key = put(home / ".ssh/id_ed25519", "SECRET key\n")
    netrc = put(home / ".netrc", "SECRET netrc\n")
    put(home / "notes/deep/ordinary.txt", "ordinary\n")
    os.link(key, home / "hl_id")
    os.link(key, home / "notes/deep/hl_id")
    os.link(netrc, home / "proj/netrc_copy")
    box = Sandbox(home / "proj", backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = await run(bash_in(box), "cat ~/hl_id ~/notes/deep/hl_id netrc_copy ~/.ssh/id_ed25519 ~/.netrc "
                                      "~/notes/deep/ordinary.txt 2>/dev/null; touch made 2>/dev/null; echo made=$?")
    assert out.split("\n")[:2] == ["ordinary", f"made={0 if backend == 'bwrap' else 1}"], out
    # Landlock keeps the link in the workspace out as -w ~ keeps a secret: the workspace's top takes
    # no new entry, and says so
    assert [str(w.message) for w in caught if "several names" in str(w.message)] == ([] if backend == "bwrap" else [
        f"kimik3: {home}/proj/netrc_copy is a secret file with several names (hard links) in a writable folder; "
        "Landlock keeps it unreadable only by letting the folders on the way to it take no new entries (commands "
        "cannot create files there); remove the link, or use bwrap (--sandbox bwrap)"])
    assert "SECRET" not in out
    assert {p for p in box.secrets if "hl_id" in p or "netrc_copy" in p} == {
        str(home / "hl_id"), str(home / "notes/deep/hl_id"), str(home / "proj/netrc_copy")}
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_hard_link_in_the_toolchain_shown_from_tmp_is_masked(backend: str, home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The variant: the link lies in a folder the sandbox shows from /tmp (a PATH entry there)."""
    netrc = put(home / ".netrc", "SECRET netrc\n")
    tools = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        if os.stat(tools).st_dev != os.stat(home).st_dev:
            pytest.skip("/tmp is another file system than the checkout: no hard link between them")
        put(tools / "bin/ordinary", "ordinary\n")
        os.link(netrc, tools / "bin/netrc")
        monkeypatch.setenv("PATH", f"{tools}/bin:{os.environ['PATH']}")
        box = Sandbox(home / "proj", backend)
        out = await run(bash_in(box), f"cat {tools}/bin/ordinary {tools}/bin/netrc ~/.netrc 2>/dev/null")
        assert out.split("\n")[0] == "ordinary" and "SECRET" not in out, out
        await box.aclose()
    finally:
        shutil.rmtree(tools, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_hard_link_not_found_is_said(backend: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hard link outside the home and the workspace cannot be found cheaply: the sandbox says
    so (a RuntimeWarning naming the secret and how many names were not found). The link's folder
    is kept out of the places looked through: a checkout under /tmp is itself shown (the
    interpreter's sys.path) and so looked through, which would find the link."""
    key = put(home / ".ssh/id_ed25519", "SECRET key\n")
    elsewhere = home.parent / "elsewhere"
    os.link(key, elsewhere)
    real = _sandbox.other_names
    monkeypatch.setattr(_sandbox, "other_names", lambda found, roots: real(
        found, [r for r in roots if not elsewhere.is_relative_to(r)]))
    box = Sandbox(home / "proj", backend)
    with pytest.warns(RuntimeWarning) as caught:
        await run(bash_in(box), "true")
    assert [str(w.message) for w in caught if "hard link" in str(w.message)] == [
        f"kimik3: {key} has 1 more name (a hard link) that kimik3 did not find in the home and the workspace (it "
        "looks through 20000 folders at most): that name stays readable in the sandbox; remove the link or add it "
        "with --deny-read"]
    out = await run(bash_in(box), "cat ~/.ssh/id_ed25519 2>/dev/null; echo done")  # its own name stays masked
    assert out.split("\n")[0] == "done", out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_secret_behind_a_symlinked_folder_is_masked_by_both_names(backend: str, home: Path) -> None:
    """Dotfiles: ~/.config -> ~/dotfiles/config (the sandbox starts; ~/.config/gh unreadable by
    both names) and a secret file that is itself a symlink (~/.npmrc -> ~/dotfiles/npmrc)."""
    put(home / "dotfiles/config/gh/hosts.yml", "SECRET gh\n")
    put(home / "dotfiles/config/other/settings", "ordinary\n")
    put(home / "dotfiles/npmrc", "SECRET npmrc\n")
    (home / ".config").symlink_to(home / "dotfiles/config")
    (home / ".npmrc").symlink_to("dotfiles/npmrc")
    box = Sandbox(home / "proj", backend)
    out = await run(bash_in(box), "cat ~/.config/other/settings ~/.config/gh/hosts.yml ~/dotfiles/config/gh/hosts.yml "
                                  "~/.npmrc ~/dotfiles/npmrc 2>/dev/null")
    assert out.split("\n")[0] == "ordinary", out
    assert "SECRET" not in out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_secret_replaced_or_made_after_the_start_stays_masked(backend: str, home: Path) -> None:
    """The host replaces a secret by rename (editors, aws configure, a token refresh) and makes
    new ones (~/.kube, ~/.config/gcloud in a ~/.config that held none) while the sandbox runs."""
    put(home / ".netrc", "SECRET netrc 1\n")
    put(home / ".config/other/settings", "ordinary\n")
    box = Sandbox(home / "proj", backend)
    bash = bash_in(box)
    first = await run(bash, "cat ~/.netrc ~/.config/other/settings 2>/dev/null")
    assert first.split("\n")[0] == "ordinary" and "SECRET" not in first, first
    put(home / ".netrc.new", "SECRET netrc 2\n").rename(home / ".netrc")
    put(home / ".kube/config", "SECRET kube\n")
    put(home / ".config/gcloud/credentials.db", "SECRET gcloud\n")
    out = await run(bash, "cat ~/.netrc ~/.kube/config ~/.config/gcloud/credentials.db ~/.config/other/settings "
                          "2>/dev/null")
    assert "SECRET" not in out and out.split("\n")[0] == "ordinary", out
    tmp = "/tmp" if backend == "bwrap" else "TMPDIR"
    assert out.split("\n")[-2] == ("[the secrets changed outside the sandbox (.config/gcloud, .kube, .netrc); it was "
                                   f"restarted to mask them: nothing was running in it, its private {tmp} starts empty]")
    again = await run(bash, "cat ~/.netrc 2>/dev/null; echo done")
    assert again.split("\n")[0] == "done" and "secrets changed" not in again, again
    os.link(home / ".netrc", home / "netrc_link")  # a hard link the host makes during the run
    out = await run(bash, "cat ~/netrc_link 2>/dev/null; echo done")
    assert out.split("\n")[:2] == ["done", "[the secrets changed outside the sandbox (.netrc); it was "
                                   f"restarted to mask them: nothing was running in it, its private {tmp} starts "
                                   "empty]"], out
    await box.aclose()


@needs_bwrap
async def test_a_stale_mask_with_a_background_job_running_is_said(home: Path) -> None:
    """bwrap, a background job running: the sandbox is not restarted (the job would be lost);
    the command's output says which secrets are not masked until the job ends."""
    put(home / ".netrc", "SECRET netrc 1\n")
    box = Sandbox(home / "proj", "bwrap")
    bash = bash_in(box)
    job = box.spawn(["/bin/sh", "-c", "sleep 600"], dict(os.environ), background=True)
    put(home / ".netrc.new", "SECRET netrc 2\n").rename(home / ".netrc")
    out = await run(bash, "echo hi")
    assert out.split("\n")[0] == "hi"
    assert out.split("\n")[-2] == (
        "[the secrets changed outside the sandbox (.netrc) while processes run in it (a background job, or what a "
        "command left running): they are not masked until those end; the sandbox is restarted at the next command "
        "after that]"), out
    job.kill()
    job.close()
    await box.aclose()


@pytest.mark.parametrize("workspace", ["clone", "clone/sub"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_venv_symlinked_into_a_hidden_folder_runs_at_its_own_name(
        backend: str, workspace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone under /tmp whose .venv is a symlink to a venv in another folder under /tmp:
    kimik3's interpreter is ``<clone>/.venv/bin/python`` and runs inside by that name."""
    base, other = Path(tempfile.mkdtemp(dir="/tmp")), Path(tempfile.mkdtemp(dir="/tmp"))
    try:  # the venv's real path longer than the link's: a sort by length binds the link's first
        venv = other / "virtualenvs/a-project-with-a-long-name-3.11"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        (base / "clone/sub").mkdir(parents=True)
        (base / "clone/.venv").symlink_to(venv)
        python = base / "clone/.venv/bin/python"
        monkeypatch.setattr(sys, "executable", str(python))
        monkeypatch.setattr(sys, "prefix", str(base / "clone/.venv"))
        box = Sandbox(base / workspace, backend)
        out = await run(bash_in(box), f"{python} -c 'import sys; print(sys.version_info[:2], sys.prefix)'")
        assert out.split("\n")[0] == f"{sys.version_info[:2]} {base}/clone/.venv", out
        await box.aclose()
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_venv_symlinked_into_a_hidden_folder_runs_from_path(backend: str, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """The same venv reached only through ``PATH`` (an activated venv; kimik3 runs from another
    interpreter): ``python`` there finds its ``pyvenv.cfg`` and runs as the venv."""
    base, other = Path(tempfile.mkdtemp(dir="/tmp")), Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        venv = other / "virtualenvs/a-project-with-a-long-name-3.11"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        (base / "clone/sub").mkdir(parents=True)
        (base / "clone/.venv").symlink_to(venv)
        monkeypatch.setenv("PATH", f"{base}/clone/.venv/bin:{os.environ['PATH']}")
        box = Sandbox(base / "clone/sub", backend)
        out = await run(bash_in(box), "python -c 'import sys; print(sys.prefix)'")
        assert out.split("\n")[0] == f"{base}/clone/.venv", out
        await box.aclose()
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_git_reads_the_repository_above_a_workspace_under_tmp(backend: str) -> None:
    """A workspace that is a subfolder of a repository under /tmp: git status / log work, the
    repository above stays read-only."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        repo = make_repo(base / "repo")
        (repo / "sub/new.txt").write_text("new\n")
        box = Sandbox(repo / "sub", backend)
        bash = bash_in(box)
        out = await run(bash, "git status --short .; git log --format=%s; echo x >> ../user.txt; echo rc=$?")
        lines = out.split("\n")
        assert lines[:2] == ["?? new.txt", "init"], out
        assert lines[-2] == "rc=1" or lines[-1] == "rc=1", out
        assert (repo / "user.txt").read_text() == "committed\n"
        await box.aclose()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_git_reads_a_linked_worktree_above_a_workspace_under_tmp(backend: str) -> None:
    """The variant: the workspace is a subfolder of a linked worktree under /tmp whose repository
    lies in another folder under /tmp (its .git a file naming .git/worktrees/wt there)."""
    base, other = Path(tempfile.mkdtemp(dir="/tmp")), Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        repo = make_repo(base / "repo")
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "-b", "topic", str(other / "wt")], check=True)
        (other / "wt/sub/new.txt").write_text("new\n")
        box = Sandbox(other / "wt/sub", backend)
        out = await run(bash_in(box), "git status --short --branch .; git log --format=%s")
        assert out.split("\n")[:3] == ["## topic", "?? new.txt", "init"], out
        await box.aclose()
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def test_the_secret_stamp_moves_on_a_change_and_on_a_racy_mtime(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-command check (``_masks.SecretStamp``): unmoved while nothing changed, moved by a
    secret made in a watched folder, by a new hard link to a secret, and by a folder whose mtime is
    as new as the stamp (a change in the same tick of the file system's clock keeps the mtime).
    The watched pattern folders are kept to the test's home (the real user's home, also masked,
    changes under a busy machine's feet)."""
    from kimik3.tools.coding import _masks
    from kimik3.tools.coding._masks import RACY_NS, SecretStamp
    real = _masks.secret_folders
    monkeypatch.setattr(_masks, "secret_folders", lambda deny: [d for d in real(deny) if d.startswith(str(home))])
    netrc = put(home / ".netrc", "SECRET\n")
    old = netrc.stat().st_mtime_ns - 10 * 10**9
    for made in (home, home.parent):  # both new (the fixture's); the parent is watched in a checkout under $HOME
        os.utime(made, ns=(old, old))
    stamp = SecretStamp([str(netrc)], [])
    assert home.as_posix() in stamp.folders and not stamp.moved()
    put(home / ".kube/config", "SECRET\n")
    assert stamp.moved()
    os.utime(home, ns=(old, old))
    stamp.renew()
    assert not stamp.moved()
    os.link(netrc, home / "proj/link")  # the link count of ~/.netrc, not a watched folder, changes
    assert stamp.moved()
    stamp.renew()
    os.utime(home, ns=(stamp.taken - RACY_NS // 2,) * 2)
    stamp.renew()
    assert stamp.moved()  # racy: the folder's mtime is within RACY_NS of the stamp
