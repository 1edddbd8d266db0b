"""What `check_adapter` feeds a task: adversarial completions, wrong answers, random text.

Public so a task's own tests can use the same inputs.
"""

from __future__ import annotations

import random

ADVERSARIAL: tuple[tuple[str, str], ...] = (
    ("the empty string", ""),
    ("whitespace", " \t\n \r\n"),
    ("10,000 characters", "ab7 " * 2_500),
    ("a 5,000-digit number", "9" * 5_000),
    ("full-width digits", "\uff11\uff12\uff13"),
    ("a U+2212 minus", "\u22125"),
    ("control characters", "\x00\x01\x07\x1b[31m\x7f\x9b"),
    ("a lone surrogate", "\ud800"),
    ("right-to-left marks", "\u202e42\u202c"),
    ("numbers Python parses loosely", "1_000 NaN inf -0 1e309 0x1F"),
)
"""Completions every reward must survive: (what it is, the text)."""
WRONG = ("", "zzz", "?")
"""Completions that should not earn the maximum on any sensible task."""


def random_texts(count: int, seed: int = 0) -> list[str]:
    """Seeded random strings from ASCII, the BMP and all of Unicode."""
    rng = random.Random(f"mathrl.testing/{seed}")
    texts = []
    for _ in range(count):
        top = rng.choice([0x7F, 0xFFFF, 0x10FFFF])
        texts.append("".join(chr(rng.randint(0, top)) for _ in range(rng.randint(1, 40))))
    return texts
