"""A task's tools, resolved once (`Toolbox`), and one episode's tools (`Session`).

For: `mathrl.resolved.as_task`, which resolves a task's `tools` and their settings
(`toolbox_of`), the episodes (`mathrl.episodes`), which open a session per episode and
answer each call the model makes, and `check_adapter`, which plays reference episodes
through the same session. Not for: running a call within its time limit, which is the
caller's (the worker pool in a run), or rendering results (the chat template).
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mathrl.adapter import AdapterError, Message, Unavailable
from mathrl.text import describe, shown
from mathrl.tools.formats import FORMATS, Call, ToolFormat
from mathrl.tools.schema import Tool, ToolError, checked_arguments
from mathrl.tools.schema import describe as describe_tool

CALLS_PER_TURN = 4
"""Calls of one turn that are run, by default (`calls_per_turn`); the rest are refused."""
CALLS_PER_EPISODE = 8
"""Calls of one episode that are run, by default (`calls_per_episode`)."""
CALL_SECONDS = 30.0
"""Seconds one call may take, by default (`call_seconds`); then its reply is an error."""
TOOL_TURNS = 4
"""`max_turns` of a task with tools that declares none: calls, their results, an answer."""
MAX_CALL_SECONDS = 3600.0
TOOL_CALLS, FAILED_TOOL_CALLS = "tool_calls", "failed_tool_calls"
"""The episode's metrics: calls answered, and of them those answered with an error."""


class ToolFailed(Exception):
    """Raised by a tool to answer its call with an error that says its message alone (`Error:
    the code ran past its 5 s limit`), not the exception's type too, newlines kept."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of an episode and its answer, as records show it."""

    name: str
    arguments: Mapping[str, Any]
    result: str
    """The text the model is given back: the tool's result, or `Error: ...`."""
    failed: bool
    """True when the result is an error: unreadable, refused, raised, or late."""


def failed(call: Call, why: str) -> ToolCall:
    """`call` answered with the error `why`."""
    return ToolCall(call.name, dict(call.arguments), f"Error: {why}", True)


def refused(call: Call, refusal: str) -> ToolCall:
    """`call`, not run (past a cap: `Toolbox.refusals`), answered with why."""
    return failed(call, refusal)


@dataclass(frozen=True, slots=True)
class Toolbox:
    """A task's tools and their settings, resolved (`toolbox_of`)."""

    tools: Mapping[str, Tool]
    format: ToolFormat
    state: type | None
    """The class whose object each episode gets (its methods are the tools), or None."""
    calls_per_turn: int = CALLS_PER_TURN
    calls_per_episode: int = CALLS_PER_EPISODE
    seconds: float = CALL_SECONDS

    @property
    def schemas(self) -> list[Mapping[str, Any]]:
        """Every tool's schema, as the chat template takes them (`tools=`)."""
        return [tool.schema for tool in self.tools.values()]

    def parse(self, text: str) -> list[Call]:
        """The calls a turn wrote, in the task's format."""
        return self.format.parse(text)

    def refusals(self, calls: Sequence[Call], ran: int) -> list[str | None]:
        """For each of a turn's calls, after `ran` calls of the episode were run: None to run
        it, or why it is not run (past a cap; a call refused counts towards none)."""
        out: list[str | None] = []
        for i in range(len(calls)):
            if i >= self.calls_per_turn:
                out.append(f"not run: at most {_calls(self.calls_per_turn)} a turn")
            elif ran + i >= self.calls_per_episode:
                out.append(f"not run: at most {_calls(self.calls_per_episode)} an episode")
            else:
                out.append(None)
        return out

    def late(self, call: Call) -> ToolCall:
        """The answer to a call that ran past its time limit."""
        return failed(call, f"{call.name} did not return within {self.seconds:g} s")

    def messages(self, answered: Sequence[ToolCall]) -> list[Message]:
        """The results as the messages the chat template renders after the model's turn."""
        return [{"role": self.format.role, "content": c.result, "name": c.name} for c in answered]

    def open(self, problem: object) -> Session:
        """The tools of an episode of `problem` (its own tools object, if the task has a
        class of them): its calls go to it, and `close` ends it."""
        return Session(self, problem)


class Session:
    """One episode's tools: `run` answers a call, never raising for what the model wrote."""

    def __init__(self, toolbox: Toolbox, problem: object) -> None:
        self.toolbox = toolbox
        state = toolbox.state
        self.state: object | None = None
        if state is not None:
            self.state = state(problem) if _takes_problem(state) else state()

    def run(self, call: Call) -> ToolCall:
        """`call`'s answer: the tool's result as text (a str as it is, any other JSON value as
        JSON), or an error: a call that could not be read, names no tool, gives arguments
        that do not fit, raises (`ToolFailed`: its message alone), or returns what is neither.
        Only `Unavailable` (the machine cannot run the tool) passes through."""
        if call.error is not None:
            return failed(call, call.error)
        tool = self.toolbox.tools.get(call.name)
        if tool is None:
            names = ", ".join(self.toolbox.tools)
            return failed(call, f"there is no tool {shown(call.name)} (the tools: {names})")
        arguments = checked_arguments(tool, call.arguments)
        if isinstance(arguments, str):
            return failed(call, arguments)
        function = tool.function or getattr(self.state, tool.name)
        try:
            value = function(**arguments)
        except ToolFailed as exc:
            return failed(call, str(exc))
        except Unavailable:  # this machine cannot run the tool at all: the run stops, and says
            raise
        except Exception as exc:
            return failed(call, f"{type(exc).__name__}: {describe(exc, 300)}")
        text = result_text(value)
        if text is None:
            return failed(
                call, f"{tool.name} returned {shown(value)}, which is neither text nor JSON"
            )
        return ToolCall(call.name, dict(call.arguments), text, False)

    def close(self) -> None:
        """End the episode's tools object (its `close()`, if it has one)."""
        close = getattr(self.state, "close", None)
        if callable(close):
            close()


