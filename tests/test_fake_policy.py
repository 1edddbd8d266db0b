"""The fake's learning policy (`mathrl_fakes.model.FakeModel`, `mathrl_fakes.policy`,
`mathrl_fakes.references`): what it writes, how it learns, and what it knows of a task.

The backend around it, the contract (calls, refusals, order, faults, checkpoint files), is
tests/test_fake_backend.py's. The policy's distribution and its exact logprobs; the
references it learns from a task's methods, for any task and any run; the wrong answers a
task names; and problems that share a prompt (the hidden-secret game, `doubles.secret_game`):
what it learns where they disagree, and an episode's later turns, read from its replies.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies as st_
from doubles.secret_game import PROMPT as GAME_PROMPT
from doubles.secret_game import ChatSecretGame, Game, PeekingGame, SecretGame
from mathrl.adapter import Response
from mathrl.backend import BackendError, Datum, SampleParams
from mathrl.config import TrainConfig
from mathrl.grpo import build_datum
from mathrl.loop import run_grpo
from mathrl.rollout import run_problems
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl_fakes import (
    ByteTokenizer,
    FakeBackend,
    FakeModel,
    PromptKey,
    RecordingBackend,
    Reference,
    references_for,
)
from mathrl_fakes.policy import (
    DECISION_CAP,
    DECISION_DEPTH,
    FULL_TARGET_PROB,
    POSITIONS,
    VOCAB_SIZE,
    Position,
    draw,
    easy_bias,
    logprob,
    make_target,
    position_at,
    token_logprobs,
    uniforms,
)

FakeFactory = Callable[..., FakeBackend]
PROMPT = MathAdapter().make_prompt(AdditionProblem(12, 30))
BYTES = ByteTokenizer()


def a_datum(backend: FakeBackend, answer: str = " 42\n", advantage: float = 1.0) -> Datum:
    tok = backend.tokenizer
    datum = build_datum(tok.encode(PROMPT), tok.encode(answer), [-0.2] * len(answer), advantage)
    assert datum is not None
    return datum


async def _train(backend: FakeBackend, datums: list[Datum]) -> None:
    await (await backend.submit_train_step(datums, 1e-4))


# -- the policy ---------------------------------------------------------------------


@settings(max_examples=25)
@given(
    theta=st_.policy_thetas,
    bias=st_.biases,
    target=st_.fake_token_ids,
    shift=st.integers(1, 255),
    temperature=st_.temperatures,
)
def test_reported_logprobs_are_those_of_the_sampled_distribution(
    theta: float, bias: float, target: int, shift: int, temperature: float
) -> None:
    params = [theta] * 8
    step = Position(target, 0, bias, (target + shift) % 256)
    # Drawing by inverse CDF over an even grid of uniforms gives each token a
    # share of the grid equal to exp(its reported logprob), to grid resolution.
    grid = 4_000
    share: dict[int, int] = {}
    reported: dict[int, float] = {}
    for k in range(grid):
        token, lp = draw(params, step, (k + 0.5) / grid, temperature)
        share[token] = share.get(token, 0) + 1
        reported[token] = lp
    for token, count in share.items():
        assert abs(count / grid - math.exp(reported[token])) <= 1.5 / grid
    # At temperature 1 the sampler's logprob is the learner's logprob, to rounding: the two
    # are computed apart, and a near-certain token's (-3e-4) differs in its 12th digit.
    if temperature == 1.0:
        for token, lp in reported.items():
            assert math.isclose(lp, logprob(params, step, token), rel_tol=1e-9, abs_tol=1e-12)


@given(theta=st_.policy_thetas, bias=st_.biases)
def test_logprobs_normalise_over_the_vocabulary(theta: float, bias: float) -> None:
    for step in (Position(42, 3, bias, 7), Position(None)):
        total = math.fsum(math.exp(logprob([theta] * 8, step, t)) for t in range(VOCAB_SIZE))
        assert math.isclose(total, 1.0, rel_tol=1e-12)


@given(st.integers(1, 200))
def test_an_untrained_target_of_any_length_comes_out_whole_equally_often(length: int) -> None:
    lp_target, _, _ = token_logprobs(easy_bias(length))
    assert math.isclose(math.exp(length * lp_target), FULL_TARGET_PROB, rel_tol=1e-9)


@given(st.binary(min_size=1, max_size=40), st.lists(st_.fake_token_ids, min_size=1, max_size=30))
def test_each_target_has_one_decision_position_and_distractors_that_are_not_it(
    prompt: bytes, tokens: list[int]
) -> None:
    answer = max(1, len(tokens) - 2)
    target = make_target(list(prompt), tokens, answer)
    assert target == make_target(list(prompt), tokens, answer)  # a function of the tokens
    easy = easy_bias(len(tokens))
    lowered = [j for j, b in enumerate(target.biases) if b != easy]
    assert len(lowered) <= 1
    # The decision starts at most at DECISION_CAP (a six-token target's), then `depth` lower.
    start = min(easy, DECISION_CAP)
    assert all(j < answer and start - DECISION_DEPTH < target.biases[j] <= start for j in lowered)
    assert all(d != t and 0 <= d < 256 for d, t in zip(target.distractors, tokens, strict=True))


def test_policy_worked_example() -> None:
    # A 5-token target starts at p = 0.5 ** (1/5) = 0.8706 per token: the logit
    # b with e^b / (e^b + 1 + 0.05) = 0.8706 is ln(0.8706 * 1.05 / 0.1294) = 1.955.
    assert math.isclose(easy_bias(5), math.log(0.5**0.2 * 1.05 / (1 - 0.5**0.2)))
    assert math.isclose(easy_bias(5), 1.955, abs_tol=1e-3)
    # At logit 0 the target and the distractor tie: 1 / 2.05 each; the other
    # 255 tokens share the remaining 0.05 / 2.05.
    target, distractor, other = (math.exp(x) for x in token_logprobs(0.0))
    assert math.isclose(target, 1 / 2.05)
    assert math.isclose(distractor, 1 / 2.05)
    assert math.isclose(255 * other, 0.05 / 2.05)
    # Greedy decoding writes the distractor until the target's logit passes 0.
    step = Position(42, 0, -0.5, 7)
    assert draw([0.0] * 8, step, 0.3, 0.0) == (7, 0.0)
    assert draw([0.001] * 8, step, 0.3, 0.0) == (42, 0.0)  # -0.5 + 2000 * 0.001 > 0


def test_uniforms_are_stable_and_in_range() -> None:
    u = uniforms("k", 20)
    assert u == uniforms("k", 20)
    assert u != uniforms("j", 20)
    assert all(0.0 <= x < 1.0 for x in u)
    assert uniforms("k", 5) == u[:5]


# -- serving any task ---------------------------------------------------------------


class Accents:
    """A task whose prompts and answers are not ASCII."""

    name = "accents"

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        return [(seed * 31 + step * 7 + i) % 50 for i in range(size)]

    def make_prompt(self, problem: int) -> str:
        # A multiplication sign, an accent and a curly apostrophe.
        return f"Combien font {problem} \u00d7 2 ? R\u00e9ponse\u2019 :"

    def compute_reward(self, completion: str, problem: int) -> float:
        return 1.0 if completion.strip() == f"«{2 * problem}»" else 0.0

    def reference_completion(self, problem: int) -> str:
        return f" «{2 * problem}»"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


def test_for_run_knows_every_prompt_a_run_draws_and_nothing_else(tmp_path: Path) -> None:
    config = TrainConfig(steps=3, batch=4, eval_problems=5)
    backend = FakeBackend.for_run(
        Accents(), run_problems(Accents(), config), checkpoint_dir=tmp_path
    )
    run = run_problems(Accents(), config)
    problems = [p for step in range(1, 4) for p in run.step(step)] + run.heldout()
    assert len(problems) == 3 * 4 + 5
    tok = backend.tokenizer

    async def go() -> None:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("a")))
        params = SampleParams(12, 0.0, ("\n",), seed=1)
        for problem in problems:
            (c,) = await sampler.sample(tok.encode(Accents().make_prompt(problem)), 1, params)
            assert c.tokens
        with pytest.raises(BackendError, match=r"no reference for the prompt 'Combien font 99"):
            await sampler.sample(tok.encode(Accents().make_prompt(99)), 1, params)

    asyncio.run(go())


def test_for_run_draws_each_step_as_the_run_gets_there(tmp_path: Path) -> None:
    # A million steps of 32,768 problems: drawn up front, that would eat the machine.
    config = TrainConfig(steps=1_000_000, batch=32_768, group=2, eval_problems=7)
    backend = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), config), checkpoint_dir=tmp_path
    )
    assert isinstance(backend.model, FakeModel)
    assert len(backend.model.table) == 7  # only the held-out problems so far
    small = TrainConfig(steps=10, batch=3, eval_problems=2)
    backend = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), small, first_step=4), checkpoint_dir=tmp_path
    )
    tok, model = backend.tokenizer, backend.model
    assert isinstance(model, FakeModel)

    async def go() -> None:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("l")))
        params = SampleParams(8, 1.0, ("\n",), seed=1)
        # Step 5's problems: drawn now, with step 4's (the first a resumed run needs).
        for problem in MathAdapter().build_dataset(0, 5, 3):
            await sampler.sample(tok.encode(MathAdapter().make_prompt(problem)), 1, params)
        assert len(model.table) <= 2 + 2 * 3
        (first, *_) = MathAdapter().build_dataset(0, 1, 3)  # step 1: before the resumed run
        prompt = tok.encode(MathAdapter().make_prompt(first))
        with pytest.raises(BackendError, match="no reference for the prompt"):
            await sampler.sample(prompt, 1, params)

    asyncio.run(go())


class FewProblems(Accents):
    """Six problems in all: most steps draw no prompt the fake has not seen before."""

    name = "few"

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"few/{seed}/{step}")
        return [rng.randrange(6) for _ in range(size)]


def test_a_small_problem_pool_never_leaves_the_fake_behind(tmp_path: Path) -> None:
    # A prompt first drawn late must still be known, however long since the last new one.
    config = TrainConfig(steps=60, batch=2, group=2)
    backend = FakeBackend.for_run(
        FewProblems(), run_problems(FewProblems(), config), checkpoint_dir=tmp_path
    )
    result = run_grpo(backend, FewProblems(), config)
    assert [m.step for m in result.steps] == list(range(1, 61))


def test_unknown_prompts_get_the_uniform_policy_only_when_asked(tmp_path: Path) -> None:
    refs: dict[PromptKey, Reference] = {"known": Reference(" yes", "\n")}
    strict = FakeBackend(FakeModel(refs), checkpoint_dir=tmp_path / "a")
    lenient = FakeBackend(FakeModel(refs, "uniform"), checkpoint_dir=tmp_path / "b")

    async def go() -> None:
        for backend in (strict, lenient):
            path = await (await backend.submit_save_for_sampler("u"))
            sampler = await backend.create_sampler(path)
            if backend is strict:
                with pytest.raises(BackendError, match=r"'\\x01\\x02\\x03' \(1 known\)"):
                    await sampler.sample([1, 2, 3], 1, SampleParams(5, 1.0, (), seed=1))
                continue
            (c,) = await sampler.sample([1, 2, 3], 1, SampleParams(5, 1.0, (), seed=1))
            assert c.logprobs == (-math.log(VOCAB_SIZE),) * len(c.tokens)
            (g,) = await sampler.sample([1, 2, 3], 1, SampleParams(3, 0.0, (), seed=1))
            assert g.logprobs == (0.0, 0.0, 0.0)

    asyncio.run(go())


def test_training_moves_the_target_probability_the_right_way(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    right, wrong = a_datum(backend, " 42\n", +0.5), a_datum(backend, " 41\n", -0.5)
    asyncio.run(_train(backend, [right, wrong]))
    # Adam's first step moves every parameter with a gradient by about lr.
    # " " and "4" are in both completions: equal and opposite pushes cancel.
    assert backend.theta[0] == backend.theta[1] == 0.0
    assert math.isclose(backend.theta[2], 1e-4, rel_tol=1e-3)  # "2" was rewarded


def test_references_come_from_the_task_with_its_first_stop() -> None:
    problem = AdditionProblem(12, 30)
    assert references_for(MathAdapter(), [problem]) == {PROMPT: Reference(" 42", "\n")}


class PartialCredit(MathAdapter):
    """1.0 for the sum, 0.25 for any other whole number on its own line; names a near miss."""

    name = "partial"

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        if super().compute_reward(completion, problem) == 1.0:
            return 1.0
        return 0.25 if re.fullmatch(r" -?[0-9]+\n", completion) else 0.0

    def wrong_completions(self, problem: AdditionProblem) -> list[str]:
        return [f" {problem.answer + 10}"]  # a tens-digit slip: 42 -> 52

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


def test_the_fake_writes_the_wrong_answers_a_task_names(tmp_path: Path) -> None:
    config = TrainConfig(steps=1, batch=100, group=4)
    backend = RecordingBackend(
        FakeBackend.for_run(
            PartialCredit(), run_problems(PartialCredit(), config), checkpoint_dir=tmp_path
        )
    )
    result = run_grpo(backend, PartialCredit(), config)
    rewards = [
        PartialCredit().compute_reward(backend.tokenizer.decode(c.tokens), problem)
        for call, problem in zip(
            backend.samples, PartialCredit().build_dataset(0, 1, 100), strict=True
        )
        for c in call.completions_G
    ]
    # Untrained, about one sample in ten takes the named slip and earns partial credit.
    assert rewards.count(0.25) >= 20
    assert result.steps[0].accuracy < 1.0


def test_a_named_wrong_answer_parts_from_the_target_at_the_distractor() -> None:
    # Target " 42\n" + EOS; the slip " 52\n" + EOS parts from it at index 1 ("4" vs "5").
    target = make_target(list(b"Q"), [*b" 42\n", 256], 3, [[*b" 52\n", 256], [*b" 42\n", 256]])
    assert target.distractors[1] == ord("5")
    assert target.alternatives == ((*b" 52\n", 256),)  # the second never parts: left out
    on_slip = position_at(target, list(b" 5"))
    assert (on_slip.target, on_slip.learnable) == (ord("2"), False)
    # Its logit is the fixed WRONG_BIAS whatever the weights: training never moves it.
    assert logprob([0.5] * 8, on_slip, ord("2")) == logprob([0.0] * 8, on_slip, ord("2"))
    assert position_at(target, list(b" 6")) == position_at(None, [])


# -- problems that share a prompt ---------------------------------------------------


def test_the_fakes_first_guess_is_the_same_whatever_the_secret() -> None:
    (reference,) = references_for(SecretGame(), [Game(3, "a"), Game(13, "b")]).values()
    assert (reference.answer, reference.stop) == (" 8", "\n")  # (1 + 16) // 2


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("higher\nGuess:", " 12"),  # 9..16 are left: (9 + 16) // 2
        ("lower\nGuess:", " 4"),  # 1..7 are left: (1 + 7) // 2
        ("colder\nGuess:", None),  # no game the fake knows replies so
    ],
)
def test_the_fakes_later_guess_is_the_one_the_reply_leaves(reply: str, expected: str) -> None:
    (reference,) = references_for(SecretGame(), [Game(3, "a"), Game(13, "b")]).values()
    known = reference.known
    assert known is not None
    said = Response(" 8\n", "stop", "\n")
    after = known.then(said, tuple(BYTES.encode(" 8\n")), tuple(BYTES.encode(reply)), known)
    assert (after.answer if after is not None else None) == expected


@pytest.mark.parametrize("cut_off", [False, True])
def test_a_chat_reply_is_read_as_the_template_renders_it(cut_off: bool) -> None:
    (reference,) = references_for(ChatSecretGame(), [Game(3, "a"), Game(13, "b")]).values()
    known = reference.known
    assert known is not None
    # A turn that ended at its end-of-turn token; or one cut off, whose reply opens with one.
    wrote = (*BYTES.encode(" 8"), *(() if cut_off else (BYTES.end_of_turn_id,)))
    reply = [BYTES.end_of_turn_id] if cut_off else []
    said_back = "a number from 1 to 16, please\nGuess:" if cut_off else "higher\nGuess:"
    reply += BYTES.render_reply({"role": "user", "content": said_back}, {})
    said = Response(" 8", "length" if cut_off else "end_of_turn")
    after = known.then(said, wrote, tuple(reply), known)
    # A guess cut off is no guess: 1..16 are all left, (1 + 16) // 2; else 9..16 are.
    assert after is not None
    assert after.answer == (" 8" if cut_off else " 12")


def test_where_the_problems_disagree_the_fake_learns_the_reference_most_have() -> None:
    # Secrets 5, 5 and 9: ' 5' twice, ' 9' once; the other is written now and then.
    games = [Game(5, "a"), Game(9, "b"), Game(5, "c")]
    (reference,) = references_for(PeekingGame(), games).values()
    assert (reference.answer, reference.wrong) == (" 5", (" 9",))
    # A tie goes to the first in text order: ' 12' before ' 3'.
    (tied,) = references_for(PeekingGame(), [Game(3, "a"), Game(12, "b")]).values()
    assert (tied.answer, tied.wrong) == (" 12", (" 3",))


def test_a_problem_told_twice_counts_once() -> None:
    games = [Game(5, "a"), Game(9, "b"), Game(9, "b"), Game(9, "b")]
    (reference,) = references_for(PeekingGame(), games).values()
    assert reference.answer == " 5"  # ' 5' once, ' 9' once: a tie, not three to one


GREEDY = SampleParams(max_tokens=8, temperature=0.0, stop=("\n",))


def trained(more: Callable[[int], Any] | None) -> FakeModel:
    """A fake told the games with secrets 3 and 5, trained so far that greedy decoding writes
    each target; `more` tells it more games."""
    model = FakeModel(references_for(SecretGame(), [Game(3, "a"), Game(5, "b")]), more=more)
    model.theta = [1.0] * POSITIONS
    return model


def test_the_fake_is_told_more_games_when_none_it_knows_replies_so() -> None:
    told = iter([references_for(SecretGame(), [Game(13, "b")])])
    model = trained(lambda requests: next(told, None))
    first = tuple(BYTES.encode(GAME_PROMPT))
    (guess,) = model.sample(model.theta, first, "k", 1, GREEDY)
    assert guess.tokens == tuple(BYTES.encode(" 8\n"))
    # Secrets 3 and 5 reply 'lower' to 8; 'higher' is secret 13's, told next.
    context = (*first, *guess.tokens, *BYTES.encode("higher\nGuess:"))
    (later,) = model.sample(model.theta, context, "k", 1, GREEDY)
    assert later.tokens == tuple(BYTES.encode(" 12\n"))  # 9..16 are left: (9 + 16) // 2


def test_a_reply_no_game_the_fake_knows_gives_is_an_unknown_prompt() -> None:
    model = trained(None)
    first = tuple(BYTES.encode(GAME_PROMPT))
    (guess,) = model.sample(model.theta, first, "k", 1, GREEDY)
    context = (*first, *guess.tokens, *BYTES.encode("higher\nGuess:"))
    with pytest.raises(BackendError, match=r"^the fake backend has no reference for the prompt"):
        model.sample(model.theta, context, "k", 1, GREEDY)
