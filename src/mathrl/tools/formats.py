"""How a model writes tool calls, read back from its text; and how a reference writes them.

For: `mathrl.tools.toolbox`, which reads each of the model's turns with the task's format,
and a task's reference turns, which write calls as the model should. Pure. Not for: the
tools themselves, or how their results are rendered (the chat template does that, from
messages of the format's `role`).

A format (`ToolFormat`) reads every call a turn wrote (`parse`), in order, each one as a
`Call`: its tool's name and arguments, or, for a call it cannot read, why (`error`), which
the model is told; and writes calls as the model should (`write`), so that
`parse(write(calls))` gives them back. It names the role of the messages that carry the
results (`role`). The formats (`FORMATS`):

- `hermes` (Qwen2.5, Qwen3, Hermes, and the default): each call is
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` anywhere in the turn,
  outside a `<think>` block; results go back as `tool` messages, which Qwen3's template
  wraps in `<tool_response>`.
- `llama3-json` (Llama 3.1 to 3.3): the whole turn is the call, `{"name": ...,
  "parameters": {...}}` (or several, separated by `;`), after an optional `<|python_tag|>`;
  results go back as `ipython` messages.

Another format is a class with `name`, `role`, `parse` and `write`: give an instance as a
task's `tool_format`, or add it to `FORMATS` to name it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mathrl.text import one_line


@dataclass(frozen=True, slots=True)
class Call:
    """One call a turn wrote, as its format read it."""

    name: str
    """The tool's name as written ("" when it could not be read)."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    """Why the call could not be read (its JSON, its name or its arguments), or None."""


class ToolFormat(Protocol):
    """A model's way of writing tool calls (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str:
        """The role of the messages that carry the calls' results."""
        ...

    def parse(self, text: str) -> list[Call]:
        """Every call `text` writes, in order (none: the turn calls no tool). Never raises."""
        ...

    def write(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """`calls` ((name, arguments) each) as the model writes them in a turn."""
        ...


def read_call(body: str, arguments_key: str) -> Call:
    """A call written as a JSON object with a `name` and its arguments under `arguments_key`
    (missing: none); one that is not is a `Call` with an `error` saying why."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an int past 4300 digits
        return Call("", error=f"the call is not JSON ({one_line(str(exc), 100)})")
    return call_of(value, arguments_key)


def call_of(value: object, arguments_key: str) -> Call:
    """A call from its JSON value (see `read_call`)."""
    if not isinstance(value, dict):
        return Call(
            "", error=f'a call must be a JSON object, {{"name": ..., "{arguments_key}": {{...}}}}'
        )
    name = value.get("name")
    if not isinstance(name, str):
        return Call("", error='the call has no "name" that is a string')
    arguments = value.get(arguments_key, {})
    if not isinstance(arguments, dict):
        return Call(name, error=f'the call\'s "{arguments_key}" must be a JSON object')
    return Call(name, arguments)


class Hermes:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, as Qwen3 writes calls."""

    name = "hermes"
    role = "tool"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    _THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)

    def parse(self, text: str) -> list[Call]:
        text = self._THINKING.sub("", text)
        if "<think>" in text:  # a thought cut off: what follows it is thought too
            text = text.split("<think>", 1)[0]
        calls = []
        rest = text
        while (start := rest.find(self.OPEN)) >= 0:
            rest = rest[start + len(self.OPEN) :]
            end = rest.find(self.CLOSE)
            if end < 0:
                calls.append(Call("", error=f"the call has no closing {self.CLOSE}"))
                break
            calls.append(read_call(rest[:end].strip(), "arguments"))
            rest = rest[end + len(self.CLOSE) :]
        return calls

    def write(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "\n".join(
            f"{self.OPEN}\n{json.dumps({'name': n, 'arguments': dict(a)}, ensure_ascii=False)}\n"
            f"{self.CLOSE}"
            for n, a in calls
        )


class Llama3Json:
    """The whole turn is `{"name": ..., "parameters": {...}}` (`;` between several)."""

    name = "llama3-json"
    role = "ipython"
    TAG = "<|python_tag|>"

    def parse(self, text: str) -> list[Call]:
        rest = text.strip().removeprefix(self.TAG).lstrip()
        if not rest.startswith("{"):
            return []
        calls: list[Call] = []
        decoder = json.JSONDecoder()
        while rest:
            try:
                value, end = decoder.raw_decode(rest)
            except (ValueError, RecursionError):
                return [*calls, read_call(rest, "parameters")]  # its error says what is wrong
            calls.append(call_of(value, "parameters"))
            rest = rest[end:].strip()
            if rest.startswith(";"):
                rest = rest[1:].strip()
            elif rest:
                return [*calls, Call("", error="calls must be separated by ';' and nothing else")]
        return calls

    def write(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "; ".join(
            json.dumps({"name": n, "parameters": dict(a)}, ensure_ascii=False) for n, a in calls
        )


FORMATS: dict[str, ToolFormat] = {"hermes": Hermes(), "llama3-json": Llama3Json()}
"""Each format by the name a task's `tool_format` gives it."""
