"""Telling problems apart: a problem's fingerprint, the same in every process.

For: whatever compares problems rather than prompts (problems may share a
prompt: a game whose secret the prompt hides, twenty questions, guess the
number): `check_adapter`'s determinism and overlap checks, the held-out set's
guard against training problems, and the fake backend's knowledge of which
problems a prompt may be. Not for: naming a problem in a message (its prompt
does that: `mathrl.testing.checker.problem_name`).

The rule (`problem_fingerprint`): the problem's value, written out in a
canonical form and hashed. Numbers, strings, bytes, None and enums are their
`repr`; tuples and lists their items in order; dicts and mappings their items
and sets their members, each sorted by their own canonical form (a set's order
changes with PYTHONHASHSEED, its members do not); a dataclass its class's name
and the fields it compares by; any other object its class's name and its
attributes (`vars`, or its `__slots__`), by name. Not `repr` (an object's
default one holds its address, a set's its hash order) and not `pickle` (its
bytes depend on which equal strings are one object). A problem holding
anything else (a function, a file, an object without attributes) has no
fingerprint: `Unfingerprintable` names where it is, and the loop and the fake
then know that problem by its prompt alone, as `problem_key` says.

A game with few secrets (a number from 1 to 8) has few distinct problems, so
its held-out games would repeat training ones: give each problem the game it
is (`Game(secret=3, serial="heldout-17")`, as tests/doubles/secret_game.py
does), and held-out games are other problems, whatever their secrets.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Mapping, Set
from typing import Any

from mathrl.adapter import Prompt

LEAVES = (type(None), bool, int, float, complex, str, bytes)
"""Types that are their `repr`: the same value has the same one in every process."""
MAX_DEPTH = 100
"""How deeply nested a problem may be (deeper is taken for one that holds itself)."""


class Unfingerprintable(TypeError):
    """A problem holds a value with no fingerprint; the message says where and what it is."""


def problem_fingerprint(problem: object) -> str:
    """32 hex digits that two problems share exactly when their values are the same (see the
    module docstring); Unfingerprintable if the problem holds something that has none."""
    canonical = _canonical(problem, "the problem", 0)
    return hashlib.blake2b(canonical.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def problem_key(adapter: Any, problem: object) -> str:
    """What tells `problem` apart from a task's other problems: its fingerprint, or, for a
    problem that has none (`check_adapter` says why), its prompt (`prompt_key`)."""
    try:
        return problem_fingerprint(problem)
    except Unfingerprintable:
        return "prompt:" + prompt_key(adapter.make_prompt(problem))


def prompt_key(prompt: Prompt) -> str:
    """A prompt as one string, to compare prompts: the text, or the conversation's turns."""
    if isinstance(prompt, str):
        return prompt
    return "\x00".join(f"{m.get('role', '')}\x01{m.get('content', '')}" for m in prompt)


def _canonical(value: object, where: str, depth: int) -> str:
    if depth > MAX_DEPTH:
        raise Unfingerprintable(
            f"{where} is nested more than {MAX_DEPTH} deep (or holds itself), so it has no "
            "fingerprint"
        )
    if isinstance(value, enum.Enum):
        return f"{_name(type(value))}.{value.name}"
    if isinstance(value, LEAVES):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, type):
        return f"type:{_name(value)}"
    kind = _name(type(value))
    if isinstance(value, tuple | list):
        items = [_canonical(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return f"{kind}({','.join(items)})"
    if isinstance(value, Mapping):
        pairs = sorted(
            f"{_canonical(k, f'a key of {where}', depth + 1)}:"
            f"{_canonical(v, f'{where}[{k!r}]', depth + 1)}"
            for k, v in value.items()
        )
        return f"{kind}{{{','.join(pairs)}}}"
    if isinstance(value, Set):
        members = sorted(_canonical(v, f"a member of {where}", depth + 1) for v in value)
        return f"{kind}{{{','.join(members)}}}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f.name for f in dataclasses.fields(value) if f.compare]
    else:
        fields = _attributes(value, where)
    parts = [f"{n}={_canonical(getattr(value, n), f'{where}.{n}', depth + 1)}" for n in fields]
    return f"{kind}({','.join(parts)})"


def _attributes(value: object, where: str) -> list[str]:
    """The names of a plain object's attributes, sorted; Unfingerprintable if it has none."""
    names = set(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        slots = vars(cls).get("__slots__", ())
        names.update([slots] if isinstance(slots, str) else slots)
    names = {n for n in names if n not in ("__dict__", "__weakref__") and hasattr(value, n)}
    if not names:
        raise Unfingerprintable(
            f"{where} is a {type(value).__qualname__}, which has no fingerprint (no value "
            "of its own to compare): make problems of numbers, strings, bytes, tuples, lists, "
            "dicts, sets, dataclasses or objects whose attributes are these"
        )
    return sorted(names)


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
