"""Tools: schemas from signatures and docstrings, calls read in a model's format, a session."""

from __future__ import annotations

import importlib
import json
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import pytest
from hypothesis import given

import strategies as st_
from doubles.chatml import byte_level_chatml
from mathrl.adapter import AdapterError, Unavailable
from mathrl.resolved import as_task
from mathrl.service.hf_tokenizer import HFTokenizer
from mathrl.tools import (
    FORMATS,
    Call,
    Hermes,
    Llama3Json,
    ToolError,
    ToolFailed,
    checked_arguments,
    describe,
    toolbox_of,
)
from mathrl_fakes import ByteTokenizer

HERMES, LLAMA = Hermes(), Llama3Json()


def _hf_schema(function: Callable[..., Any]) -> dict[str, Any]:
    """transformers' own schema of `function` (what `apply_chat_template(tools=[f])` uses),
    without the return value it adds, which a model never writes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its import notes that PyTorch is not installed
        utils = importlib.import_module("transformers.utils")
    schema: dict[str, Any] = utils.get_json_schema(function)
    schema["function"].pop("return", None)
    return schema


@given(st_.tool_functions())
def test_a_tools_schema_is_the_one_transformers_derives(function: Callable[..., Any]) -> None:
    assert describe(function).schema == _hf_schema(function)


def add(a: int, b: float = 1.0, mode: Literal["sum", "max"] = "sum") -> float:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second,
            a float.
        mode: how to add.

    Returns:
        The sum.
    """
    return a + b if mode == "sum" else max(a, b)


def test_a_worked_schema() -> None:
    tool = describe(add)
    assert tool.schema == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "the first number."},
                    "b": {"type": "number", "description": "the second, a float."},
                    "mode": {
                        "type": "string",
                        "enum": ["sum", "max"],
                        "description": "how to add.",
                    },
                },
                "required": ["a"],
            },
        },
    }
    assert tool.required == ("a",)
    assert tool.function is add


def no_doc(x: int) -> int:
    return x


def untyped(x):  # type: ignore[no-untyped-def]  # what is refused
    """Echo.

    Args:
        x: anything.
    """
    return x


def undocumented(x: int, y: int) -> int:
    """Add.

    Args:
        x: one.
    """
    return x + y


def starred(*xs: int) -> int:
    """Sum.

    Args:
        xs: numbers.
    """
    return sum(xs)


def positional(x: int, /) -> int:
    """Echo.

    Args:
        x: a number.
    """
    return x


def tupled(x: tuple[int, int]) -> int:
    """Sum.

    Args:
        x: a pair.
    """
    return sum(x)


def int_keys(x: dict[int, str]) -> int:
    """Count.

    Args:
        x: a map.
    """
    return len(x)


async def later(x: int) -> int:
    """Echo.

    Args:
        x: a number.
    """
    return x


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (no_doc, "tool no_doc has no docstring: its first lines describe the tool to the model"),
        (untyped, "tool untyped's parameter x has no type hint"),
        (undocumented, "tool undocumented's parameter y has no line under 'Args:'"),
        (starred, "tool starred's parameter xs is variadic positional: a model gives arguments"),
        (positional, "tool positional's parameter x is positional-only"),
        (tupled, "tool tupled's parameter x is tuple[int, int]: a tool's parameters are str, int"),
        (int_keys, "tool int_keys's parameter x: a dict's keys must be str"),
        (later, "tool later is async: a tool is a plain function"),
        (lambda x: x, "tool <lambda>: a tool's name must be a Python identifier"),
    ],
)  # fmt: skip
def test_a_tool_whose_schema_cannot_be_derived_is_refused_in_one_line(
    function: Callable[..., Any], message: str
) -> None:
    with pytest.raises(ToolError) as refused:
        describe(function)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_arguments_are_checked_against_the_signature() -> None:
    tool = describe(add)
    assert checked_arguments(tool, {"a": 2, "b": 3}) == {"a": 2, "b": 3.0}
    assert checked_arguments(tool, {"a": 2.0}) == {"a": 2}  # JSON's 2.0 is 2
    assert checked_arguments(tool, {"a": 1, "c": 2}) == (
        "add has no parameter 'c' (its parameters: a, b, mode)"
    )
    assert checked_arguments(tool, {"b": 2}) == "add needs the argument 'a'"
    assert checked_arguments(tool, {"a": "2"}) == "add's argument 'a' must be an integer (got '2')"
    assert (
        checked_arguments(tool, {"a": True}) == "add's argument 'a' must be an integer (got True)"
    )
    assert checked_arguments(tool, {"a": 2.5}) == "add's argument 'a' must be an integer (got 2.5)"
    assert checked_arguments(tool, {"a": 1, "mode": "min"}) == (
        "add's argument 'mode' must be one of 'sum', 'max' (got 'min')"
    )


