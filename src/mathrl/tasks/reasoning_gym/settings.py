"""The reasoning-gym task's options: which dataset, and that dataset's own settings.

For: `ReasoningGym.__init__`, which checks its options here and raises `OptionError`
with one line for a bad one. A dataset's settings are the fields of its config
dataclass in reasoning-gym (`reasoning_gym.factory.DATASETS[name][1]`), e.g.
`chain_sum`'s `min_terms`. Options are strings, integers, numbers or True/False (the
command line gives strings), so each is converted by its field's type: a number or
a flag from its text, a choice (`Literal`, `Enum`) by its value, a list from
comma-separated values (`operators="+,-"`). Fields of other types (dates, nested
configs) cannot be set this way. Not for: drawing or scoring problems.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mathrl.adapter import OptionError
from mathrl.resolved import OptionValue
from mathrl.text import shown

RUNS_THE_ANSWER: dict[str, str] = {
    **dict.fromkeys(
        ("binary_matrix", "n_queens", "spiral_matrix", "string_insertion"),
        "its score_answer runs the model's answer as Python with eval(), and model output "
        "never runs in the trainer's process",
    ),
    **dict.fromkeys(
        (
            "countdown",
            "intermediate_integration",
            "polynomial_multiplication",
            "puzzle24",
            "simple_integration",
        ),
        "its score_answer runs the model's answer as Python through sympy's parse_expr, and "
        "model output never runs in the trainer's process",
    ),
}
"""Datasets whose scorer runs model output as code: read from reasoning-gym 0.1.25's
source, and checked against the installed library's by tests/test_reasoning_gym.py."""
NOT_REPEATABLE: dict[str, str] = {
    **dict.fromkeys(
        ("isomorphic_strings", "ransom_note"),
        "its questions depend on the order of a set of letters, which changes from one "
        "process to the next (PYTHONHASHSEED), so a resumed run would not draw the same ones",
    ),
    "codeio": "its generator runs sample programs from its data file in the trainer's "
    "process, some of which draw from numpy's global random state or the clock, so its "
    "problems change from one draw to the next",
}
"""Datasets whose problems are not a function of the seed: found by
tests/bench/survey_reasoning_gym.py (draws digested in three processes)."""
REFUSED = RUNS_THE_ANSWER | NOT_REPEATABLE
"""Every dataset the task refuses, and why."""
RUN_SET = frozenset({"seed", "size"})
"""Config fields the task sets itself, per draw."""
_INTEGER = re.compile(r"-?[0-9]{1,30}")
_SCALARS = (bool, int, float, str)
_BUILT_IN: dict[str, type] = {t.__name__: t for t in _SCALARS}
"""A scalar annotation written as a string, as `from __future__ import annotations` keeps it."""


class _Refused(ValueError):
    """A value that does not fit its field: the message says what it must be."""


def check_dataset(name: str, known: Collection[str]) -> None:
    """Raise OptionError unless `name` is one of `known` and not refused (`REFUSED`)."""
    if name in REFUSED:
        raise OptionError(
            "dataset", f"dataset {name!r} cannot be used: {REFUSED[name]}; choose another one"
        )
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        examples = close or ["basic_arithmetic", "chain_sum", "leg_counting", "word_sorting"]
        hint = "did you mean " if close else "e.g. "
        raise OptionError(
            "dataset",
            f"dataset must be one of reasoning-gym's {len(known)} datasets "
            f"({hint}{', '.join(examples)}) (got {shown(name)})",
        )


def convert_settings(
    dataset: str, config: type, given: Mapping[str, OptionValue]
) -> tuple[dict[str, Any], dict[str, OptionValue]]:
    """(keyword arguments for the dataset's config, the settings as options record them).

    Each setting is converted by its field's type; a recorded setting is the
    converted value when that is a string, number or flag, else the canonical text
    (a list as comma-separated values), so "3" and 3 record alike.
    """
    fields = {f.name: f for f in dataclasses.fields(config) if f.name not in RUN_SET}
    try:
        hints = typing.get_type_hints(config)
    except Exception:  # an annotation that does not resolve: read each field's as written
        hints = {name: _BUILT_IN.get(str(f.type), f.type) for name, f in fields.items()}
    kwargs: dict[str, Any] = {}
    recorded: dict[str, OptionValue] = {}
    for name in sorted(given):
        value = given[name]
        if name in RUN_SET:
            raise OptionError(name, f"{name} is chosen by the task for each draw, not a setting")
        if name not in fields:
            raise OptionError(
                name,
                f"{name} is not a setting of reasoning-gym's {dataset} "
                f"(its settings: {', '.join(sorted(fields)) or 'none'}) (got {shown(value)})",
            )
        try:
            kwargs[name], recorded[name] = _convert(value, hints.get(name, fields[name].type))
        except _Refused as exc:
            message = f"{name} of {dataset} must be {exc} (got {shown(value)})"
            raise OptionError(name, message) from None
    return kwargs, recorded


def _convert(value: OptionValue, hint: Any) -> tuple[Any, OptionValue]:
    """`value` as a field of type `hint` takes it, and as the options record it."""
    hint = _unoptional(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        element = args[0] if args else str
        if not isinstance(value, str) or (args[1:] and args[1] is not Ellipsis):
            raise _Refused("comma-separated values in one string")
        try:
            items = [_scalar(part.strip(), element) for part in value.split(",")] if value else []
        except _Refused as exc:
            raise _Refused(f"comma-separated values, each {exc}") from None
        made = list(items) if origin is list or hint is list else tuple(items)
        return made, ",".join(str(_recorded(item)) for item in items)
    converted = _scalar(value, hint)
    return converted, _recorded(converted)


def _scalar(value: OptionValue, hint: Any) -> Any:
    """`value` as one value of type `hint` (a str, number, flag, Literal or Enum)."""
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        matches = [c for c in choices if c == value or str(c) == value]
        if not matches:
            raise _Refused(f"one of {', '.join(map(str, choices))}")
        return matches[0]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if member.value == value or str(member.value) == value:
                return member
        raise _Refused(f"one of {', '.join(str(m.value) for m in hint)}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _Refused("true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            return int(value)
        raise _Refused("an integer")
    if hint is float:
        number = _number(value)
        if number is None:
            raise _Refused("a number")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Refused("text")
    raise _Refused(f"a {_describe(hint)}, which task options cannot give; leave it at its default")


def _number(value: OptionValue) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and value.strip().isascii():
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _unoptional(hint: Any) -> Any:
    """`X` for `Optional[X]` (a setting given is never None), else `hint`."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, _UnionType) and len(args) == 1:
        return args[0]
    return hint


_UnionType = type(int | None)


def _recorded(value: Any) -> OptionValue:
    if isinstance(value, enum.Enum):
        value = value.value
    return value if isinstance(value, _SCALARS) else str(value)


def _describe(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
