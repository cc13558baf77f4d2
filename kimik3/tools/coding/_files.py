"""``read_file`` / ``write_file`` / ``edit_file``: streaming reads, writes that happen only while the
call is live (:mod:`._write`), and edits that keep every line's own ending and every undecodable byte.

Encoding: a file is UTF-8 (a BOM is kept), its undecodable bytes carried as surrogates
(``surrogateescape``) so they are written back byte for byte; a file with undecodable bytes and
no valid multi-byte UTF-8 sequence at all is a legacy 8-bit file, read and written as Latin-1. A
file starting with a UTF-16 or UTF-32 BOM (either byte order) is read in that encoding and an edit
writes it back in it, BOM first; a lone BOM is an empty file.
"""

from __future__ import annotations

import codecs
import difflib
import io
import os
import re
from typing import IO, Any

from ..._exceptions import ToolError
from .._truncate import truncate_middle
from ._paths import Workspace, show_path
from ._write import replace

_BINARY_SNIFF = 8192  # a NUL byte in the first block: binary
_SNIFF_BLOCK = 65536  # encoding guessed from the first block (read_file)
READ_CHUNK = 65536
_MAX_LINE_CHARS = 2000
LINE_BYTES = _MAX_LINE_CHARS * 4 + 4  # a line's bytes read at once; longer lines are streamed
_MAX_COUNT_BYTES = 1 << 30  # lines after the shown range are counted through this many bytes
MAX_EDIT_BYTES = 10 * 1024 * 1024
_MAX_DIFF_CHARS = 4000
_NON_ASCII_TEXT = re.compile("[\u0080-\udc7f\udd00-\U0010ffff]")  # not an escaped byte
_NEWLINE = re.compile(r"\r?\n")
_CR = re.compile(r"\r")
_CR_TO_LF = bytes.maketrans(b"\r", b"\n")


# UTF-32 first: its little-endian BOM begins with UTF-16's.
_WIDE_BOMS = (
    ("utf-32-le", codecs.BOM_UTF32_LE), ("utf-32-be", codecs.BOM_UTF32_BE),
    ("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
)
_WIDE = dict(_WIDE_BOMS)


def wide_encoding(data: bytes) -> str | None:
    """``"utf-16-le"`` etc. for a file starting with a UTF-16 / UTF-32 BOM, else None."""
    return next((name for name, bom in _WIDE_BOMS if data.startswith(bom)), None)


def sniff_encoding(data: bytes, complete: bool) -> str:
    """``"utf-8-sig"``, ``"utf-16-le"`` (and the other UTF-16 / UTF-32 byte orders, by their
    BOM), ``"utf-8"`` or ``"latin-1"`` for a file starting with ``data``."""
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    wide = wide_encoding(data)
    if wide is not None:
        return wide
    if not complete:  # a multi-byte character may be cut at the end of the block
        data = data[: data.rfind(b"\n") + 1] or data[:-3]
    try:
        data.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "surrogateescape")
    return "utf-8" if _NON_ASCII_TEXT.search(text) else "latin-1"


def decode(data: bytes, encoding: str, path: str = "the file") -> str:
    if encoding in _WIDE:
        try:
            return data[len(_WIDE[encoding]) :].decode(encoding)
        except UnicodeDecodeError as e:
            raise ToolError(f"{path} starts with a {encoding} BOM but is not valid {encoding} ({e.reason})") from None
    if encoding == "latin-1":
        return data.decode("latin-1")
    if encoding == "utf-8-sig":
        data = data[len(codecs.BOM_UTF8) :]
    return data.decode("utf-8", "surrogateescape")


def encode(text: str, encoding: str, path: str) -> bytes:
    if encoding in _WIDE:  # written back in the file's own encoding, its BOM first
        try:
            return _WIDE[encoding] + text.encode(encoding)
        except UnicodeEncodeError:
            raise ToolError(f"{path} is {encoding} and new_string has a lone surrogate it cannot hold") from None
    if encoding == "latin-1":
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError:
            raise ToolError(
                f"{path} is not UTF-8 (kept as latin-1) and new_string has characters it cannot hold"
            ) from None
    data = to_utf8(text, "new_string")
    return codecs.BOM_UTF8 + data if encoding == "utf-8-sig" else data


