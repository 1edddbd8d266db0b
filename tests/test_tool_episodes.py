"""Episodes of a task with tools: calls answered, errors as replies, caps, state, masking,
and what check_adapter says of a task's tools."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import pytest

from conftest import checks_passed
from mathrl.adapter import Feedback, Message, Response, Unavailable
from mathrl.backend import Completion, SampleParams
from mathrl.episodes import Episode, Player
from mathrl.grpo import episode_datum
from mathrl.resolved import Task, as_task
from mathrl.rewards import TaskError
from mathrl.testing import check_adapter
from mathrl.tools import FORMATS, ToolCall
from mathrl.workers import Workers
from mathrl_fakes import ByteTokenizer

TOK = ByteTokenizer()
EOS = TOK.eos_token_id
HERMES = FORMATS["hermes"]
CHAT = SampleParams(max_tokens=200, temperature=1.0, stop=(), seed=3, end_of_turn=True)


def call(name: str, **arguments: Any) -> str:
    return HERMES.write([(name, arguments)])


def double(n: int) -> int:
    """Double a number.

    Args:
        n: the number.
    """
    return 2 * n


def slow(seconds: float) -> str:
    """Wait a while.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "awake"


def boom() -> str:
    """Fail."""
    raise RuntimeError("boom")


class Doubling:
    """Answer twice the problem; a `double` tool tells it."""

    name = "doubling"
    max_tokens = 200
    episode_tokens = 4000
    tools: Any = (double, slow, boom)
    call_seconds = 0.5
    calls_per_turn = 2
    calls_per_episode = 3

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"doubling/{seed}/{step}")
        return [rng.randint(0, 99) for _ in range(size)]

    def heldout_dataset(self, seed: int, size: int) -> list[int]:
        return [100 + (i % 50) for i in range(size)]

    def make_prompt(self, problem: int) -> list[Message]:
        return [{"role": "user", "content": f"What is twice {problem}?"}]

    def compute_reward(self, completion: Response, problem: int) -> float:
        cut = completion.ended == "length"
        return 1.0 if not cut and completion.strip() == str(2 * problem) else 0.0

    def reference_completion(self, problem: int) -> str:
        return call("double", n=problem)

    def reference_turn(self, problem: int, responses: Sequence[Response]) -> str:
        return str(2 * problem)

    def wrong_completions(self, problem: int) -> list[str]:
        return [str(2 * problem + 1)]

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


class Scripted:
    """Writes `script[k]` for request k (each ended with the end-of-turn token), one sample."""

    def __init__(self, *script: str) -> None:
        self.script, self.requests = list(script), list[list[int]]()

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        text = self.script[len(self.requests)]
        self.requests.append(list(prompt_T))
        tokens = [*TOK.encode(text), EOS][: params.max_tokens]
        return [Completion(tuple(tokens), tuple(-0.5 for _ in tokens))] * num_samples

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        return [-0.5] * (len(tokens_T) - 1)


def play(
    adapter: Any,
    problem: int,
    *script: str,
    size: int = 1,
    workers: Workers | None = None,
    sampling: type[Scripted] = Scripted,
    tokenizer: ByteTokenizer = TOK,
) -> tuple[list[Episode], Scripted, Task[Any]]:
    """One group of `adapter`'s `problem`, sampled by `sampling(*script)`."""
    task = as_task(adapter)
    prompt = adapter.make_prompt(problem)
    prompt_T = tokenizer.render_chat(prompt, task.chat_template_options)
    sampler = sampling(*script)

    async def go() -> list[Episode]:
        player = Player(tokenizer, sampler, task, workers or Workers(size=0))
        return await player.group(problem, prompt, prompt_T, size, CHAT)

    return asyncio.run(go()), sampler, task


