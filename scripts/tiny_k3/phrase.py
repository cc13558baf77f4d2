"""Requests phrased the way people type them (data v3): a template per wording, filled with the
task's arguments, then varied: politeness prefixes and suffixes, lower case, missing or doubled
punctuation, and typos in the template's own words (never in the arguments: file names, words and
texts the model must copy stay exact).

Templates are written ``"how many lines are in {p}"``; ``{p}`` and the other slots are the
task's arguments. Everything is a pure function of the ``random.Random`` passed in.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

PREFIXES = [
    "", "", "", "", "", "", "", "", "please ", "can you ", "could you ", "can you please ", "pls ", "hey, ",
    "hey ", "ok ", "quick one: ", "i need you to ", "I want you to ", "would you ", "I'd like you to ", "so ",
    "hi, ", "yo ", "kindly ", "help me: ",
]
SUFFIXES = ["", "", "", "", "", "", "", "", " please", " pls", " for me", " thanks", " thx", " now", " quickly",
            ", thanks!", " plz", " asap", " real quick", ", please"]
_KEYS = "qwertyuiop asdfghjkl zxcvbnm"
_NEAR: dict[str, str] = {}
for _row in _KEYS.split():
    for _i, _ch in enumerate(_row):
        _NEAR[_ch] = _row[max(0, _i - 1) : _i] + _row[_i + 1 : _i + 2]
_SLOT = re.compile(r"(\{[a-z_0-9]+\})")
_WORD = re.compile(r"[A-Za-z]{4,}")


def typo(rng: random.Random, word: str) -> str:
    """One typo in ``word`` (4+ letters): swapped, dropped, doubled or a neighbouring key."""
    i = rng.randrange(1, len(word) - 1)
    roll = rng.random()
    if roll < 0.3:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if roll < 0.55:
        return word[:i] + word[i + 1 :]
    if roll < 0.75:
        return word[:i] + word[i] + word[i:]
    near = _NEAR.get(word[i].lower(), "")
    return word[:i] + (rng.choice(near) if near else word[i]) + word[i + 1 :]


def _noisy_literal(rng: random.Random, text: str, p_typo: float) -> str:
    return _WORD.sub(lambda m: typo(rng, m.group(0)) if rng.random() < p_typo else m.group(0), text)


def phrase(rng: random.Random, templates: Sequence[str], *, polite: bool = True, **slots: str) -> str:
    """One request: a template filled with ``slots``, then varied (see the module docstring).

    ``polite``: prefixes and suffixes may be added (off for requests that are a bare command)."""
    template = rng.choice(templates)
    p_typo = 0.0
    if rng.random() < 0.18:  # about one request in six has a typo or two
        p_typo = rng.choice([0.15, 0.25, 0.4])
    lower = rng.random() < 0.3
    parts = []
    for piece in _SLOT.split(template):
        if _SLOT.fullmatch(piece):
            parts.append(slots[piece[1:-1]])
        else:
            piece = _noisy_literal(rng, piece, p_typo) if p_typo else piece
            parts.append(piece.lower() if lower else piece)
    text = "".join(parts)
    if polite and rng.random() < 0.35:
        pre, suf = rng.choice(PREFIXES), rng.choice(SUFFIXES)
        if pre and text[:1].isupper() and not text[:2].isupper() and not _starts_with_slot(template):
            text = text[0].lower() + text[1:]
        text = pre + text
        end = re.search(r"[?.!]+$", text)
        text = (text[: end.start()] + suf + end.group(0)) if end else text + suf
    roll = rng.random()
    if roll < 0.12:
        text = text.rstrip("?.!")
    elif roll < 0.16 and text.endswith("?"):
        text += rng.choice(["?", "??", "!"])
    elif roll < 0.18:
        text += rng.choice(["!", ".", " :)", " ?"])
    if rng.random() < 0.08 and text[:1].islower() and not _starts_with_slot(template):
        text = text[0].upper() + text[1:]
    return text.strip()


def _starts_with_slot(template: str) -> bool:
    return template.startswith("{")


ORDINALS = {1: ["first", "1st"], 2: ["second", "2nd"], 3: ["third", "3rd"], 4: ["fourth", "4th"],
            5: ["fifth", "5th"], 6: ["sixth", "6th"], 7: ["seventh", "7th"], 8: ["eighth", "8th"],
            9: ["ninth", "9th"], 10: ["tenth", "10th"], 11: ["eleventh", "11th"], 12: ["twelfth", "12th"]}
