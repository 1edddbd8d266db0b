"""A tool's JSON schema, from its signature and docstring; and a call's arguments, checked.

For: `mathrl.tools.toolbox`, which describes each of a task's tools once (`describe`) and
checks each call the model makes against it (`checked_arguments`). Pure: no I/O, nothing
is called. Not for: how a call is written (`mathrl.tools.formats`) or run.

The schema is the one transformers' `get_json_schema` derives, so a chat template gets
what `apply_chat_template(tools=[function])` would give it: `{"type": "function",
"function": {"name", "description", "parameters"}}`, the description the docstring's text
before its first section (`Args:`, `Returns:`, `Raises:`), and each parameter's the text of
its line under `Args:` (Google style: `name: text`, or `name (type): text`, continued on
lines indented deeper). A parameter's type is one of:

    str, int, float, bool                 "string", "integer", "number", "boolean"
    list, list[T]                         "array" (with "items")
    dict, dict[str, T]                    "object" (with "additionalProperties")
    Literal["a", "b"] of str/int/float/bool   "enum"
    T | None, T | U of those              "nullable", a list of types, or "anyOf"

A parameter without a default is required. What cannot be derived (no docstring, a
parameter without a type or an `Args:` line, a type outside that list, `*args`, a
positional-only parameter, an `async def`, a name a model cannot write) is refused with
`ToolError`, one line naming the tool and what to change.

Arguments, checked (`checked_arguments`): every required one given, none unknown, each of
its declared type as JSON gives it: an integer where an int is declared (3.0 is taken as 3:
JSON has one kind of number), any number for a float, never True for a number.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from mathrl.adapter import AdapterError
from mathrl.text import shown

TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""What a tool's name may be: a function's name, which every call format can write."""
SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
SECTIONS = ("Args:", "Returns:", "Raises:")
"""The docstring's section headers; the description is the text before the first."""
_ARG_LINE = re.compile(r"(\w+)(?:[ \t]*\([^()\n]*\))?:\s*(.*)")


class ToolError(AdapterError):
    """A tool whose schema cannot be derived. One line: the tool, what is wrong, what to do."""


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool as a task declares it: its name, its schema and what its arguments must be."""

    name: str
    schema: Mapping[str, Any]
    """`{"type": "function", "function": {...}}`, as a chat template takes it."""
    parameters: Mapping[str, Any]
    """Each parameter's type (a type hint), in the signature's order."""
    required: tuple[str, ...]
    function: Callable[..., Any] | None
    """The function to call; None for a method of the task's tools class, called on each
    episode's own object."""


def describe(function: Callable[..., Any], method: bool = False) -> Tool:
    """`function` as a tool (a method of a class if `method`: its first parameter is the
    object); ToolError, one line, if its schema cannot be derived."""
    name = getattr(function, "__name__", "")
    label = f"tool {name}" if name else f"tool {shown(function)}"
    if not TOOL_NAME.fullmatch(name):
        raise ToolError(
            f"{label}: a tool's name must be a Python identifier of at most 64 characters, "
            "which a model can write in a call (define it with def, not lambda)"
        )
    if inspect.iscoroutinefunction(function):
        raise ToolError(f"{label} is async: a tool is a plain function (tools run on threads)")
    doc = inspect.getdoc(function)
    if not doc:
        raise ToolError(
            f"{label} has no docstring: its first lines describe the tool to the model, and an "
            "'Args:' line each parameter"
        )
    description, documented = parse_docstring(doc)
    try:
        hints = typing.get_type_hints(function)
    except Exception as exc:  # a name the annotations use that is not defined
        raise ToolError(f"{label}: its type hints cannot be read ({exc})") from None
    params = list(inspect.signature(function).parameters.values())[1 if method else 0 :]
    properties: dict[str, Any] = {}
    types_: dict[str, Any] = {}
    required: list[str] = []
    for param in params:
        where = f"{label}'s parameter {param.name}"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ToolError(f"{where} is {param.kind.description}: a model gives arguments by name")
        if param.name not in hints:
            raise ToolError(f"{where} has no type hint: a model needs its type (str, int, ...)")
        if param.name not in documented:
            raise ToolError(
                f"{where} has no line under 'Args:' in the docstring (e.g. "
                f"'{param.name}: what it is'): the model reads it"
            )
        properties[param.name] = {
            **type_schema(hints[param.name], where),
            "description": documented[param.name],
        }
        types_[param.name] = hints[param.name]
        if param.default is param.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    schema = {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }
    return Tool(name, schema, types_, tuple(required), None if method else function)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring's description (its text before the first section) and each
    parameter's description under `Args:` (continuation lines joined by single spaces)."""
    lines = doc.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() in SECTIONS]
    first = starts[0] if starts else len(lines)
    description = "\n".join(lines[:first]).strip()
    documented: dict[str, str] = {}
    if "Args:" in (lines[i].strip() for i in starts):
        at = next(i for i in starts if lines[i].strip() == "Args:")
        end = next((i for i in starts if i > at), len(lines))
        block = [line for line in lines[at + 1 : end] if line.strip()]
        indent = min((len(line) - len(line.lstrip()) for line in block), default=0)
        current: str | None = None
        for line in block:
            deeper = len(line) - len(line.lstrip()) > indent
            entry = None if deeper else _ARG_LINE.fullmatch(line.strip())
            if entry is not None:
                current = entry[1]
                documented[current] = entry[2].strip()
            elif current is not None:
                documented[current] = f"{documented[current]} {line.strip()}".strip()
    return description, documented


