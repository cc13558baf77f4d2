"""Text helpers shared by messages, tools and the CLI: visible escapes for lone surrogates
(:func:`visible_text`), terminal-safe model text (:func:`printable`), whole escaped JSON for a
person to decide on (:func:`shown_json`), counts with their noun (:func:`counted`: ``1 turn``,
``2 turns``) and URLs without their credentials (:func:`redact_url`, :func:`redact_urls`: the one
place every printed, logged, recorded or exported URL goes through, issue 40). A leaf module: it
imports nothing of kimik3."""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import SplitResult, unquote, unquote_plus, urlsplit

__all__ = ["REDACTED", "counted", "escaped", "printable", "redact_secrets", "redact_url", "redact_urls", "shown_json",
           "shown_link", "shown_text", "url_secrets", "visible_text"]

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def visible_text(text: str) -> str:
    """``text`` as valid UTF-8: each lone surrogate becomes a visible escape.

    Surrogates ``U+DC80``-``U+DCFF`` (undecodable bytes kept by ``surrogateescape``, e.g. a file
    name ``caf\\xe9.txt`` from :func:`os.listdir`) become ``\\xNN`` (the byte); other lone
    surrogates become ``\\udNNN``. Text without surrogates is returned as is.
    """
    if text.isascii() or not _SURROGATE_RE.search(text):
        return text

    def escape(m: re.Match[str]) -> str:
        code = ord(m.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _SURROGATE_RE.sub(escape, text)


# what could recolour, move the cursor, set the clipboard or a link, or reorder a terminal line
# (ECMA-48): control strings whole, payload included (OSC, e.g. OSC 52 clipboard writes and OSC 8
# links; DCS, SOS, PM, APC), in their 7-bit (ESC x) and 8-bit (C1) forms, ended by ST or BEL or,
# unterminated, at the end of the line; CSI sequences, both forms; other escapes; C0/C1 controls
# but tab and newline; the bidirectional overrides and isolates
_UNPRINTABLE = re.compile(
    r"(?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str) -> str:
    """``text`` without terminal control sequences, control characters (tab and newline stay)
    and bidirectional overrides: model-provided or recorded text that a terminal shows as it is
    (``kimik3 run``'s live view, ``kimik3 show``).

    Control strings go whole, payload included: an OSC 52 clipboard write, an OSC 8 link's URL,
    a DCS, SOS, PM or APC string (7-bit or 8-bit C1 form; one with no terminator ends at the end
    of its line).

    Example: ``printable("a\\x1b[31mb\\rc\\x1b]52;c;aGk=\\x07d")`` is ``"abcd"``.
    """
    return _UNPRINTABLE.sub("", text)


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun plural (an ``s`` added) unless the count is 1:
    ``counted(1, "turn") == "1 turn"``, ``counted(0, "tool call") == "0 tool calls"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


_HIDDEN = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})  # controls, format (bidi, zero-width), unassigned


def _units(text: str) -> list[str]:
    """``text``'s characters, each one a terminal would not show as itself as its ``\\uXXXX``
    escape (``\\UXXXXXXXX`` beyond the BMP)."""
    out = []
    for c in text:
        if unicodedata.category(c) in _HIDDEN:
            code = ord(c)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(c)
    return out


def escaped(text: str) -> str:
    """``text`` on one line, every character a terminal would hide or act on (newlines, escape
    sequences, bidirectional overrides, zero-width characters, lone surrogates) as its
    ``\\uXXXX`` escape: a piece of recorded or server text inside a line of kimik3's own (a call
    id, an MCP server's question), which cannot draw a line of its own such as ``approved: ...``.

    Example: ``escaped("x\\napproved")`` is ``"x\\\\u000aapproved"``.
    """
    return "".join(_units(text))


def shown_link(url: str) -> str:
    """A link an MCP server asks a person to open (a URL-mode elicitation), for one line:
    ``open URL (host HOST; ...)``, the URL :func:`escaped`, its host said apart (IDNA for a
    non-ASCII one: a Cyrillic ``a`` look-alike shows as ``xn--``) and a scheme other than https named. The
    link is the server's, and phishing hides the host (``https://bank.example@evil.example/``
    leads to ``evil.example``); the MCP specification asks clients to show the domain before
    the person consents to open it (elicitation, URL mode)."""
    try:
        host = urlsplit(url).hostname or "none"
        host = host if host.isascii() else host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        host = "unreadable"
    scheme = url.partition(":")[0].lower()
    note = "" if scheme == "https" else f", not https but {escaped(scheme)!r}"
    return (f"open {escaped(url)} (host {escaped(host)}{note}; the MCP server's link: open it only if you trust "
            "that host)")


