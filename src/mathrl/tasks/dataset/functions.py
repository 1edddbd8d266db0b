"""The dataset task's reward and metric functions: found by name, checked, weighed and called.

For: `DatasetTask`, whose `reward` and `metrics` options name plain functions
(`units.py:close`, `mypackage.rewards:close`, several joined by commas) or
are the functions themselves. Not for: the task's rows or prompts.

A function takes one completion and its row's fields by name, as TRL's reward
functions take a dataset's columns (one at a time here, not batched):

    def close(completion, answer, **row):
        ...

and returns a number, or named numbers (`{"correct": 1.0, "format": 0.1}`).
The completion is a `mathrl.adapter.Response`: its text, without the stop
sequence that ended it, and how it ended. A function that raises, or returns
what is not a finite number or named finite numbers, is the task's bug: the
run stops, once, with one line naming the function and the row
(`FunctionError`), and `check-adapter` reports it the same way.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mathrl.adapter import OptionError
from mathrl.text import describe, one_line, shown

RowFunction = Callable[..., object]
"""A reward or metric function: `fn(completion, **fields) -> number | named numbers`."""
FunctionSpec = str | RowFunction | Sequence[RowFunction]
"""How a function is given: `file.py:name` or `module:name` (commas between several), the
function, or a list of them."""


class FunctionError(RuntimeError):
    """A reward or metric function failed on a row: the message names both, in one line."""


@dataclass(frozen=True, slots=True)
class Named:
    """A function, the name its part or metric goes by, its weight, and how a run records it."""

    function: RowFunction
    name: str
    weight: float
    spec: str
    given: str = ""
    """As it was given (`units.py:close`), for messages: `spec` may be a long absolute path."""


def functions(
    given: FunctionSpec,
    weights: str | Sequence[float],
    option: str,
    known: Mapping[str, RowFunction] | None = None,
) -> list[Named]:
    """The functions `given` as option `option`, each with its weight (`weights`: one a
    function, given as text `1,0.2` or numbers; empty: 1 each); `known` are functions a
    name alone gives (`exact`). OptionError if one cannot be found or weighed."""
    known = known or {}
    if callable(given):
        found: list[tuple[RowFunction, str, str]] = [(given, _spec_of(given), _spec_of(given))]
    elif isinstance(given, str):
        parts = [p.strip() for p in given.split(",")] if given.strip() else []
        found = [(known[p], p, p) if p in known else (*_load(p, option), p) for p in parts]
    else:
        found = [(f, _spec_of(f), _spec_of(f)) for f in given]
        if not all(callable(f) for f, _, _ in found):
            raise OptionError(option, f"{option} must be functions (got {shown(given)})")
    numbers = _weights(weights, len(found), option)
    names: dict[str, int] = {}
    named = []
    for (function, spec, as_given), weight in zip(found, numbers, strict=True):
        base = getattr(function, "__name__", "") or "function"
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base}{names[base]}"
        named.append(Named(function, name, weight, spec, as_given))
    return named


def recorded(named: Sequence[Named]) -> str:
    """How a run records functions: their specs, joined by commas."""
    return ",".join(n.spec for n in named)


def check_takes(named: Sequence[Named], fields: Mapping[str, object], option: str) -> None:
    """OptionError unless each function can be called with a completion and `fields` (a row's
    fields) by name."""
    for n in named:
        try:
            inspect.signature(n.function).bind("completion", **fields)
        except TypeError as exc:
            raise OptionError(
                option,
                f"{option} function {n.spec} cannot take a completion and a row's fields by "
                f"name ({describe(exc, 100)}): give it a **fields parameter for the rest, e.g. "
                "def reward(completion, answer, **fields)",
            ) from None
        except ValueError:  # no signature to read (a builtin): called as it is
            continue


def call(
    named: Sequence[Named], completion: object, fields: Mapping[str, Any], where: str
) -> dict[str, float]:
    """Each function's weighted value on `completion`, by part name (a function's named
    parts are `NAME.PART`); FunctionError naming the function and the row if one fails."""
    parts: dict[str, float] = {}
    single = len(named) == 1
    for n in named:
        try:
            value = n.function(completion, **fields)
        except Exception as exc:  # the row first: a long message is cut at its end
            raise FunctionError(
                f"on {where}, {n.given} raised {type(exc).__name__}: {describe(exc, 120)}"
            ) from None
        if isinstance(value, Mapping):
            for part, number in value.items():
                name = str(part) if single else f"{n.name}.{part}"
                parts[name] = n.weight * _finite(n, number, value, where, part)
        else:
            parts[n.name] = n.weight * _finite(n, value, value, where, None)
    return parts


def _finite(n: Named, number: object, whole: object, where: str, part: object) -> float:
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        what = f"part {shown(part)} " if part is not None else ""
        raise FunctionError(
            f"on {where}, {n.given} returned {what}{one_line(repr(whole), 80)}: it must "
            "return a finite number or a mapping of names to finite numbers"
        )
    return float(number)


def _weights(weights: str | Sequence[float], count: int, option: str) -> list[float]:
    if isinstance(weights, str):
        texts = [w.strip() for w in weights.split(",")] if weights.strip() else []
        try:
            numbers = [float(w) for w in texts]
        except ValueError:
            numbers = [math.nan]
    else:
        numbers = [float(w) if isinstance(w, int | float) else math.nan for w in weights]
    if not numbers:
        return [1.0] * count
    if len(numbers) != count or not all(math.isfinite(w) and w > 0 for w in numbers):
        raise OptionError(
            "weights",
            f"weights must be {count} positive numbers, one for each of {option}'s functions, "
            f"e.g. {','.join(['1'] * count)} (got {shown(weights)})",
        )
    return numbers


def _spec_of(function: RowFunction) -> str:
    module = getattr(function, "__module__", None) or "?"
    return f"{module}:{getattr(function, '__qualname__', repr(function))}"


def _load(spec: str, option: str) -> tuple[RowFunction, str]:
    """The function `spec` names, and the spec as a run records it (a file absolute)."""
    where, sep, name = spec.rpartition(":")
    if not (sep and where and name):
        raise OptionError(
            option,
            f"{option} must be FILE.py:FUNCTION or MODULE:FUNCTION, e.g. rewards.py:close "
            f"(got {shown(spec)})",
        )
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise OptionError(option, f"{option}: no such file {shown(where)}")
        module = _from_file(path, option)
        recorded = f"{os.path.abspath(where)}:{name}"
    else:
        module = _import(where, option)
        recorded = spec
        local = Path.cwd() / f"{where}.py"
        if "." not in where and local.is_file():  # found beside you: works from anywhere
            recorded = f"{local.absolute()}:{name}"
    target: Any = module
    for part in name.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise OptionError(option, f"{option}: {shown(where)} has no function {shown(name)}")
    return target, recorded


def _from_file(path: Path, option: str) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise OptionError(option, f"{option}: cannot import {shown(str(path))} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(path.stem, module)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise OptionError(
            option,
            f"{option}: importing {shown(str(path))} failed ({type(exc).__name__}: "
            f"{describe(exc, 120)})",
        ) from None
    return module


def _import(name: str, option: str) -> Any:
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as `python -m` does: modules beside you import
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise OptionError(
            option,
            f"{option}: cannot import module {shown(name)} ({type(exc).__name__}: "
            f"{describe(exc, 120)}; run from the folder that holds it, or add it to PYTHONPATH)",
        ) from None