def to_utf8(text: str, what: str) -> bytes:
    """UTF-8 bytes of ``text``; surrogates standing for undecodable bytes become those bytes.

    Raises:
        ToolError: another lone surrogate (``\\ud800``), which no UTF-8 text can hold.
    """
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise ToolError(f"{what} has a lone surrogate {text[e.start]!a} that UTF-8 cannot hold") from None


def line_breaks(text: str) -> re.Pattern[str]:
    """How ``text`` breaks its lines: ``\\n`` or ``\\r\\n``; ``\\r`` alone in a text with a
    carriage return and no ``\\n`` at all (classic Mac OS line endings; vim's rule for
    ``fileformat=mac``). A lone ``\\r`` in a text that has ``\\n`` stays inside its line."""
    return _CR if "\r" in text and "\n" not in text else _NEWLINE


def cr_only(head: bytes) -> bool:
    """Whether a file starting with ``head`` ends its lines with ``\\r`` alone (see :func:`line_breaks`)."""
    return b"\r" in head and b"\n" not in head


class CarriageReturns(io.RawIOBase):
    """A byte stream read with every ``\\r`` as ``\\n``: a CR-only file read line by line
    (``read_file`` and grep's Python fallback number its lines as the edit tools count them)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data.translate(_CR_TO_LF)
        return len(data)


def split_lines(text: str) -> list[str]:
    """Lines split as :func:`line_breaks` says (``\\n`` like grep / rg numbering; ``\\r`` in a
    CR-only text), without their endings."""
    if not text:
        return []
    lines = line_breaks(text).split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def lines_and_endings(text: str) -> tuple[list[str], list[str]]:
    """``text``'s lines without their endings, and each line's ending (``""`` for a last line
    without one), as :func:`line_breaks` splits them."""
    if not text:
        return [], []
    brk = line_breaks(text)
    lines, endings = brk.split(text), brk.findall(text)
    if lines[-1] == "":
        lines.pop()
    else:
        endings.append("")
    return lines, endings


def usual_ending(text: str) -> str:
    """The line ending most of ``text``'s lines have (``\\n`` when none, or on a tie with ``\\r\\n``)."""
    endings = line_breaks(text).findall(text)
    if not endings:
        return "\n"
    if endings[0] == "\r":
        return "\r"
    crlf = endings.count("\r\n")
    return "\r\n" if crlf and crlf * 2 >= len(endings) else "\n"


def cap_line(line: str, limit: int, more: int = 0) -> str:
    """``line`` cut to ``limit`` characters with "... [N more characters]" (``more`` characters
    beyond ``line`` itself were not read into memory)."""
    extra = max(0, len(line) - limit) + more
    return f"{line[:limit]}... [{extra} more characters]" if extra else line


def is_binary(block: bytes) -> bool:
    return b"\x00" in block[:_BINARY_SNIFF]


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, max(size, READ_CHUNK)):
        chunks.append(chunk)
    return b"".join(chunks)


# -- read_file -------------------------------------------------------------------------------