def nested(xs: list[int] | None, table: dict[str, list[str]], either: int | str = 0) -> str:
    """Nested.

    Args:
        xs: numbers, or none.
        table: lists of words.
        either: a number or a word.
    """
    return ""


def test_nested_arguments_are_checked_all_the_way_down() -> None:
    tool = describe(nested)
    assert checked_arguments(tool, {"xs": None, "table": {"k": ["a"]}, "either": "w"}) == {
        "xs": None, "table": {"k": ["a"]}, "either": "w"
    }  # fmt: skip
    assert checked_arguments(tool, {"xs": [1.0], "table": {}}) == {"xs": [1], "table": {}}
    assert "must be a list or null" in str(checked_arguments(tool, {"xs": "1", "table": {}}))
    wrong = checked_arguments(tool, {"xs": [], "table": {"k": [1]}})
    assert wrong == "nested's argument 'table' must be an object (got {'k': [1]})"
    assert "must be an integer or a string" in str(
        checked_arguments(tool, {"xs": [], "table": {}, "either": None})
    )


@given(st_.written_calls)
def test_hermes_and_llama_calls_read_back_as_written(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    for form in (HERMES, LLAMA):
        assert form.parse(form.write(calls)) == [Call(n, a) for n, a in calls]


@given(st_.any_text)
def test_reading_calls_never_raises(text: str) -> None:
    for form in FORMATS.values():
        for call in form.parse(text):
            assert call.error is None or (call.error and "\n" not in call.error)


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("The answer is 4.", []),
        ('Let me compute.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}'
         "\n</tool_call>", [Call("python", {"code": "print(1)"})]),
        ('<tool_call>{"name": "x"}</tool_call>', [Call("x", {})]),  # no arguments: none
        ("<tool_call>{bad</tool_call>", [Call("", error="the call is not JSON (Expecting "
                                              "property name enclosed in double quotes: line 1 "
                                              "column 2 (char 1))")]),
        ('<tool_call>["x"]</tool_call>', [Call("", error='a call must be a JSON object, {"name": '
                                                     '..., "arguments": {...}}')]),
        ('<tool_call>{"name": 3}</tool_call>', [Call("", error='the call has no "name" that is a '
                                                            "string")]),
        ('<tool_call>{"name": "x", "arguments": "{}"}</tool_call>',
         [Call("x", error='the call\'s "arguments" must be a JSON object')]),
        ('<tool_call>{"name": "x"', [Call("", error="the call has no closing </tool_call>")]),
        ('<tool_call>{"name": "x", "arguments": {"n": 1' + "0" * 5000 + "}}</tool_call>",
         [Call("", error="the call is not JSON (Exceeds the limit (4300 digits) for integer "
                         "string conversion: value has 5001 digits; use sys.set_in... (140 "
                         "characters))")]),
        ('<think>maybe <tool_call>{"name": "x"}</tool_call>?</think>no call', []),
        ('<think>cut off <tool_call>{"name": "x"}</tool_call>', []),
    ],
)  # fmt: skip
def test_hermes_reads_each_call_or_says_why_it_cannot(text: str, calls: list[Call]) -> None:
    assert HERMES.parse(text) == calls