LONG_SHOWN = 2000
"""Shown text longer than this (characters, escapes counted) is announced on its first line
(``(N characters; whole below)``) and starts on the next, so padding cannot bury its tail."""


def shown_json(value: object, *, width: int = 100, indent: str = "    ", start: int = 0, end: int = 0) -> str:
    """``value`` as JSON a person can check before deciding on it (issue 40): whole, never cut;
    every character a terminal would hide or act on (controls, escape sequences, bidirectional
    overrides, zero-width and other format characters, lone surrogates) escaped as ``\\uXXXX``;
    wrapped so that every line, with the ``start`` characters before it on the first line and
    the ``end`` characters after it on the last, holds at most ``width`` characters (the
    continuation lines indented with ``indent``, joined by ``\\n``); over :data:`LONG_SHOWN`
    characters, announced first.

    Example: ``shown_json({"c": "ls\\x1b[8m rm -rf ~"})`` is ``{"c": "ls\\u001b[8m rm -rf ~"}``.
    """
    return shown_text(json.dumps(value, ensure_ascii=False), width=width, indent=indent, start=start, end=end)


def shown_call(head: str, value: object, tail: str = "", *, width: int = 100, indent: str = "    ") -> str:
    """``head``, ``value`` as :func:`shown_json` shows it, then ``tail``: every line within
    ``width`` characters, ``head``'s last line and ``tail`` counted (``awaiting approval: bash
    {...}  id=...``)."""
    start = len(head.rsplit("\n", 1)[-1])
    return head + shown_json(value, width=width, indent=indent, start=start, end=len(tail)) + tail


def shown_text(text: str, *, width: int = 100, indent: str = "    ", start: int = 0, end: int = 0) -> str:
    """``text`` (a call's raw arguments) shown as :func:`shown_json` shows JSON: whole, the
    characters a terminal would hide or act on escaped, wrapped to fit ``width`` with what
    surrounds it."""
    units = _units(text)
    total = sum(map(len, units))
    lines = [f"({total} characters; whole below)"] if total > LONG_SHOWN else []
    limit = width - len(indent) if lines else width - start
    line: list[str] = []
    size = 0
    for unit in units:
        if size + len(unit) > limit and line:
            lines.append("".join(line))
            line, size, limit = [], 0, width - len(indent)
        line.append(unit)
        size += len(unit)
    lines.append("".join(line))
    if end and size + end > limit and line:  # what follows goes on a line of its own
        lines.append("")
    return ("\n" + indent).join(lines)


REDACTED = "***"
"""What stands for a credential in a redacted URL."""

# a query or fragment parameter whose name holds one of these (case-insensitive, ``-`` / ``_`` /
# ``.`` ignored) carries a credential: api-key, api_key, apikey, key, token, access_token, sig,
# signature, password, pw, secret, client_secret, auth, authorization, bearer, X-Amz-Credential, jwt, ...
_SECRET_NAME = re.compile(r"key|token|secret|sig|pass|pwd|^pw$|auth|bearer|credential|jwt|cookie|session|code",
                          re.I)