def test_a_call_is_answered_as_a_tool_message_and_the_model_answers_after() -> None:
    (episode,), sampler, task = play(Doubling(), 5, call("double", n=5), "10")
    assert [str(t.response) for t in episode.turns] == [call("double", n=5), "10"]
    assert episode.turns[0].calls == (ToolCall("double", {"n": 5}, "10", False),)
    assert episode.turns[0].reply == "10"
    assert (episode.reward, episode.metrics) == (1.0, {"tool_calls": 1, "failed_tool_calls": 0})
    # The next prompt: the turn as sampled, then the chat template's tool message.
    message = {"role": "tool", "content": "10", "name": "double"}
    reply_T = TOK.render_reply(message, task.chat_template_options)
    assert reply_T == [*TOK.encode("tool\n10"), EOS, *TOK.encode("assistant\n")]
    assert (
        sampler.requests[1]
        == sampler.requests[0] + list(episode.turns[0].completion.tokens) + reply_T
    )


def test_the_tool_messages_carry_no_gradient() -> None:
    (episode,), sampler, _ = play(Doubling(), 5, call("double", n=5), "10")
    prompt_T = sampler.requests[0]
    datum = episode.datum(prompt_T, 1.0)
    assert datum is not None
    first, reply = list(episode.turns[0].completion.tokens), list(episode.turns[0].reply_T)
    second = list(episode.turns[1].completion.tokens)
    assert datum == episode_datum(prompt_T, [first, second], [[-0.5] * len(first),
                                  [-0.5] * len(second)], [reply], 1.0)  # fmt: skip
    # Position i predicts token i + 1: the prompt's and the reply's are off the mask.
    mask = [False] * (len(prompt_T) - 1) + [True] * len(first) + [False] * len(reply)
    assert list(datum.mask) == mask + [True] * len(second)
    assert [a for a, m in zip(datum.advantages, datum.mask, strict=True) if not m] == [0.0] * (
        len(mask) - len(first)
    )


@pytest.mark.parametrize(
    ("turn", "answer"),
    [
        ("<tool_call>{\"name\": \"double\", \"arguments\": {\"n\": 5}</tool_call>",
         "Error: the call is not JSON (Expecting ',' delimiter: line 1 column 41 (char 40))"),
        (call("triple", n=5), "Error: there is no tool 'triple' (the tools: double, slow, boom)"),
        (call("double", m=5), "Error: double has no parameter 'm' (its parameters: n)"),
        (call("double"), "Error: double needs the argument 'n'"),
        (call("double", n="five"), "Error: double's argument 'n' must be an integer (got 'five')"),
        (call("boom"), "Error: RuntimeError: boom"),
        (call("slow", seconds=5), "Error: slow did not return within 0.5 s"),
        (call("slow", seconds=0.8), "Error: slow did not return within 0.5 s"),  # a call's 0.5
    ],
)  # fmt: skip
def test_nothing_a_model_writes_crashes_an_episode(turn: str, answer: str) -> None:
    workers = Workers(size=2, timeout=60)  # real threads: the late call is given up
    with workers:
        (episode,), _, _ = play(Doubling(), 5, turn, "10", workers=workers)
    (answered,) = episode.turns[0].calls
    assert (answered.result, answered.failed) == (answer, True)
    assert episode.turns[0].reply == answer  # the model reads it, and goes on
    assert (str(episode.final), episode.reward) == ("10", 1.0)
    assert episode.metrics == {"tool_calls": 1, "failed_tool_calls": 1}


def test_calls_past_a_cap_are_refused_and_the_last_turns_never_run() -> None:
    # A turn of three calls (2 a turn), another of two (3 an episode), and a last turn of one.
    adapter = Doubling()
    adapter.max_turns = 3  # type: ignore[attr-defined]  # declared on this instance only
    three = HERMES.write([("double", {"n": 1}), ("double", {"n": 2}), ("double", {"n": 3})])
    two = HERMES.write([("double", {"n": 4}), ("double", {"n": 5})])
    (episode,), sampler, task = play(adapter, 5, three, two, call("double", n=6))
    results = [[c.result for c in t.calls] for t in episode.turns]
    assert results == [
        ["2", "4", "Error: not run: at most 2 tool calls a turn"],
        ["8", "Error: not run: at most 3 tool calls an episode"],
        [],  # the last turn's call: its result would never be read
    ]
    assert len(sampler.requests) == 3
    assert episode.metrics == {"tool_calls": 5, "failed_tool_calls": 2}
    # A turn's reply, as records show it: its results, a line each; as the model reads it,
    # a tool message each, rendered together with the task's template options.
    assert episode.turns[0].reply == "2\n4\nError: not run: at most 2 tool calls a turn"
    messages = [
        {"role": "tool", "content": c.result, "name": c.name} for c in episode.turns[0].calls
    ]
    rendered = TOK.render_reply(messages, task.chat_template_options)
    cut = episode.turns[0].response.ended == "length"  # 200 tokens: its end-of-turn comes first
    assert list(episode.turns[0].reply_T) == [TOK.end_of_turn_id] * cut + rendered
    assert episode.reward == 0.0  # it never answered