def test_llama3_json_reads_the_whole_turn_as_calls() -> None:
    assert LLAMA.parse("It is 4.") == []
    assert LLAMA.parse('<|python_tag|>{"name": "f", "parameters": {"x": 1}}') == [
        Call("f", {"x": 1})
    ]
    assert LLAMA.parse('{"name": "f"} {"name": "g"}') == [
        Call("f", {}), Call("", error="calls must be separated by ';' and nothing else")
    ]  # fmt: skip
    assert LLAMA.parse('{"name": "f"; ') == [
        Call("", error="the call is not JSON (Expecting ',' delimiter: line 1 column 13 (char 12))")
    ]
    assert (HERMES.role, LLAMA.role) == ("tool", "ipython")


# -- a task's tools, resolved ----------------------------------------------------------


class Counting:
    """Per-episode tools: a counter the episode's calls share."""

    made: list[Counting] = []  # noqa: RUF012  (what the test reads)

    def __init__(self, problem: int) -> None:
        self.problem, self.count, self.closed = problem, 0, False
        Counting.made.append(self)

    def tick(self) -> int:
        """Count one more call of this episode."""
        self.count += 1
        return self.count

    def secret(self, guess: int) -> str:
        """Say whether the guess is the problem.

        Args:
            guess: a number.
        """
        if guess < 0:
            raise ToolFailed("guesses are never negative")
        if guess > 100:
            raise ValueError("far too big")
        return "yes" if guess == self.problem else "no"

    def close(self) -> None:
        self.closed = True

    def _helper(self) -> None:  # not a tool: private
        return None


class Task:
    tools: Any = (add,)


def resolved(**members: Any) -> Any:
    task = Task()
    for name, value in members.items():
        setattr(task, name, value)
    return toolbox_of(task, "T")


def test_a_session_answers_each_call_and_never_raises_for_what_the_model_wrote() -> None:
    toolbox = resolved(tools=Counting)
    assert list(toolbox.tools) == ["tick", "secret"]  # in the class's order
    session = toolbox.open(7)
    answers = [
        session.run(call)
        for call in [
            Call("tick"), Call("tick"), Call("secret", {"guess": 7}), Call("secret", {"guess": -1}),
            Call("secret", {"guess": 101}), Call("secret", {}), Call("nope"),
            Call("", error="the call is not JSON (...)"),
        ]
    ]  # fmt: skip
    assert [(a.result, a.failed) for a in answers] == [
        ("1", False), ("2", False), ("yes", False),
        ("Error: guesses are never negative", True),
        ("Error: ValueError: far too big", True),
        ("Error: secret needs the argument 'guess'", True),
        ("Error: there is no tool 'nope' (the tools: tick, secret)", True),
        ("Error: the call is not JSON (...)", True),
    ]  # fmt: skip
    other = toolbox.open(3)  # another episode: its own object, from its problem
    assert other.run(Call("tick")).result == "1"
    assert other.state is not session.state
    assert Counting.made[-1].problem == 3
    session.close()
    assert session.state.closed
    assert not other.state.closed


