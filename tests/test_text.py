"""kimik3._text: terminal-safe model text and visible escapes for lone surrogates."""

from __future__ import annotations

from kimik3._text import printable, visible_text


def test_printable_drops_escapes_and_controls_but_keeps_lines() -> None:
    assert printable("a\x1b[1;31mb\x1b[0m\x07c\x08\r\x9bd\x1b7e\x1b(Bf\n\tg\u2066h\x1b") == "abcdef\n\tgh"
    assert printable("日本語 é") == "日本語 é"


def test_visible_text_escapes_each_lone_surrogate() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert visible_text(name) == "caf\\xe9.txt"
    assert visible_text("a\ud800b\udfff") == "a\\ud800b\\udfff"
    assert visible_text("日本語 😀") == "日本語 😀"
