"""The tools' part of `check_adapter`, for a task with tools (`mathrl.tools`).

- every schema: JSON that reads back the same, a description for the tool and for
  each parameter, and rendered by the chat template of the tokenizer in use;
- the episode's tools open and close without raising (`ToolSessions`, which the
  episode checks play every episode through, as a run does);
- malformed calls (`probe`), written in the task's format: a tool that does not exist,
  an argument it does not take, one missing, one of the wrong type; each must be
  answered with an error, and the reply rendered by the chat template;
- each tool called with hostile arguments of its declared types (the empty string,
  10,000 characters, control characters, a huge or negative number, ...): whatever it
  does, raising included (answered with an error), it must answer within its time
  limit, with text or JSON;
- `final_answer` reads the reference episode's answer turn (`answer_turn`);
- the reference episode's calls (in `episode_checks`) name only the task's tools, with
  arguments that fit, and none is answered with an error; and played again after all
  of these, it gets the same results: a tool keeps no state across episodes (the
  module's, the class's or the task's), only on the episode's own tools object.
"""

from __future__ import annotations

import json
import threading
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, get_args, get_origin

from mathrl.adapter import Response
from mathrl.backend import Tokenizer
from mathrl.episodes import message_tokens
from mathrl.resolved import Task
from mathrl.testing.checker import Checker
from mathrl.testing.inputs import ADVERSARIAL
from mathrl.text import describe, shown
from mathrl.tools import Call, Session, Tool, Toolbox, ToolCall

HOSTILE: dict[type, tuple[object, ...]] = {
    str: tuple(text for _, text in ADVERSARIAL),
    int: (0, -1, 10**18, -(10**18)),
    float: (0.0, -0.0, 1e308, -1e-308),
    bool: (True, False),
}
"""Values of each type a tool must answer, whatever it makes of them."""


@dataclass(frozen=True, slots=True)
class Answered:
    """What a session's call gave within its time limit, or why nothing did."""

    call: ToolCall | None
    error: BaseException | None = None


