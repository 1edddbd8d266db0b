"""Quoting for messages: one rule for cutting what a message quotes down to one short line.

For: every error, warning and violation that quotes a value, an exception or
untrusted text (a completion, a flag's value, a child's error). A message is
one line a person reads, so what it quotes is made one printable line and cut
at a limit. Not for: anything written to a record (records keep full values).

The rule: runs of whitespace become one space, other non-printable characters
their escape (`\\x1b`), and a text longer than the limit keeps its first
`limit` characters, then says how long it was: `'aaaa'... (5,000 characters)`.
A list of names in a message reads as a sentence would list them (`listed`).
"""

from __future__ import annotations

from collections.abc import Iterable


def one_line(text: str, limit: int = 200) -> str:
    """`text` as one printable line: at most `limit` characters, then a length note."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))
    return line if len(line) <= limit else f"{line[:limit]}... ({len(line):,} characters)"


def shown(value: object, limit: int = 40) -> str:
    """`value` quoted (its repr), cut by the same rule; a long string is cut before quoting."""
    if isinstance(value, str) and len(value) > limit:
        return f"{one_line(repr(value[:limit]), limit + 20)}... ({len(value):,} characters)"
    return one_line(repr(value), limit)


def listed(words: Iterable[str], conjunction: str) -> str:
    """`a`, `a or b`, `a, b or c`: the words (at least one) as a sentence lists them."""
    *rest, last = words
    return f"{', '.join(rest)} {conjunction} {last}" if rest else last


def describe(exc: BaseException, limit: int = 200) -> str:
    """An exception's message as one line; its type's name when it says nothing."""
    return one_line(str(exc), limit) or type(exc).__name__
