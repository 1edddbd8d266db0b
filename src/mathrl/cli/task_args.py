"""`--task-arg NAME=VALUE`: a task's own settings, given on the command line.

For: `mathrl.cli.loader`, which builds the task with them, and `tasks`, which
lists each built-in task's options. A task's options are the keyword
parameters of its constructor (`mathrl.adapter.Adapter`, `options`): each has
a default and an annotation of str, int, float or bool (or a union with str,
such as `str | Callable[..., float]`, given as text here), by which a value given
as text is read (`true`/`false`, yes/no, on/off or 1/0 for a switch), and a
line in the constructor docstring's `Args:` section, which `tasks` shows. The
constructor checks the values (`OptionError`); what the task keeps of them
(`options`) goes into the run folder, and `--resume`, `sample` and `eval`
build the task again with those.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mathrl.cli.settings import parse_bool, parse_float, parse_int
from mathrl.config import ConfigError
from mathrl.resolved import OptionValue
from mathrl.text import closest, listed, shown

FLAG = "--task-arg"
KINDS: dict[type, tuple[str, Callable[[str], OptionValue]]] = {
    bool: ("true or false", parse_bool),
    int: ("an integer", parse_int),
    float: ("a number", parse_float),
    str: ("text", str),
}
"""Each type an option may have: how a message names it, and how its text is read."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MORE = "**"
"""The options of a task whose constructor takes any more keywords (`**settings`): each is
passed on as it was given, for the task to read and check."""


@dataclass(frozen=True, slots=True)
class TaskOption:
    """One option of a task's constructor."""

    name: str
    kind: type
    default: OptionValue
    help: str = ""


def given_task_args(values: Sequence[str] | None) -> dict[str, str]:
    """`NAME=VALUE` texts (one a `--task-arg`) by name; ConfigError for a bad or repeated one."""
    given: dict[str, str] = {}
    for text in values or ():
        name, sep, value = text.partition("=")
        if not (sep and _NAME.fullmatch(name)):
            raise ConfigError(f"{FLAG} must be NAME=VALUE, e.g. few_shot=2 (got {shown(text)})")
        if name in given:
            raise ConfigError(f"{FLAG} {name} is given twice (got {given[name]!r} and {value!r})")
        given[name] = value
    return given


def task_options_of(target: Callable[..., Any]) -> dict[str, TaskOption]:
    """The options a task class (or a function that makes a task) takes, by name: each
    keyword parameter with a default and an annotation of one of KINDS."""
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin, say): it takes none
        return {}
    init = _constructor(target)
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # annotations that do not resolve: such parameters are no options
        hints = {}
    helps = _arg_lines(inspect.getdoc(init) or "")
    options = {}
    for name, parameter in parameters.items():
        kind = _kind(hints.get(name))
        if parameter.kind == parameter.VAR_KEYWORD:  # any more, given as text: the task reads
            options[MORE] = TaskOption(MORE, str, "", helps.get(f"**{name}", ""))
            continue
        if (
            parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            and parameter.default is not parameter.empty
            and kind in KINDS
        ):
            options[name] = TaskOption(name, kind, parameter.default, helps.get(name, ""))
    return options


def _kind(hint: object) -> object:
    """The kind an annotation gives an option: itself, or `str` for a union that takes text
    (`str | Callable[..., float]`: text on the command line, anything from Python)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and str in typing.get_args(hint):
        return str
    return hint


def _constructor(target: Callable[..., Any]) -> Callable[..., Any]:
    """The function a call of `target` runs: a class's own (or inherited) `__init__`."""
    if isinstance(target, type):  # `object` has one: the search always ends
        init: Callable[..., Any] = next(
            vars(klass)["__init__"] for klass in target.__mro__ if "__init__" in vars(klass)
        )
        return init
    return target


def _arg_lines(doc: str) -> dict[str, str]:
    """`name: text` lines of a docstring's `Args:` section, each joined into one line."""
    helps: dict[str, str] = {}
    section, name = False, ""
    for line in doc.splitlines():
        if line.strip() == "Args:":
            section = True
            continue
        if not section:
            continue
        if line and not line.startswith(" "):  # the next section
            break
        found = re.match(r"\s{2,8}((?:\*\*)?\w+)(?: \([^)]*\))?: (.*)", line)
        if found and not line.startswith(" " * 9):
            name = found[1]
            helps[name] = found[2].strip()
        elif name and line.strip():
            helps[name] += " " + line.strip()
    return helps


def converted(
    options: Mapping[str, TaskOption], given: Mapping[str, object], task: str
) -> dict[str, OptionValue]:
    """`given` (text from the command line, or values from a run's record) as the
    constructor takes them; ConfigError naming the option for one it does not take or
    cannot read."""
    values: dict[str, OptionValue] = {}
    for name, value in given.items():
        option = options.get(name)
        if option is None and MORE in options:  # the task takes more, and reads them itself
            values[name] = value if isinstance(value, str | int | float | bool) else str(value)
            continue
        if option is None:
            takes = f"its options: {listed(sorted(options), 'and')}" if options else "it has none"
            guess = closest(name, options)
            maybe = f"; did you mean {guess}?" if guess else ""
            raise ConfigError(f"{FLAG} {name}: task {task} takes no option {name} ({takes}){maybe}")
        requirement, read = KINDS[option.kind]
        if isinstance(value, str) and option.kind is not str:
            try:
                value = read(value)
            except ValueError:
                raise ConfigError(
                    f"{FLAG} {name} must be {requirement} (got {shown(value)})"
                ) from None
        elif option.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not option.kind or not isinstance(value, str | int | float | bool):
            raise ConfigError(f"{FLAG} {name} must be {requirement} (got {shown(value)})")
        values[name] = value
    return values


def described(options: Mapping[str, TaskOption]) -> list[str]:
    """One line an option, for `tasks`: its name, default and what it is."""
    return [
        ("NAME=VALUE" if o.name == MORE else f"{o.name}={_default(o.default)}")
        + (f"  {o.help}" if o.help else "")
        for o in options.values()
    ]


def _default(value: OptionValue) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if value == "" else str(value)