def test_a_result_is_text_or_json_and_unavailable_passes_through() -> None:
    def give(what: str) -> Any:
        """Give something back.

        Args:
            what: which.
        """
        if what == "missing":
            raise Unavailable("no sandbox here")
        return {"text": "hi", "none": None, "list": [1, 2.5], "inf": float("inf"),
                "object": object()}[what]  # fmt: skip

    session = resolved(tools=[give]).open(0)
    results = [
        session.run(Call("give", {"what": w})).result for w in ("text", "none", "list", "inf")
    ]
    assert results == ["hi", "", "[1, 2.5]", "Infinity"]
    odd = session.run(Call("give", {"what": "object"}))
    assert odd.failed
    assert odd.result.startswith("Error: give returned <object object at")
    with pytest.raises(Unavailable):
        session.run(Call("give", {"what": "missing"}))


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"tools": "add"}, "T.tools must be a list of functions, or a class whose methods"),
        ({"tools": []}, "T.tools must be a list of functions"),
        ({"tools": type("Empty", (), {"_x": lambda self: 0})}, "T.tools is the class Empty, "
         "which has no public method"),
        ({"tools": (add, add)}, "T.tools has two tools named add"),
        ({"tool_format": "xml"}, "T.tool_format must be one of hermes, llama3-json, or a format"),
        ({"tool_format": 3}, "T.tool_format must name a format (hermes, llama3-json) or be one"),
        ({"calls_per_turn": 0}, "T.calls_per_turn must be an integer from 1 to 100 (got 0)"),
        ({"calls_per_episode": True}, "T.calls_per_episode must be an integer from 1 to 100"),
        ({"call_seconds": float("nan")}, "T.call_seconds must be a number of seconds above 0"),
    ],
)  # fmt: skip
def test_a_tasks_tools_are_refused_in_one_line(members: dict[str, Any], message: str) -> None:
    with pytest.raises(AdapterError, match=f"^{re.escape(message)}"):
        resolved(**members)


class NeedsTwo:
    def __init__(self, problem: int, other: int) -> None: ...

    def go(self) -> str:
        """Go."""
        return ""


def test_a_tools_class_is_made_with_the_problem_or_with_nothing() -> None:
    with pytest.raises(ToolError, match=r"NeedsTwo\(\) is made with the problem alone, or with"):
        resolved(tools=NeedsTwo)

    class Plain:
        def go(self) -> str:
            """Go."""
            return "went"

    session = resolved(tools=Plain).open(9)
    assert session.run(Call("go")).result == "went"


class Custom:
    """A format of one's own: `CALL name` on a line."""

    name, role = "custom", "tool"

    def parse(self, text: str) -> list[Call]:
        return [Call(line[5:]) for line in text.splitlines() if line.startswith("CALL ")]

    def write(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "\n".join(f"CALL {name}" for name, _ in calls)


def test_a_task_may_bring_its_own_format() -> None:
    toolbox = resolved(tool_format=Custom())
    assert toolbox.parse("CALL add") == [Call("add")]


class Chatty:
    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        return [1] * size

    def make_prompt(self, problem: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": "?"}]

    def compute_reward(self, completion: str, problem: int) -> float:
        return 0.0

    def reference_completion(self, problem: int) -> str:
        return ""

    def evaluate(self, rewards: Sequence[float]) -> float:
        return 0.0


def test_a_task_with_tools_plays_episodes_and_shows_them_to_the_template() -> None:
    chatty = Chatty()
    chatty.tools = [add]  # type: ignore[attr-defined]
    task = as_task(chatty)
    assert task.plays_episodes
    assert task.max_turns == 4
    assert task.chat_template_options["tools"] == [describe(add).schema]
    # The fake's template: the tools first, as their JSON, as a template's system prompt.
    tokens = ByteTokenizer().render_chat(chatty.make_prompt(1), task.chat_template_options)
    schemas = json.dumps([describe(add).schema])
    assert ByteTokenizer().decode(tokens) == f"tools\n{schemas}user\n?assistant\n"
    chatty.chat_template_options = {"tools": []}  # type: ignore[attr-defined]
    with pytest.raises(AdapterError, match="chat_template_options must not set tools"):
        as_task(chatty)
    del chatty.tools  # type: ignore[attr-defined]
    chatty.chat_template_options = {}  # type: ignore[attr-defined]
    chatty.max_turns = 2  # type: ignore[attr-defined]
    with pytest.raises(AdapterError, match="has no feedback method nor tools"):
        as_task(chatty)


# -- Qwen3's template, written here: no download ----------------------------------------

QWEN3_TOOLS = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name "
    'and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message.content }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- if (loop.first and message.content) or not loop.first %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' }}'
    "{{- call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Like Qwen3's template where tools are concerned (written for this test): the tools' JSON