def test_an_episode_without_calls_counts_none_and_a_reply_past_the_budget_keeps_its_calls() -> None:
    (episode,), _, _ = play(Doubling(), 5, "10")
    assert episode.metrics == {"tool_calls": 0, "failed_tool_calls": 0}
    # The call's result does not fit the episode's tokens: the episode ends, the call made.
    adapter = Doubling()
    adapter.episode_tokens = len(TOK.encode(call("double", n=5))) + 3
    (episode,), sampler, _ = play(adapter, 5, call("double", n=5), "10")
    assert len(sampler.requests) == 1
    assert episode.turns[-1].calls == (ToolCall("double", {"n": 5}, "10", False),)


def test_every_call_past_a_cap_is_answered_with_its_refusal() -> None:
    adapter = Doubling()
    adapter.calls_per_turn = 1
    three = HERMES.write([("double", {"n": 1}), ("double", {"n": 2}), ("double", {"n": 3})])
    (episode,), _, _ = play(adapter, 5, three, "10")
    refusal = "Error: not run: at most 1 tool call a turn"
    assert [c.result for c in episode.turns[0].calls] == ["2", refusal, refusal]


class Tally:
    """Per-episode tools: each episode counts its own calls, and is closed once."""

    made: list[Tally] = []  # noqa: RUF012  (what the test reads)

    def __init__(self, problem: int) -> None:
        self.count, self.closed, self.problem = 0, 0, problem
        Tally.made.append(self)

    def tally(self) -> int:
        """Count this call."""
        self.count += 1
        return self.count

    def close(self) -> None:
        self.closed += 1


class Tallying(Doubling):
    tools = Tally

    def reference_completion(self, problem: int) -> str:
        return call("tally")


def test_each_episode_has_its_own_tools_made_at_its_start_and_closed_at_its_end() -> None:
    Tally.made.clear()
    twice = HERMES.write([("tally", {}), ("tally", {})])
    episodes, _, _ = play(Tallying(), 5, twice, twice, twice, "10", "10", "10", size=3)
    assert len(Tally.made) == 3
    for episode in episodes:
        assert [c.result for c in episode.turns[0].calls] == ["1", "2"]  # its own count
    assert [t.closed for t in Tally.made] == [1, 1, 1]
    assert [t.problem for t in Tally.made] == [5, 5, 5]  # made for the episode's problem


def test_the_tools_close_when_an_episode_fails() -> None:
    Tally.made.clear()

    class Failing(Scripted):
        async def sample(self, prompt_T: Sequence[int], n: int, p: SampleParams) -> Any:
            if self.requests:
                raise RuntimeError("the service went away")
            return await super().sample(prompt_T, n, p)

    with pytest.raises(RuntimeError, match="the service went away"):
        play(Tallying(), 5, call("tally"), sampling=Failing)
    assert [t.closed for t in Tally.made] == [1]
    # Tools that fail to close then: the episode's own error is the one raised.
    with pytest.raises(RuntimeError, match="the service went away"):
        play(with_tools(Closing), 5, call("tally"), sampling=Failing)


def test_a_turn_without_calls_goes_to_the_tasks_feedback() -> None:
    class Hinted(Doubling):
        max_turns = 3

        def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
            right = responses[-1].strip() == str(2 * problem)
            return Feedback(None if right else "Try the tool.", {"tries": -0.1})

    (episode,), _, task = play(Hinted(), 5, "9", call("double", n=5), "10")
    assert [t.reply for t in episode.turns] == ["Try the tool.", "10", None]
    # The model reads the feedback as the user's message, the tool's result as the tool's.
    user = {"role": "user", "content": "Try the tool."}
    tool = {"role": "tool", "content": "10", "name": "double"}
    assert [list(t.reply_T) for t in episode.turns[:2]] == [
        TOK.render_reply(user, task.chat_template_options),
        TOK.render_reply(tool, task.chat_template_options),
    ]
    assert episode.reward == pytest.approx(1.0 - 0.2)  # two feedbacks; the tool turn had none