_PARAM = re.compile(r"([^&;=]*)(=?)([^&;]*)")
# a URL inside free text: a scheme, ``://`` and what follows up to a space, quote or bracket
_URL_IN_TEXT = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>`]+""")


def _params(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        name, eq, value = m.groups()
        secret = eq and value and _SECRET_NAME.search(re.sub(r"[-_.\[\]]", "", unquote_plus(name)))
        return f"{name}{eq}{REDACTED}" if secret else m.group()

    return _PARAM.sub(one, text)


def redact_url(url: str) -> str:
    """``url`` without the credentials it may carry: its userinfo (``user:pw@``) and the values of
    query and fragment parameters whose names look secret (``api-key``, ``api_key``, ``key``,
    ``token``, ``access_token``, ``sig``, ``signature``, ``password``, ``secret``, ``auth``, ...:
    a name holding ``key``, ``token``, ``secret``, ``sig``, ``pass``, ``pwd``, ``auth``, ``bearer``,
    ``credential``, ``jwt``, ``cookie``, ``session`` or ``code``, or ``pw``) each become :data:`REDACTED`.

    The one function for a URL that is printed, logged, recorded or exported (error lines, verify
    output, OpenTelemetry spans, eval records; issue 40). Everything before the last ``@`` of the
    authority (up to the first ``?`` or ``#``) goes, also where an unquoted ``/`` in a password
    hides it from :func:`urllib.parse.urlsplit`; without a scheme, a head before ``@`` (up to the
    first ``/``) is cut the same way. Parameter names are read percent-decoded (``%6Bey`` is ``key``).

    Example: ``redact_url("https://u:pw@h:8000/v1?api-key=s3&model=k3")`` is
    ``"https://***@h:8000/v1?api-key=***&model=k3"``.
    """
    if not isinstance(url, str):
        url = str(url)
    head, sep, rest = url.partition("://")
    if not sep:  # no scheme ("user:pw@host:8000/v1"): only a userinfo-looking head is cut
        first = url.split("/", 1)[0]
        return f"{REDACTED}@{url[first.rindex('@') + 1:]}" if "@" in first else url
    authority = re.split(r"[?#]", rest, maxsplit=1)[0]
    if "@" in authority:  # userinfo, also one urlsplit would not see (an unquoted "/" in it)
        url = f"{head}://{REDACTED}@{rest[authority.rindex('@') + 1:]}"
    try:
        parts = urlsplit(url)
    except ValueError:  # an invalid port or IPv6 literal: the userinfo is gone already
        return url
    if not parts.netloc or not (parts.query or parts.fragment):
        return url
    out = SplitResult(parts.scheme, parts.netloc, parts.path, _params(parts.query), _params(parts.fragment))
    return out.geturl()


def url_secrets(url: str) -> list[str]:
    """The credentials ``url`` carries, as :func:`redact_url` hides them: its userinfo (whole,
    and the password alone, as written and percent-decoded; not the user's name; and
    ``base64(user:password)``, the ``Authorization: Basic`` value httpx sends for it) and the
    values of its secret-looking query and fragment parameters, each as written and
    percent-decoded; values under 4 characters are
    left out (too common to find reliably), the longest first.

    Example: ``url_secrets("http://kimi:pw-1234@h/v1?api-key=k%3D1&model=k3")`` is
    ``["a2ltaTpwdy0xMjM0", "kimi:pw-1234", "pw-1234", "k%3D1"]`` (``k=1`` is shorter than 4).
    """
    found: set[str] = set()
    head, sep, rest = str(url).partition("://")
    authority = re.split(r"[/?#]", rest if sep else head, maxsplit=1)[0]
    if "@" in authority:
        userinfo = authority[: authority.rindex("@")]
        user, _, password = (unquote(part) for part in userinfo.partition(":"))
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()  # what httpx sends (Basic auth)
        found.update((userinfo, *userinfo.split(":", 1)[1:], password, basic))
    for part in re.split(r"[?#]", rest if sep else head)[1:]:
        for name, eq, value in _PARAM.findall(part):
            if eq and value and _SECRET_NAME.search(re.sub(r"[-_.\[\]]", "", unquote_plus(name))):
                found.update((value, unquote_plus(value)))
    return sorted((f for f in found if len(f) >= 4), key=len, reverse=True)


def redact_secrets(text: str, url: str | None, also: Sequence[str] = ()) -> str:
    """``text`` with the URLs in it redacted (:func:`redact_urls`) and each credential ``url``
    carries (:func:`url_secrets`), and each of ``also`` (an API key sent with it; one under 8
    characters is a placeholder such as ``EMPTY`` and stays), replaced by :data:`REDACTED`
    wherever it stands: what a server echoes of the request (a path with its query, the key
    alone, its ``Authorization`` header) in an error kimik3 shows."""
    text = redact_urls(text)
    keys = (key for key in also if key and len(key) >= 8)
    for secret in sorted({*(url_secrets(url) if url else ()), *keys}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def redact_urls(text: str) -> str:
    """``text`` with every URL in it (``scheme://...`` up to a space, quote or bracket) passed
    through :func:`redact_url`: an exception's message, a log line, a traceback."""
    if "://" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        found = m.group()
        url = found.rstrip(".,:;!)]}")  # the sentence's punctuation after the URL stays
        return redact_url(url) + found[len(url):]

    return _URL_IN_TEXT.sub(one, text)
