"""``grep`` (ripgrep, or a Python fallback) and ``glob`` helpers."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from ..._exceptions import ToolError
from ._paths import _decode, _is_binary, _split_lines, _Workspace

_GREP_TIMEOUT_S = 60


def _rg_path() -> str | None:
    """The ripgrep executable, or None (grep then uses its Python fallback)."""
    return shutil.which("rg")


def _grep_rg(
    rg: str, ws: _Workspace, regex: str, target: Path, glob: str | None
) -> list[tuple[str, int, str]]:
    argv = [rg, "--line-number", "--no-heading", "--with-filename", "--null", "--color", "never"]
    if glob:
        argv += ["--glob", glob]
    argv += ["-e", regex]
    if target != ws.root:
        argv += ["--", ws.rel(target)]
    try:
        proc = subprocess.run(
            argv, cwd=ws.root, stdin=subprocess.DEVNULL, capture_output=True, timeout=_GREP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"grep timed out after {_GREP_TIMEOUT_S} s; narrow the path or glob") from None
    if proc.returncode == 1:
        return []
    if proc.returncode != 0 and not proc.stdout:
        message = proc.stderr.decode("utf-8", "replace").strip()
        raise ToolError(message or f"rg failed with exit code {proc.returncode}")
    results = []
    for raw in proc.stdout.split(b"\n"):
        name, sep, rest = raw.partition(b"\x00")
        number, sep2, text = rest.partition(b":")
        if not sep or not sep2 or not number.isdigit():
            continue
        rel = PurePosixPath(os.path.normpath(os.fsdecode(name))).as_posix()
        line = _decode(text)[0]
        results.append((rel, int(number), line[:-1] if line.endswith("\r") else line))
    return results


def _glob_matches(rel: str, glob: str) -> bool:
    if "/" not in glob:
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    return fnmatch.fnmatchcase(rel, glob) or (
        glob.startswith("**/") and fnmatch.fnmatchcase(rel, glob[3:])
    )


def _grep_python(
    ws: _Workspace, regex: str, target: Path, glob: str | None
) -> list[tuple[str, int, str]]:
    try:
        rx = re.compile(regex)
    except re.error as e:
        raise ToolError(f"invalid regular expression {regex!r}: {e}") from None
    files: list[Path] = []
    if target.is_file():
        files.append(target)
    else:
        for dirpath, dirnames, filenames in os.walk(target):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fname in sorted(filenames):
                fpath = Path(dirpath) / fname
                if fname.startswith(".") or fpath.is_symlink():
                    continue
                if glob and not _glob_matches(ws.rel(fpath), glob):
                    continue
                files.append(fpath)
    results = []
    for fpath in files:
        try:
            data = fpath.read_bytes()
        except OSError:
            continue
        if _is_binary(data):
            continue
        rel = ws.rel(fpath)
        for number, line in enumerate(_split_lines(_decode(data)[0]), 1):
            if rx.search(line):
                results.append((rel, number, line))
    return results