def test_a_tool_task_with_a_text_prompt_or_a_machine_without_its_tool_stops_the_run() -> None:
    class Text(Doubling):
        def make_prompt(self, problem: int) -> str:  # type: ignore[override]  # the mistake under test
            return f"Twice {problem}?"

    task = as_task(Text())

    async def go() -> Any:
        player = Player(TOK, Scripted("1"), task, Workers(size=0))
        return await player.group(5, "Twice 5?", TOK.encode("Twice 5?"), 1, replace(CHAT, stop=()))

    with pytest.raises(
        TaskError,
        match=r"^task 'doubling' failed: make_prompt broke the contract: a task with tools must "
        r"prompt with a conversation, whose chat template shows the model its tools "
        r"\(on 'Twice 5\?'\)$",
    ):
        asyncio.run(go())

    class Missing(Unavailable):
        allowed_by = "allow_missing_layers"

    def sandboxed() -> str:
        """Needs a sandbox this machine lacks."""
        raise Missing("sandbox: no Landlock here")

    lacking = Doubling()
    lacking.tools = (sandboxed,)
    with pytest.raises(TaskError) as stopped:
        play(lacking, 5, call("sandboxed"), "10")
    assert str(stopped.value).startswith(
        "task 'doubling' failed: tools raised Missing: sandbox: no Landlock here (on the "
        "model's turn 1: '<tool_call>"
    )
    assert stopped.value.allowed_by == "allow_missing_layers"


class Options(ByteTokenizer):
    """Keeps the options each reply was rendered with."""

    def __init__(self) -> None:
        super().__init__()
        self.options: list[Any] = []

    def render_reply(self, message: Any, options: Any) -> list[int]:
        self.options.append(options)
        return super().render_reply(message, options)


def test_a_tool_result_is_rendered_with_the_tasks_template_options() -> None:
    tokenizer = Options()
    _, _, task = play(Doubling(), 5, call("double", n=5), "10", tokenizer=tokenizer)
    assert tokenizer.options == [task.chat_template_options]  # the tools' schemas among them
    assert "tools" in task.chat_template_options


class NoToolRole(ByteTokenizer):
    def render_reply(self, message: Any, options: Any) -> list[int]:
        roles = [m["role"] for m in ([message] if isinstance(message, dict) else message)]
        if "tool" in roles:
            raise ValueError("this template has no 'tool' role")
        return super().render_reply(message, options)


def test_tools_that_cannot_open_or_a_result_the_template_refuses_is_named() -> None:
    with pytest.raises(TaskError) as unopened:
        play(with_tools(Unopened), 5, call("tally"), "10")
    assert str(unopened.value) == (
        "task 'doubling' failed: tools raised OSError: no tools today (on 5)"
    )
    with pytest.raises(TaskError) as closing:
        play(with_tools(Closing), 5, call("tally"), "10")
    assert str(closing.value) == "task 'doubling' failed: tools raised OSError: cannot close (on 5)"

    with pytest.raises(TaskError) as refused:
        play(Doubling(), 5, call("double", n=5), tokenizer=NoToolRole())
    assert str(refused.value).startswith(
        "task 'doubling' failed: tools raised ValueError: this template has no 'tool' role "
        "(on the model's turn 1: '<tool_call>"
    )


# -- check_adapter on a task's tools ----------------------------------------------------


def test_a_tool_task_passes_its_checks() -> None:
    assert checks_passed(Doubling()) > 100
    assert checks_passed(Tallying()) > 100


@pytest.mark.slow
def test_a_tool_task_learns_on_the_fake() -> None:
    assert checks_passed(Doubling(), learns=True) > 100


SEEN: list[int] = []


def remembering(n: int) -> int:
    """Double, remembering every number it was given.

    Args:
        n: the number.
    """
    SEEN.append(n)
    return 2 * n + len(SEEN)  # a module's state leaks into the next episode's answers