def result_text(value: object) -> str | None:
    """A tool's result as the text the model reads: a str as it is, None as nothing, another
    JSON value as JSON; None if it is none of them."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False)  # inf as Infinity: the model reads it
    except (TypeError, ValueError, RecursionError):
        return None


def _takes_problem(cls: type) -> bool:
    """Whether a tools class is made with the problem (its constructor takes an argument)."""
    return bool(_positional(cls))


def _positional(cls: type) -> list[inspect.Parameter]:
    """The parameters of `cls`'s constructor that an argument given by position may fill."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # a class of C's: made with nothing
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.VAR_POSITIONAL)  # fmt: skip
    return [p for p in params if p.kind in kinds]


def toolbox_of(adapter: object, label: str) -> Toolbox | None:
    """An adapter's tools and their settings, resolved; None for a task without tools;
    AdapterError (ToolError for a tool), one line, for what is not as `Adapter` says."""
    declared = getattr(adapter, "tools", None)
    if declared is None:
        return None
    state: type | None = None
    if isinstance(declared, type):
        state = declared
        members: dict[str, object] = {}
        for cls in reversed(declared.__mro__[:-1]):  # a base's methods, then its subclass's
            members.update(vars(cls))
        functions: list[tuple[Callable[..., Any], bool]] = [
            (member, True)  # plain methods: a staticmethod, a property, ... is no tool
            for name, member in members.items()
            if inspect.isfunction(member) and not name.startswith("_") and name != "close"
        ]
        if not functions:
            raise ToolError(
                f"{label}.tools is the class {declared.__name__}, which has no public method: "
                "each of its methods (not starting with _) is a tool"
            )
        needed = [p for p in _positional(declared) if p.kind != p.VAR_POSITIONAL]
        if sum(p.default is p.empty for p in needed) > 1:
            raise ToolError(
                f"{label}.tools: {declared.__name__}() is made with the problem alone, or with "
                "nothing, for each episode; its constructor needs more"
            )
    elif isinstance(declared, list | tuple) and declared and all(callable(f) for f in declared):
        functions = [(f, False) for f in declared]
    else:
        raise AdapterError(
            f"{label}.tools must be a list of functions, or a class whose methods are the tools "
            f"(got {shown(declared)})"
        )
    tools: dict[str, Tool] = {}
    for function, method in functions:
        tool = describe_tool(function, method)
        if tool.name in tools:
            raise ToolError(f"{label}.tools has two tools named {tool.name}")
        tools[tool.name] = tool
    return Toolbox(tools, _format(adapter, label), state, *_settings(adapter, label))


def _format(adapter: object, label: str) -> ToolFormat:
    given = getattr(adapter, "tool_format", "hermes")
    if isinstance(given, str):
        if given not in FORMATS:
            raise AdapterError(
                f"{label}.tool_format must be one of {', '.join(FORMATS)}, or a format object "
                f"(got {shown(given)})"
            )
        return FORMATS[given]
    if all(callable(getattr(given, m, None)) for m in ("parse", "write")) and isinstance(
        getattr(given, "role", None), str
    ):
        checked: ToolFormat = given  # what the test above makes it: role, parse and write
        return checked
    raise AdapterError(
        f"{label}.tool_format must name a format ({', '.join(FORMATS)}) or be one, with role, "
        f"parse and write (got {shown(given)})"
    )


def _settings(adapter: object, label: str) -> tuple[int, int, float]:
    per_turn = getattr(adapter, "calls_per_turn", CALLS_PER_TURN)
    per_episode = getattr(adapter, "calls_per_episode", CALLS_PER_EPISODE)
    seconds = getattr(adapter, "call_seconds", CALL_SECONDS)
    for name, value in (("calls_per_turn", per_turn), ("calls_per_episode", per_episode)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100):
            raise AdapterError(
                f"{label}.{name} must be an integer from 1 to 100 (got {shown(value)})"
            )
    if not (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and 0 < seconds <= MAX_CALL_SECONDS
    ):
        raise AdapterError(
            f"{label}.call_seconds must be a number of seconds above 0 and at most "
            f"{MAX_CALL_SECONDS:g} (got {shown(seconds)})"
        )
    return per_turn, per_episode, float(seconds)


def _calls(n: int) -> str:
    """`n` tool calls, in words: "1 tool call", "3 tool calls"."""
    return f"{n} tool call" if n == 1 else f"{n} tool calls"
