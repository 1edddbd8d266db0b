"""Quoting for messages: one rule for cutting what a message quotes down to one short line.

For: every error, warning and violation that quotes a value, an exception or
untrusted text (a completion, a flag's value, a child's error). A message is
one line a person reads, so what it quotes is made one printable line and cut
at a limit. Not for: anything written to a record (records keep full values).

The rule: runs of whitespace become one space, other non-printable characters
their escape (`\\x1b`), and so does U+FFFD, which stands for bytes that did not
decode (`\\ufffd`, not a glyph that hides what was there); a text longer than
the limit keeps its first `limit` characters, then says how long it was:
`'aaaa'... (5,000 characters)`. A message that quotes a value it is shown
beside (a completion a reward choked on) names it once (`elided`). A list of
names in a message reads as a sentence would list them (`listed`), and a name
that is not one of them may be close to one (`closest`: "did you mean").
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

REPLACEMENT = "\ufffd"
"""What a decoder puts for bytes that are not text."""
ELIDED_BARE = 16
"""The shortest text `elided` looks for unquoted."""
_SPACES = re.compile(" +")


def one_line(text: str, limit: int = 200) -> str:
    """`text` as one printable line: at most `limit` characters, then a length note."""
    line = " ".join(text.split())
    if not line.isprintable() or REPLACEMENT in line:  # most text is printable as it is
        line = "".join(_escaped(c) for c in line)
    return line if len(line) <= limit else f"{line[:limit]}... ({len(line):,} characters)"


def _escaped(c: str) -> str:
    if c == REPLACEMENT:
        return "\\ufffd"
    return c if c.isprintable() else repr(c)[1:-1]


def quoted(text: str) -> str:
    """`repr(text)`, U+FFFD escaped too: a completion as `sample` prints it, whole."""
    return repr(text).replace(REPLACEMENT, "\\ufffd")


def shown(value: object, limit: int = 40) -> str:
    """`value` quoted (its repr), cut by the same rule. A string is cut before quoting, so
    its quotes stay whole: as much of it as fits in `limit` characters once escaped."""
    if not isinstance(value, str):
        return one_line(repr(value), limit)
    # In a repr the only whitespace left is the space, whose runs `one_line` makes one; once
    # they are, every character shows as one or more, so what fits is within the first
    # `limit + 2` and the rest need not be escaped at all.
    squeezed = _SPACES.sub(" ", value)
    head = squeezed[: limit + 3]
    most = len(head) * 10 + 2  # an escape is at most 10 characters
    whole = one_line(repr(head), most)
    if head == squeezed and len(whole) <= limit + 2:
        return whole
    low, high = 0, len(head)  # the longest start of `value` that fits, once escaped
    while low < high:
        middle = (low + high + 1) // 2
        if len(one_line(repr(head[:middle]), most)) <= limit + 2:
            low = middle
        else:
            high = middle - 1
    return f"{one_line(repr(head[:low]), most)}... ({len(value):,} characters)"


def shown_end(value: str, limit: int = 40) -> str:
    """`value` quoted like `shown`, but a long one keeps its end, not its start: for a path
    or spec whose wrong part is its last (`...'ever/task.py' (82 characters)`)."""
    squeezed = _SPACES.sub(" ", value)
    most = 10 * (limit + 1) + 2  # an escape is at most 10 characters
    tail = squeezed[-limit - 1 :] if limit else ""
    while len(one_line(repr(tail), most)) > limit + 2:  # escapes took room: drop one
        tail = tail[1:]
    kept = one_line(repr(tail), most)
    return kept if tail == squeezed else f"...{kept} ({len(value):,} characters)"


def apart(first: str, second: str, limit: int = 40) -> tuple[str, str]:
    """Two texts quoted from a little before where they first differ, so that the difference
    shows: `...'+ 30?'` and `...'+ 7?'`, not two quotes of a start they share."""
    same = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        same += 1
    start = max(0, same - 10)
    lead = "..." if start else ""
    return lead + shown(first[start:], limit), lead + shown(second[start:], limit)


def listed(words: Iterable[str], conjunction: str) -> str:
    """`a`, `a or b`, `a, b or c`: the words (at least one) as a sentence lists them."""
    *rest, last = words
    return f"{', '.join(rest)} {conjunction} {last}" if rest else last


def closest(word: str, names: Iterable[str]) -> str | None:
    """The one of `names` that `word` most likely misspells (difflib's ratio 0.6 or more),
    or None: for "did you mean" after a name that is none of them."""
    found = difflib.get_close_matches(word, list(names), n=1, cutoff=0.6)
    return found[0] if found and found[0] != word else None


def describe(exc: BaseException, limit: int = 200) -> str:
    """An exception's message as one line; its type's name when it says nothing."""
    return one_line(str(exc), limit) or type(exc).__name__


def elided(message: str, value: object, mark: str = "<input>") -> str:
    """`message` with the text `value` it quotes put as `mark`, for a message shown beside
    `value` itself: `invalid literal for int() with base 10: <input> (on 'x4')`.

    Found quoted (`'x4'`, as `int()` and most errors quote), or bare when long
    enough not to be found by chance; stripped of surrounding whitespace or not.
    """
    if not isinstance(value, str):
        return message
    for text in dict.fromkeys((str(value), str(value).strip())):
        if text:
            message = message.replace(repr(text), mark)
            if len(text) >= ELIDED_BARE:
                message = message.replace(text, mark)
    return message