def type_schema(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of a parameter's type hint (module docstring); ToolError otherwise."""
    origin, args = get_origin(hint), get_args(hint)
    if hint in SCALARS:
        return {"type": SCALARS[hint]}
    if hint is list or origin is list:
        return {"type": "array", **({"items": type_schema(args[0], where)} if args else {})}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise ToolError(f"{where}: a dict's keys must be str, as a JSON object's are")
        values = {"additionalProperties": type_schema(args[1], where)} if args else {}
        return {"type": "object", **values}
    if origin is Literal and args and all(type(a) in SCALARS for a in args):
        kinds = list(dict.fromkeys(SCALARS[type(a)] for a in args))
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        subtypes = [type_schema(a, where) for a in args if a is not type(None)]
        if len(subtypes) == 1:
            union = subtypes[0]
        elif all(s.keys() == {"type"} and isinstance(s["type"], str) for s in subtypes):
            names = sorted({s["type"] for s in subtypes})
            union = {"type": names[0] if len(names) == 1 else names}
        else:
            union = {"anyOf": subtypes}
        return {**union, "nullable": True} if type(None) in args else union
    raise ToolError(
        f"{where} is {shown(hint, 60)}: a tool's parameters are str, int, float, bool, list, "
        "dict[str, ...], Literal or unions of those"
    )


def checked_arguments(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any] | str:
    """The arguments, as the tool's parameters take them (3.0 as 3 for an int); or why they
    do not fit its signature, one phrase."""
    unknown = [name for name in arguments if name not in tool.parameters]
    if unknown:
        expected = ", ".join(tool.parameters) or "none"
        return f"{tool.name} has no parameter {shown(unknown[0])} (its parameters: {expected})"
    missing = [name for name in tool.required if name not in arguments]
    if missing:
        return f"{tool.name} needs the argument {missing[0]!r}"
    checked = {}
    for name, value in arguments.items():
        ok, fitted = _fitted(tool.parameters[name], value)
        if not ok:
            kind = _kind(tool.parameters[name])
            return f"{tool.name}'s argument {name!r} must be {kind} (got {shown(value)})"
        checked[name] = fitted
    return checked


def _fitted(hint: Any, value: Any) -> tuple[bool, Any]:
    """(True, the value as `hint` takes it) if `value`, as JSON gives it, is of type `hint`."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:  # 3.0 is JSON's 3 too
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return _number(value) and isinstance(value, int), value
    if hint is float:
        return _number(value), float(value) if _number(value) else value
    if hint is str:
        return isinstance(value, str), value
    if hint is list or origin is list:
        if not isinstance(value, list):
            return False, value
        listed = [_fitted(args[0], v) if args else (True, v) for v in value]
        return all(ok for ok, _ in listed), [v for _, v in listed]
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            return False, value
        items = {k: _fitted(args[1], v) if args else (True, v) for k, v in value.items()}
        return all(ok for ok, _ in items.values()), {k: v for k, (_, v) in items.items()}
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args), value
    assert origin in (typing.Union, types.UnionType), f"a type `describe` refuses: {hint!r}"
    if value is None:
        return type(None) in args, value
    for arg in args:
        ok, fitted = _fitted(arg, value) if arg is not type(None) else (False, value)
        if ok:
            return True, fitted
    return False, value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(hint: Any) -> str:
    """A type hint as a message names what a value must be: `an integer`, `a list`."""
    schema = type_schema(hint, "")
    if "enum" in schema:
        return "one of " + ", ".join(map(shown, schema["enum"]))
    kind = schema.get("type", "a value of one of its types")
    kinds = kind if isinstance(kind, list) else [kind]
    words = {"string": "a string", "integer": "an integer", "number": "a number",
             "boolean": "true or false", "array": "a list", "object": "an object"}  # fmt: skip
    named = " or ".join(words.get(str(k), str(k)) for k in kinds)
    return f"{named} or null" if schema.get("nullable") else named
