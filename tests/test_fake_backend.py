"""FakeBackend: the contract, plus what makes it a faithful stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import strategies as st_
from conftest import math_references
from mathrl.backend import (
    BackendError,
    Datum,
    SampleParams,
    TrainResult,
    TransientBackendError,
    check_train_step,
)
from mathrl.config import TrainConfig
from mathrl.grpo import build_datum
from mathrl.loop import run_grpo
from mathrl.losses import IMPORTANCE_SAMPLING
from mathrl.rollout import run_problems
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import BrokenRule, check_backend
from mathrl_fakes import (
    ByteTokenizer,
    FakeBackend,
    PromptKey,
    RecordingBackend,
    Reference,
    references_for,
)
from mathrl_fakes.policy import (
    DECISION_CAP,
    DECISION_DEPTH,
    EOS,
    FULL_TARGET_PROB,
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
from virtual_clock import run_virtual

FakeFactory = Callable[..., FakeBackend]
PROMPT = MathAdapter().make_prompt(AdditionProblem(12, 30))


def test_fake_backend_passes_the_contract(fake_backend_factory: FakeFactory) -> None:
    check_backend(fake_backend_factory)


# -- the tokenizer ------------------------------------------------------------------


@given(st_.unicode_text)
def test_the_tokenizer_round_trips_every_string(text: str) -> None:
    tok = ByteTokenizer()
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode([*tok.encode(text), EOS]) == text


@example([97, EOS, 98])  # "a", EOS, "b": EOS mid-sequence
@example([0xE2, 0x80, 0x99, 0xFF, EOS])  # "\u2019", a byte no UTF-8 text holds, EOS
@given(st.lists(st_.fake_token_ids))
def test_decoding_any_tokens_gives_the_text_of_their_bytes(tokens: list[int]) -> None:
    tok = ByteTokenizer()
    text = tok.decode(tokens)  # never raises
    data = [t for t in tokens if t != EOS]
    # EOS, wherever it is, is no text.
    assert text == tok.decode(data)
    # Bytes that are UTF-8 are their text, which encodes back to them; bytes that are not
    # show as U+FFFD, where Python's decoder replaces them.
    if tok.encode(text) != data:
        assert text == bytes(data).decode("utf-8", "replace")
        assert "\ufffd" in text


def test_tokenizer_worked_examples() -> None:
    tok = ByteTokenizer()
    # "é" is two UTF-8 bytes; a curly apostrophe three; a lone surrogate three.
    assert tok.encode("aé") == [97, 0xC3, 0xA9]
    assert tok.encode("\u2019") == [0xE2, 0x80, 0x99]
    assert tok.decode(tok.encode("\ud800")) == "\ud800"
    assert tok.decode([0xFF, 97]) == "\ufffda"  # not UTF-8: replaced, never raised
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.256"):
        tok.decode([257])


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
    assert len(backend.model.table) == 7  # only the held-out problems so far
    small = TrainConfig(steps=10, batch=3, eval_problems=2)
    backend = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), small, first_step=4), checkpoint_dir=tmp_path
    )
    tok = backend.tokenizer

    async def go() -> None:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("l")))
        params = SampleParams(8, 1.0, ("\n",), seed=1)
        # Step 5's problems: drawn now, with step 4's (the first a resumed run needs).
        for problem in MathAdapter().build_dataset(0, 5, 3):
            await sampler.sample(tok.encode(MathAdapter().make_prompt(problem)), 1, params)
        assert len(backend.model.table) <= 2 + 2 * 3
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
    strict = FakeBackend(refs, checkpoint_dir=tmp_path / "a")
    lenient = FakeBackend(refs, checkpoint_dir=tmp_path / "b", unknown_prompts="uniform")

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


@pytest.mark.slow
def test_sampling_is_deterministic_across_processes(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys, pathlib\n"
        "from conftest import math_references\n"
        "from mathrl_fakes import FakeBackend\n"
        "from mathrl.backend import SampleParams\n"
        "async def go():\n"
        "    b = FakeBackend(math_references(), seed=3, checkpoint_dir=pathlib.Path(sys.argv[1]))\n"
        "    s = await b.create_sampler(await (await b.submit_save_for_sampler('x')))\n"
        f"    p = b.tokenizer.encode({PROMPT!r})\n"
        "    print(await s.sample(p, 4, SampleParams(8, 1.0, ('\\n',), seed=11)))\n"
        "asyncio.run(go())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
            env={"PYTHONHASHSEED": str(h), "PYTHONPATH": str(Path(__file__).parent)},
        ).stdout
        for h in (1, 2, 3)
    }
    assert len(outputs) == 1


# -- training, state and checkpoints -------------------------------------------------


def a_datum(backend: FakeBackend, answer: str = " 42\n", advantage: float = 1.0) -> Datum:
    tok = backend.tokenizer
    datum = build_datum(tok.encode(PROMPT), tok.encode(answer), [-0.2] * len(answer), advantage)
    assert datum is not None
    return datum


def test_checkpoints_are_real_files_and_states_hold_the_optimizer(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()

    async def go() -> tuple[str, str]:
        await (await backend.submit_train_step([a_datum(backend)], 1e-4))
        sampler = await (await backend.submit_save_for_sampler("ckpt"))
        return sampler, await (await backend.submit_save_state("ckpt-state"))

    sampler, state = (json.loads(Path(p).read_text()) for p in asyncio.run(go()))
    assert sampler["theta"] == state["theta"] == backend.theta
    assert (sampler["kind"], sampler["task"], state["kind"], state["t"]) == (
        "sampler", "addition", "state", 1
    )  # fmt: skip
    assert "m" not in sampler
    with pytest.raises(ValueError, match="plain file name"):
        asyncio.run(backend.submit_save_for_sampler("../escape"))


def test_a_restored_state_trains_on_exactly_as_before(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    datum = a_datum(backend)

    async def go() -> None:
        state = await (await backend.submit_save_state("s0"))
        first = [(await (await backend.submit_train_step([datum], 1e-4))).loss for _ in range(3)]
        theta = list(backend.theta)
        await (await backend.submit_load_state(state))
        assert backend.theta == [0.0] * 8
        again = [(await (await backend.submit_train_step([datum], 1e-4))).loss for _ in range(3)]
        assert (again, backend.theta) == (first, theta)

    asyncio.run(go())


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"format": "other"}), "is not a mathrl-fake-checkpoint/2 file"),
        (json.dumps({"format": "mathrl-fake-checkpoint/2", "kind": "state"}), "is a state"),
        (json.dumps({"format": "mathrl-fake-checkpoint/2", "kind": "sampler", "theta": ["x"]}),
         "holds no usable weights"),
    ],
)  # fmt: skip
def test_a_bad_checkpoint_file_is_a_backend_error_naming_it(
    fake_backend_factory: FakeFactory, tmp_path: Path, payload: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(payload)
    with pytest.raises(BackendError, match=message):
        asyncio.run(fake_backend_factory().create_sampler(str(path)))


def test_an_unwritable_checkpoint_folder_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    backend = FakeBackend(math_references(), checkpoint_dir=blocker)
    with pytest.raises(BackendError, match=rf"cannot write the fake checkpoint {blocker}/x\.json"):
        asyncio.run(_saved(backend, "x"))


def test_a_read_only_checkpoint_folder_is_a_backend_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root writes anywhere, so refuse the write the way a read-only folder would.
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refuse)
    backend = FakeBackend(math_references(), checkpoint_dir=tmp_path)
    with pytest.raises(BackendError, match=r"x\.json \(Permission denied\): the fake needs a"):
        asyncio.run(_saved(backend, "x"))


async def _saved(backend: FakeBackend, name: str) -> str:
    return await (await backend.submit_save_for_sampler(name))


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


async def _train(backend: FakeBackend, datums: list[Datum]) -> None:
    await (await backend.submit_train_step(datums, 1e-4))


def test_training_calls_complete_in_submission_order(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory(latency=1.0)  # one round trip = 1.0 on the virtual clock
    datum = a_datum(backend)

    async def go() -> str:
        training = await backend.submit_train_step([datum], 1e-4)
        saving = await backend.submit_save_for_sampler("after")
        await training
        return await saving

    path, elapsed = run_virtual(go())
    # Three calls in flight together cost one round trip, not three...
    assert elapsed == 1.0
    assert backend.log.kinds() == ["forward_backward", "optim_step", "save_weights_for_sampler"]
    assert [c.finished for c in backend.log.calls] == [1.0, 1.0, 1.0]
    assert backend.log.max_in_flight == 3
    # ...and the save, submitted last, holds the trained weights.
    assert json.loads(Path(path).read_text())["theta"] == backend.theta != [0.0] * 8


# -- faults -------------------------------------------------------------------------


def test_injected_failures_and_call_log(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    backend.fail_next("create_sampler")

    async def go() -> None:
        path = await (await backend.submit_save_for_sampler("a"))
        with pytest.raises(TransientBackendError, match="create_sampler"):
            await backend.create_sampler(path)
        sampler = await backend.create_sampler(path)  # the retry succeeds
        prompt = backend.tokenizer.encode(PROMPT)
        params = SampleParams(8, 1.0, ("\n",), seed=5)
        first = await sampler.sample(prompt, 2, params)
        backend.fail_next("sample")
        with pytest.raises(TransientBackendError):
            await sampler.sample(prompt, 2, params)
        assert await sampler.sample(prompt, 2, params) == first  # a retry replays

    asyncio.run(go())
    assert backend.log.kinds() == [
        "save_weights_for_sampler", "create_sampler", "create_sampler", "sample", "sample", "sample"
    ]  # fmt: skip
    assert [c.failed for c in backend.log.calls] == ["", "before", "", "", "before", ""]


@pytest.mark.parametrize("kind", ["forward_backward", "optim_step"])
def test_a_training_fault_may_or_may_not_have_taken_effect(
    fake_backend_factory: FakeFactory, kind: str
) -> None:
    # Retried as it is, a call that failed before taking effect trains once, as
    # a clean step does; one that failed after taking effect trains twice. A
    # client cannot tell them apart, so it must restore a state (mathrl.service.retry).
    def thetas(after_apply: bool | None) -> list[float]:
        backend = fake_backend_factory()
        datum = a_datum(backend)

        async def go() -> None:
            if after_apply is not None:
                backend.fail_next(kind, after_apply=after_apply)
                with pytest.raises(TransientBackendError, match=kind):
                    await _train(backend, [datum])
            await _train(backend, [datum])

        asyncio.run(go())
        return list(backend.theta)

    clean = thetas(None)
    if kind == "forward_backward":
        assert thetas(after_apply=False) == clean
    assert thetas(after_apply=True) != clean


@settings(max_examples=5, deadline=None)
@given(rate=st_.fault_rates, seed=st.integers(0, 1000))
def test_a_fault_rate_fails_a_seeded_share_of_calls(rate: float, seed: int) -> None:
    def failures() -> list[str]:
        backend = FakeBackend({"p": Reference("a")}, seed=seed, fault_rate=rate)

        async def go() -> None:
            for _ in range(400):
                with contextlib.suppress(TransientBackendError):
                    await backend.call("ping", lambda: None)

        asyncio.run(go())
        return [c.failed for c in backend.log.calls]

    first = failures()
    assert first == failures()  # the same calls fail every time
    share = first.count("before") / len(first)
    assert abs(share - rate) < 0.1  # 400 draws: the standard error is at most 0.023


def test_runs_sharing_checkpoint_names_do_not_share_weights(tmp_path: Path) -> None:
    backends = [FakeBackend(math_references(), checkpoint_dir=tmp_path) for _ in range(2)]

    async def save_after_training(backend: FakeBackend, lr: float) -> str:
        await (await backend.submit_train_step([a_datum(backend)], lr))
        return await (await backend.submit_save_for_sampler("same-name"))

    async def go() -> None:
        paths = [
            await save_after_training(b, lr) for b, lr in zip(backends, (1e-4, 1e-2), strict=True)
        ]
        assert paths[0] == paths[1]  # one file, written last by the second run
        first = await backends[0].create_sampler(paths[0])
        assert first.theta == tuple(backends[0].theta) != tuple(backends[1].theta)

    asyncio.run(go())


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


class SkipsTheOptimizerStep(FakeBackend):
    """forward_backward without optim_step: a backend that computes the loss and learns nothing."""

    async def submit_train_step(self, datums_D: Any, learning_rate: float, loss: Any = None) -> Any:
        check_train_step(datums_D, learning_rate, VOCAB_SIZE)
        metrics = self.model.forward_backward(list(datums_D), loss or IMPORTANCE_SAMPLING)

        async def done() -> TrainResult:
            return TrainResult(loss=metrics["loss:sum"], metrics=metrics)

        return asyncio.ensure_future(done())


def test_check_backend_names_the_rule_a_backend_breaks(tmp_path: Path) -> None:
    with pytest.raises(BrokenRule) as broken:
        check_backend(lambda: SkipsTheOptimizerStep(math_references(), checkpoint_dir=tmp_path))
    assert broken.value.rule == "optimizer step"
    assert str(broken.value).startswith(
        "the backend breaks the contract's rule 'optimizer step': two steps on the same datums "
        "gave the loss "
    )
