"""kimik3._text: terminal-safe model text and visible escapes for lone surrogates."""

from __future__ import annotations

from kimik3._text import printable, visible_text


def test_printable_drops_escapes_and_controls_but_keeps_lines() -> None:
    assert printable("a\x1b[1;31mb\x1b[0m\x07c\x08\r\x9b1dd\x1b7e\x1b(Bf\n\tg\u2066h\x1b") == "abcdef\n\tgh"
    assert printable("日本語 é") == "日本語 é"


def test_visible_text_escapes_each_lone_surrogate() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert visible_text(name) == "caf\\xe9.txt"
    assert visible_text("a\ud800b\udfff") == "a\\ud800b\\udfff"
    assert visible_text("日本語 😀") == "日本語 😀"


def test_printable_drops_control_strings_whole() -> None:
    # OSC 52 (a clipboard write), OSC 8 (a link), DCS, SOS, PM, APC; 7-bit and 8-bit (C1) forms
    assert printable("a\x1b]52;c;cm0gLXJmIH4=\x07b") == "ab"
    assert printable("a\x1b]52;c;cm0gLXJmIH4=\x1b\\b") == "ab"
    assert printable("\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\") == "click"
    assert printable("a\x1bP1$r0m\x1b\\b\x1bXsos\x1b\\c\x1b^pm\x1b\\d\x1b_apc\x07e") == "abcde"
    assert printable("a\x9d52;c;QQ==\x07b\x90q#0;2\x9cc\x9b2Jd\x9f apc \x9ce") == "abcde"
    # no terminator: the string ends with its line, the next line stays
    assert printable("keep\x1b]0;title\nnext\x9dosc") == "keep\nnext"