in the system prompt, an assistant's calls as Hermes `<tool_call>` blocks, and the results
of one turn's calls in one user turn of `<tool_response>` blocks."""


@pytest.fixture(scope="module")
def qwen3() -> Any:
    """A byte-level tokenizer with ChatML's special tokens and `QWEN3_TOOLS`: no hub, no files."""
    return byte_level_chatml(QWEN3_TOOLS)


def test_hermes_calls_round_trip_through_a_qwen3_template(qwen3: Any) -> None:
    tokenizer = HFTokenizer(qwen3)
    schema = describe(add).schema
    user = {"role": "user", "content": "What is 2 + 3?"}
    options = {"tools": [schema]}
    prompt_T = tokenizer.render_chat([user], options)
    # The tools are in the system prompt, as the template writes them.
    assert f"<tools>\n{json.dumps(schema, ensure_ascii=False)}\n</tools>" in qwen3.decode(prompt_T)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("add", {"a": 2, "b": 3}),
        ("add", {"a": 1, "mode": "max"}),
    ]
    # What the model writes for its calls (Hermes.write) is what the template writes for an
    # assistant's tool_calls, and it reads back as those calls.
    written = HERMES.write(calls)
    called: Any = {
        "role": "assistant", "content": "",
        "tool_calls": [{"name": n, "arguments": a} for n, a in calls],
    }  # fmt: skip
    whole = [user, called]
    rendered = qwen3.decode(tokenizer._chat(whole, **options))
    assert rendered.endswith(f"<|im_start|>assistant\n{written}<|im_end|>\n")
    assert HERMES.parse(written) == [Call(n, a) for n, a in calls]
    # The turn as sampled (its text, then end-of-turn), then the results as tool messages:
    # the template's own rendering of the whole conversation, one user turn of responses.
    sampled_T = [*qwen3.encode(written), tokenizer.end_of_turn_id]
    results = [{"role": "tool", "content": "5.0"}, {"role": "tool", "content": "2"}]
    reply_T = tokenizer.render_reply(results, options)
    assert qwen3.decode(reply_T) == (
        "\n<|im_start|>user\n<tool_response>\n5.0\n</tool_response>\n<tool_response>\n2\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompt_T + sampled_T + reply_T == tokenizer._chat(
        [*whole, *results], add_generation_prompt=True, **options
    )


def unreadable(x: NoSuchType) -> int:  # type: ignore[name-defined]  # noqa: F821  (the point)
    """Echo.

    Args:
        x: a number.
    """
    return 0


def flags(on: bool, table: dict, pairs: list[int] | dict[str, int]) -> str:  # type: ignore[type-arg]
    """Flags.

    Args:
        on: whether.
        table: anything keyed.
        pairs: numbers, listed or named.
    """
    return ""


def test_what_cannot_be_read_is_refused_and_every_type_is_checked() -> None:
    with pytest.raises(ToolError, match=r"^tool unreadable: its type hints cannot be read"):
        describe(unreadable)
    tool = describe(flags)
    assert tool.schema["function"]["parameters"]["properties"]["pairs"]["anyOf"] == [
        {"type": "array", "items": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "integer"}},
    ]
    fine = {"on": False, "table": {"k": [1]}, "pairs": {"a": 1}}
    assert checked_arguments(tool, fine) == fine
    assert checked_arguments(tool, {**fine, "on": 1}) == (
        "flags's argument 'on' must be true or false (got 1)"
    )
    assert checked_arguments(tool, {**fine, "table": []}) == (
        "flags's argument 'table' must be an object (got [])"
    )
    assert checked_arguments(tool, {**fine, "pairs": "x"}) == (
        "flags's argument 'pairs' must be a value of one of its types (got 'x')"
    )