def read_file(ws: Workspace, path: str, offset: int, limit: int) -> str:
    """The ``read_file`` tool's text: lines ``offset..offset+limit-1`` of a streamed file."""
    fd, _, _ = ws.open_file(path)
    with os.fdopen(fd, "rb", buffering=READ_CHUNK) as f:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _SNIFF_BLOCK, 0)
        if not head:
            return "[empty file]"
        encoding = sniff_encoding(head, complete=len(head) < _SNIFF_BLOCK)
        if encoding not in _WIDE and is_binary(head):  # UTF-16 / UTF-32 text is full of NULs
            raise ToolError(f"{path} is a binary file ({size} bytes)")
        src: IO[bytes] = f
        if encoding in _WIDE:  # decoded whole and read on as UTF-8 (line ends are 2-4 bytes)
            if size > MAX_EDIT_BYTES:
                raise ToolError(f"{path} is {encoding}, over {MAX_EDIT_BYTES} bytes; convert it with iconv first")
            utf8 = to_utf8(decode(_read_all(fd, size), encoding, path), "the file")
            src, head = io.BytesIO(utf8), utf8[:_SNIFF_BLOCK]
        elif encoding == "utf-8-sig":
            f.seek(len(codecs.BOM_UTF8))
        if cr_only(head):  # lines end with \r alone: read with each \r as \n
            src = io.BufferedReader(CarriageReturns(src), READ_CHUNK)
        out: list[str] = []
        number = 0
        codec = "latin-1" if encoding == "latin-1" else "utf-8"
        while len(out) < limit:
            raw = src.readline(LINE_BYTES)
            if not raw:
                break
            number += 1
            shown = number >= offset
            text = decode(raw, codec) if shown else ""
            more = 0
            if not raw.endswith(b"\n") and len(raw) == LINE_BYTES:  # a long line: stream the rest
                decoder = codecs.getincrementaldecoder(codec)("surrogateescape")
                text = decoder.decode(raw) if shown else ""
                while True:
                    piece = src.readline(READ_CHUNK)
                    end = not piece or piece.endswith(b"\n")
                    if shown:
                        rest = decoder.decode(piece, end)
                        more += len(rest.removesuffix("\n").removesuffix("\r") if end else rest)
                    if end:
                        break
            if shown:
                text = text.removesuffix("\n").removesuffix("\r")
                out.append(f"{number:6d}\t{cap_line(text, _MAX_LINE_CHARS, more)}")
        if number < offset:
            if number == 0:
                return "[empty file]"
            raise ToolError(f"offset {offset} is past the end of {path} ({number} lines)")
        # Count what follows without keeping it.
        following = counted = 0
        last = b"\n"
        while counted < _MAX_COUNT_BYTES:
            chunk = src.read(READ_CHUNK)
            if not chunk:
                break
            following += chunk.count(b"\n")
            counted += len(chunk)
            last = chunk[-1:]
        if last != b"\n":
            following += 1
        if counted >= _MAX_COUNT_BYTES:
            out.append(f"[more lines follow; continue with offset={number + 1}]")
        elif following:
            s = "s" if following != 1 else ""
            out.append(f"[{following} more line{s}; continue with offset={number + 1}]")
        return "\n".join(out)


# -- write_file ------------------------------------------------------------------------------


def write_file(ws: Workspace, path: str, content: str, hard_links: bool) -> str:
    data = to_utf8(content, "content")
    rel = replace(ws, path, data, hard_links=hard_links)  # only while the call is live (see _write)
    return f"Wrote {len(data)} bytes to {show_path(rel)}"


# -- edit_file -------------------------------------------------------------------------------


def _occurrences(text: str, old: str) -> list[int]:
    """Start of every occurrence of ``old`` in ``text``, overlapping ones included."""
    found = []
    i = text.find(old)
    while i >= 0:
        found.append(i)
        i = text.find(old, i + 1)
    return found


