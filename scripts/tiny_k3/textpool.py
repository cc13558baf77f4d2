"""Word and line pools harvested from real text on this machine (data v2 of the tiny K3 model).

The v1 data drew file names and contents from ~250 English nouns and generated pseudo-words, so
the model learnt those words rather than to copy: real names and lines came out garbled. v2
draws them from real text, so the only way to produce the right tool arguments and answers is to
copy them from the prompt or the tool results (an induction / copy skill):

- Python's standard library sources (``lib/python3.X``, ``site-packages`` left out): code lines,
  comment lines and docstring / prose lines, identifiers and words;
- ``/usr/share/common-licenses`` and the plain-text files under ``/usr/share/doc`` (copyright
  notices, READMEs): prose lines and words;
- the generated pseudo-words of v1.

Files are read in sorted order and every split is decided by a hash (sha256) of the item, so the
pools are a pure function of the files present (recorded in the pools file: roots, file count and
a digest of the inputs). Words are split into disjoint ``train`` / ``heldout`` sets by hash of the
word; lines by hash of their source file, then any held-out line also present in training is
dropped, so the held-out split has unseen words, names and lines. The lines and file names of
``examples/sample_workspace`` (the README demo) are kept out of the training pools.

Usage: python scripts/tiny_k3/textpool.py [--out .cache/tiny_k3/pools.json]  (gen_data.py calls it)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SAMPLE_WORKSPACE = REPO / "examples" / "sample_workspace"

MAX_LINE = 56  # characters of a harvested line (answers quote up to 4 lines within 256 tokens)
MIN_LINE = 4
HELDOUT_FRACTION = 0.15

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,23}")
_WORD = re.compile(r"[A-Za-z][a-z]{2,13}")
_BAD = re.compile(r"<\||\|>|\t|[\x00-\x1f\x7f]")


def _h(s: str) -> float:
    """A fixed pseudo-random number in [0, 1) for ``s`` (not Python's salted hash)."""
    return int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:8], "big") / 2**64


def _python_lib() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["stdlib"])


def source_files() -> tuple[list[Path], list[Path]]:
    """(Python sources, plain-text files), sorted."""
    lib = _python_lib()
    py = sorted(p for p in lib.rglob("*.py") if "site-packages" not in p.parts and p.is_file())
    txt: list[Path] = []
    for root in (Path("/usr/share/common-licenses"), Path("/usr/share/doc")):
        if root.is_dir():
            for p in root.rglob("*"):
                if p.is_file() and not p.is_symlink() and p.suffix not in {".gz", ".bz2", ".xz", ".zip", ".png",
                                                                           ".jpg", ".gif", ".svg", ".pdf", ".ico"}:
                    txt.append(p)
    return py, sorted(txt)


def _ok(line: str) -> bool:
    if not (MIN_LINE <= len(line) <= MAX_LINE) or _BAD.search(line):
        return False
    if not line.isascii() and sum(not c.isascii() for c in line) > 3:
        return False
    return line == line.strip() and any(c.isalnum() for c in line)


def _is_prose(line: str) -> bool:
    ws = line.split()
    return len(ws) >= 3 and sum(w.isalpha() for w in ws) >= 0.7 * len(ws) and not any(c in line for c in "=(){}[]<>")


def harvest() -> dict[str, Any]:
    """Read the sources; returns {"code": [...], "comment": [...], "prose": [...]} lines per file
    split, plus words and identifiers (sets)."""
    py, txt = source_files()
    digest = hashlib.sha256()
    lines: dict[str, dict[str, set[str]]] = {s: {"code": set(), "comment": set(), "prose": set()}
                                              for s in ("train", "heldout")}
    idents: set[str] = set()
    words: set[str] = set()
    for p in py + txt:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:4096]:
            continue
        digest.update(str(p).encode() + b"\0" + hashlib.sha256(data).digest())
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        split = "heldout" if _h("file:" + str(p)) < HELDOUT_FRACTION else "train"
        is_py = p.suffix == ".py"
        in_doc = False
        for raw in text.splitlines():
            line = raw.strip()
            doc_line = in_doc
            if is_py and '"""' in line:
                doc_line = True
                if line.count('"""') % 2 == 1:
                    in_doc = not in_doc
                line = line.replace('"""', "").strip()
            if not _ok(line):
                continue
            if is_py:
                idents.update(_IDENT.findall(line))
            words.update(w.lower() if w[1:].islower() else w for w in _WORD.findall(line))
            if is_py and line.startswith("#"):
                kind = "comment"
            elif is_py and not doc_line:
                kind = "code"
            else:
                kind = "prose" if _is_prose(line) else ("code" if is_py else "prose")
            lines[split][kind].add(line)
    return {"lines": lines, "idents": idents, "words": words, "files": len(py) + len(txt),
            "digest": digest.hexdigest()}


def sample_workspace() -> tuple[set[str], set[str]]:
    """(file paths, stripped non-empty lines) of examples/sample_workspace: kept out of training."""
    paths: set[str] = set()
    lines: set[str] = set()
    if SAMPLE_WORKSPACE.is_dir():
        for p in sorted(SAMPLE_WORKSPACE.rglob("*")):
            if p.is_file():
                paths.add(p.relative_to(SAMPLE_WORKSPACE).as_posix())
                lines.update(x.strip() for x in p.read_text(encoding="utf-8").splitlines() if x.strip())
    return paths, lines


def build(seed: int = 1234, pseudo: list[str] | None = None) -> dict[str, Any]:
    """The pools: per split ``words`` (plain words), ``idents`` (identifiers), ``code`` /
    ``comment`` / ``prose`` lines; plus the sample workspace's names and lines (``forbidden``)."""
    h = harvest()
    ws_paths, ws_lines = sample_workspace()
    rng = random.Random(seed)
    out: dict[str, Any] = {"meta": {"files": h["files"], "inputs_sha256": h["digest"],
                                    "python_lib": str(_python_lib()), "python": sys.version.split()[0]},
                           "forbidden": {"paths": sorted(ws_paths), "lines": sorted(ws_lines)}}
    # words: disjoint by hash; words of the sample workspace are not forbidden (too common), its lines are
    vocab = sorted(set(h["words"]) | set(pseudo or []))
    # the standard library's tests contribute tens of thousands of test_* names: keep one in five
    idents = sorted(w for w in h["idents"] - set(vocab) if not w.lower().startswith("test") or _h("t:" + w) < 0.2)
    split_of = {w: ("heldout" if _h("word:" + w.lower()) < HELDOUT_FRACTION else "train") for w in vocab + idents}
    train_lines = {k: v for k, v in h["lines"]["train"].items()}
    all_train = set().union(*train_lines.values())
    for split in ("train", "heldout"):
        d: dict[str, list[str]] = {}
        d["words"] = [w for w in vocab if split_of[w] == split]
        d["idents"] = [w for w in idents if split_of[w] == split]
        for kind, ls in h["lines"][split].items():
            keep = sorted(ls - ws_lines) if split == "train" else sorted(ls - all_train)
            rng.shuffle(keep)
            d[kind] = keep[:60000]
        out[split] = d
    out["sizes"] = {s: {k: len(v) for k, v in out[s].items()} for s in ("train", "heldout")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "tiny_k3" / "pools.json")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import tasks

    pools = build(pseudo=tasks.pseudo_words())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(pools, ensure_ascii=False) + "\n")
    print(json.dumps({"meta": pools["meta"], "sizes": pools["sizes"]}, indent=1))


if __name__ == "__main__":
    main()