def odd(n: int) -> Any:
    """Return what is not text.

    Args:
        n: a number.
    """
    return object() if n < 0 else 2 * n


def stuck(n: int) -> int:
    """Double, but hang on zero.

    Args:
        n: a number.
    """
    if n == 0:
        time.sleep(3)
    return 2 * n


class Closing(Tally):
    def close(self) -> None:
        raise OSError("cannot close")


def violations(adapter: Any) -> list[str]:
    with pytest.raises(AssertionError) as failed:
        check_adapter(adapter, across_processes=False)
    return str(failed.value).splitlines()[1:]


class Calling(Doubling):
    """Its reference calls its one tool with n."""

    def reference_completion(self, problem: int) -> str:
        return call(self.tools[0].__name__, n=problem)


def with_tools(tools: Any, **more: Any) -> Doubling:
    adapter = Calling() if isinstance(tools, tuple) else Tallying()
    adapter.tools = tools
    for name, value in more.items():
        setattr(adapter, name, value)
    return adapter


def test_check_adapter_names_what_is_wrong_with_a_tasks_tools() -> None:
    found = violations(with_tools((remembering,)))
    assert any("a tool must keep no state across episodes" in v for v in found), found
    found = violations(with_tools((odd,)))
    assert any("was answered 'Error: odd returned <object object" in v for v in found), found
    found = violations(with_tools((stuck,), call_seconds=0.2))
    assert any("did not return within the tools' 0.2 s (call_seconds)" in v for v in found), found
    found = violations(with_tools(Closing))
    assert any("the tools' close() after an episode of" in v for v in found), found

    class Undeclared(Doubling):
        def reference_completion(self, problem: int) -> str:
            return call("halve", n=problem)

    found = violations(Undeclared())
    assert any("the reference episode of" in v and "makes a tool call answered with an error "
               "(turn 1: \"Error: there is no tool 'halve'" in v for v in found), found  # fmt: skip

    class Endless(Doubling):
        def reference_turn(self, problem: int, responses: Sequence[Response]) -> str:
            return call("double", n=problem)

    found = violations(Endless())
    assert any("never ends: its turns were answered up to the last of its 4 turns" in v
               for v in found), found  # fmt: skip


def choose(
    kind: Literal["a", "b"], weights: dict[str, float] | None = None, flag: bool = False
) -> str:
    """Choose.

    Args:
        kind: which.
        weights: how much each.
        flag: whether.
    """
    return f"{kind} {sorted(weights or {})} {flag}"


class Refusing:
    """A format that reads no call at all."""

    name, role = "refusing", "tool"

    def parse(self, text: str) -> list[Any]:
        return []

    def write(self, calls: Sequence[tuple[str, Any]]) -> str:
        return "no call"


class Unopened(Tally):
    def __init__(self, problem: int) -> None:
        raise OSError("no tools today")


def needs_a_sandbox(n: int) -> int:
    """Cannot run here.

    Args:
        n: a number.
    """
    raise Unavailable("sandbox: no Landlock here")


def test_check_adapter_calls_each_tool_with_hostile_arguments_of_its_types() -> None:
    adapter = Calling()
    adapter.tools = (double, choose)
    assert checks_passed(adapter) > 100
    found = violations(with_tools(Unopened))
    assert any("the tools of an episode of" in v and "raised OSError: no tools today" in v
               for v in found), found  # fmt: skip
    found = violations(with_tools((double,), tool_format=Refusing()))
    assert any("a turn of a tool that does not exist on" in v and "was answered [], not with an "
               "error" in v for v in found), found  # fmt: skip
    found = violations(with_tools((needs_a_sandbox,)))
    assert any("raised Unavailable: sandbox: no Landlock here" in v for v in found), found


class Builtin(dict[str, int]):
    """Tools on a class of C's: made with nothing."""

    def size(self) -> int:
        """How many."""
        return len(self)


def test_tools_of_a_c_class_are_made_with_nothing() -> None:
    adapter = Doubling()
    adapter.tools = Builtin
    task = as_task(adapter)
    assert task.toolbox is not None
    session = task.toolbox.open(5)
    assert isinstance(session.state, Builtin)