def replace_keeping_endings(text: str, old: str, new: str, replace_all: bool, path: str) -> tuple[str, int]:
    """``text`` with ``old`` replaced by ``new``, matching line endings loosely.

    ``text`` is compared with its ``\\r\\n`` seen as ``\\n`` (so a CRLF file with a stray LF line
    matches what read_file showed), and in a CR-only text each ``\\r`` as one (:func:`line_breaks`);
    ``old`` and ``new`` are read the same way. Each line keeps its
    own ending: the k-th line break inside a replacement takes the ending of the k-th line break it
    replaces; extra ones take the file's usual ending.

    Returns:
        (new text, number of replacements).

    Raises:
        ToolError: ``old`` not found, or found several times (overlaps count) without
            ``replace_all``.
    """
    brk = line_breaks(text)
    contents = brk.split(text)
    endings = brk.findall(text)
    norm = "\n".join(contents)
    old_n, new_n = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    if brk is _CR:  # a CR-only file: its lines as the model reads them (read_file shows them split)
        old_n, new_n = old_n.replace("\r", "\n"), new_n.replace("\r", "\n")
    starts = _occurrences(norm, old_n)
    if not starts:
        raise ToolError(f"old_string not found in {path}; it must match the file exactly")
    if len(starts) > 1 and not replace_all:
        raise ToolError(
            f"old_string matches {len(starts)} times in {path}; add surrounding lines to make it "
            "unique, or set replace_all to true"
        )
    usual = usual_ending(text)
    pieces: list[str] = []
    new_endings: list[str] = []
    pos = line = count = 0
    for start in starts:
        if start < pos:  # overlaps a replaced one
            continue
        between = norm[pos:start]
        pieces.append(between)
        k = between.count("\n")
        new_endings += endings[line : line + k]
        line += k
        replaced = old_n.count("\n")
        own = endings[line : line + replaced]
        line += replaced
        pieces.append(new_n)
        added = new_n.count("\n")
        new_endings += own[:added] + [usual] * (added - len(own))
        pos = start + len(old_n)
        count += 1
        if not replace_all:
            break
    pieces.append(norm[pos:])
    new_endings += endings[line:]
    parts = "".join(pieces).split("\n")
    out = [parts[0]]
    for ending, part in zip(new_endings, parts[1:], strict=True):
        out += [ending, part]
    return "".join(out), count


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@$")


def unified_diff(old: list[str], new: list[str], rel: str, context: int = 3) -> str:
    """``difflib.unified_diff`` of two versions of a file (``a/REL`` -> ``b/REL``), computed only
    over the changed span and its context, so a one-line edit of a large file stays cheap."""
    start, limit = 0, min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    lo, cut = max(0, start - context), max(0, end - context)
    lines = list(difflib.unified_diff(old[lo : len(old) - cut], new[lo : len(new) - cut], f"a/{rel}", f"b/{rel}",
                                      n=context, lineterm=""))
    for i, line in enumerate(lines):
        m = _HUNK.match(line) if line.startswith("@@") else None
        if m:
            a, b = int(m.group(1)) + lo, int(m.group(3)) + lo
            lines[i] = f"@@ -{a}{m.group(2) or ''} +{b}{m.group(4) or ''} @@"
    return "\n".join(lines)


def edit_file(ws: Workspace, path: str, old_string: str, new_string: str, replace_all: bool,
              hard_links: bool) -> str:
    if not old_string:
        raise ToolError("old_string is empty; use write_file to create or overwrite a file")
    if old_string == new_string:
        raise ToolError("old_string and new_string are identical; nothing to change")
    fd, rel, _ = ws.open_file(path, write=True, hard_links=hard_links)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_EDIT_BYTES:
            raise ToolError(
                f"{path} is {size} bytes, over edit_file's limit of {MAX_EDIT_BYTES} bytes; change it with "
                "bash tools (sed -i, a python script) instead"
            )
        data = _read_all(fd, size)
        if len(data) > MAX_EDIT_BYTES:  # grew meanwhile
            raise ToolError(f"{path} is over edit_file's limit of {MAX_EDIT_BYTES} bytes; use bash tools")
        encoding = sniff_encoding(data, complete=True)
        if encoding not in _WIDE and is_binary(data):
            raise ToolError(f"{path} is a binary file ({len(data)} bytes)")
        text = decode(data, encoding, path)
        updated, n = replace_keeping_endings(text, old_string, new_string, replace_all, path)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    replace(ws, path, encode(updated, encoding, path), hard_links=hard_links, same=(st.st_dev, st.st_ino))
    diff = unified_diff(split_lines(text), split_lines(updated), rel)
    header = f"Edited {rel} ({n} replacement{'s' if n != 1 else ''})"
    return f"{header}\n{truncate_middle(diff, _MAX_DIFF_CHARS)}" if diff else header