def within(fn: Callable[[], ToolCall], seconds: float) -> Answered:
    """`fn()` on a daemon thread, given up after `seconds` (as a run's pool gives up a call)."""
    outcome: list[Answered] = []

    def run() -> None:
        try:
            outcome.append(Answered(fn()))
        except BaseException as exc:  # handed back, never lost
            outcome.append(Answered(None, exc))

    thread = threading.Thread(target=run, name="mathrl-check-tool", daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else Answered(None)


class ToolSessions:
    """The task's tools in the episodes `check_adapter` plays: opened, answered, closed."""

    def __init__(self, checker: Checker, tokenizer: Tokenizer, toolbox: Toolbox) -> None:
        self.c, self.tokenizer, self.toolbox = checker, tokenizer, toolbox
        self.task = checker.task

    def open(self, problem: Any, where: str) -> Session | None:
        ok, session = self.c.call(
            f"the tools of an episode of {where} ({self._made()})",
            lambda: self.toolbox.open(problem),
            key="tools-open",
        )
        return session if ok else None

    def close(self, session: Session, where: str) -> None:
        self.c.call(
            f"the tools' close() after an episode of {where}", session.close, key="tools-close"
        )

    def _made(self) -> str:
        state = self.toolbox.state
        return f"{state.__name__}(problem)" if state is not None else "the tool functions"

    def answer(
        self, session: Session, calls: Sequence[Call], made: int, what: str
    ) -> list[ToolCall] | None:
        """A turn's calls answered as a run answers them; None if one failed a check (it
        raised past the session, or ran past its time limit)."""
        answered = []
        for call, refusal in zip(calls, self.toolbox.refusals(calls, made), strict=True):
            if refusal is not None:
                answered.append(
                    ToolCall(call.name, dict(call.arguments), f"Error: {refusal}", True)
                )
                continue
            got = within(partial(session.run, call), self.toolbox.seconds)
            named = f"{call.name}({_arguments(call)})"
            if got.error is not None:
                self.c.expect(
                    False,
                    f"the tool call {named} in {what} raised {type(got.error).__name__}: "
                    f"{describe(got.error, 80)}",
                    key="tool-raised",
                )
                return None
            if got.call is None:
                self.c.expect(
                    False,
                    f"the tool call {named} in {what} did not return within the tools' "
                    f"{self.toolbox.seconds:g} s (call_seconds): a tool must return, or raise, "
                    "within its time limit, whatever its arguments",
                    key="tool-late",
                )
                return None
            self.c.expect(
                "neither text nor JSON" not in got.call.result,
                f"the tool call {named} in {what} was answered {shown(got.call.result, 80)}: a "
                "tool returns text (a str) or a JSON value",
                key="tool-result",
            )
            answered.append(got.call)
        return answered

    def reply_tokens(self, after_T: Sequence[int], answered: Sequence[ToolCall], what: str) -> int:
        """How many tokens the results take in the chat template after the model's turn."""
        ok, tokens = self.c.call(
            f"the chat template on the tool results of {what}",
            lambda: message_tokens(
                self.tokenizer, self.task, after_T, self.toolbox.messages(answered)
            ),
            key="tools-render",
        )
        return len(tokens) if ok else 0

    # -- the checks of the tools themselves ------------------------------------------

    def schemas(self) -> None:
        """Every schema reads back the same as JSON, describes the tool and each parameter,
        and renders in the chat template of the tokenizer in use."""
        for tool in self.toolbox.tools.values():
            function = tool.schema["function"]
            self.c.expect(
                json.loads(json.dumps(tool.schema)) == tool.schema,
                f"tool {tool.name}'s schema is not JSON: {shown(tool.schema, 80)}",
            )
            self.c.expect(
                bool(function["description"]),
                f"tool {tool.name} has no description: write what it does in its docstring, "
                "before its 'Args:'",
            )
            for name, schema in function["parameters"]["properties"].items():
                self.c.expect(
                    bool(schema.get("description")),
                    f"tool {tool.name}'s parameter {name} has an empty description under 'Args:'",
                )
        options = self.task.chat_template_options
        self.c.call(
            "the chat template, given the tools",
            lambda: self.tokenizer.render_chat([{"role": "user", "content": "?"}], options),
        )

    def probe(self, problem: Any, where: str) -> None:
        """Malformed calls, each answered with an error; and each tool, called with hostile
        arguments of its types, answered with text or JSON within its time limit."""
        session = self.open(problem, where)
        if session is None:
            return
        try:
            for label, call in malformed(self.toolbox):
                text = self.toolbox.format.write([(call.name, call.arguments)])
                what = f"a turn of {label} on {where}"
                parsed = self.toolbox.parse(text)
                answered = self.answer(session, parsed, 0, what) if parsed else []
                if answered is None:
                    continue
                self.c.expect(
                    bool(answered)
                    and all(a.failed and a.result.startswith("Error: ") for a in answered),
                    f"{what} ({shown(text, 60)}) was answered "
                    f"{shown([a.result for a in answered], 80)}, not with an error",
                    key=f"malformed-{label}",
                )
                if answered:
                    self.reply_tokens([], answered, what)
            for label, call in hostile(self.toolbox):
                self.answer(session, [call], 0, f"a call of {label} on {where}")
        finally:
            self.close(session, where)


def answer_turn(task: Task[Any], problem: Any, first: str) -> str:
    """The reference episode's answer: for a task with tools, its first turn that calls none
    (the reference's later turns, `reference_turn`, until one does); else `first`."""
    toolbox, text = task.toolbox, first
    history: list[Response] = []
    while toolbox is not None and toolbox.parse(text) and len(history) + 1 < task.max_turns:
        history.append(Response(text, "end_of_turn", None, len(history) + 1))
        text = task.reference_turn(problem, tuple(history))
    return text


def malformed(toolbox: Toolbox) -> list[tuple[str, Call]]:
    """Calls a model may write that no tool can take: each must be answered with an error."""
    tool = next(iter(toolbox.tools.values()))
    calls = [
        ("a tool that does not exist", Call("no_such_tool", {})),
        (
            "an argument the tool does not take",
            Call(tool.name, {**sample(tool), "no_such_argument": 1}),
        ),
    ]
    if tool.required:
        given = sample(tool)
        del given[tool.required[0]]
        calls.append(("a missing argument", Call(tool.name, given)))
    if tool.parameters:
        name = next(iter(tool.parameters))
        calls.append(
            ("an argument of the wrong type", Call(tool.name, {**sample(tool), name: [[]]}))
        )
    return calls


def hostile(toolbox: Toolbox) -> list[tuple[str, Call]]:
    """Each tool, called with each hostile value of its parameters' types in turn."""
    calls = []
    for tool in toolbox.tools.values():
        for name, hint in tool.parameters.items():
            for value in HOSTILE.get(_base(hint), ()):
                label = f"{tool.name} with {name}={shown(value, 30)}"
                calls.append((label, Call(tool.name, {**sample(tool), name: value})))
    return calls


def sample(tool: Tool) -> dict[str, Any]:
    """Arguments that fit `tool`: a plain value of each required parameter's type."""
    return {name: _plain(tool.parameters[name]) for name in tool.required}


def _base(hint: Any) -> Any:
    """A parameter's type as `HOSTILE` and `_plain` know it: less `| None` (a union's first
    type), a list's or dict's as `list` or `dict`; a Literal as itself."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _base(next(a for a in args if a is not type(None)))
    return origin if origin in (list, dict) else hint


def _plain(hint: Any) -> Any:
    """A value of type `hint` that any tool taking it should take: `"1"`, 1, a Literal's first."""
    base = _base(hint)
    if get_origin(base) is Literal:
        return get_args(base)[0]
    return {str: "1", int: 1, float: 1.0, bool: True, list: [], dict: {}}[base]


def _arguments(call: Call) -> str:
    return ", ".join(f"{k}={shown(v, 30)}" for k, v in call.arguments.items())
