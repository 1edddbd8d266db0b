"""RetryingBackend: deadlines, bounded retries, and a training side never applied twice."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies as st_
from conftest import examples, math_references
from mathrl.backend import BackendError, Datum, SampleParams
from mathrl.config import TrainConfig
from mathrl.grpo import build_datum
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.losses import IMPORTANCE_SAMPLING, Loss
from mathrl.report import Checkpoint, Observer, RunResult, StepMetrics
from mathrl.rollout import run_problems
from mathrl.service.recovery import RetryingBackend
from mathrl.service.retry import RetriesExhausted, RetryPolicy
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl_fakes import FakeBackend, FakeModel
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]
FAST = RetryPolicy(retries=3, call_timeout=5.0, delay=0.0)
PROMPT = MathAdapter().make_prompt(AdditionProblem(12, 30))
TRAINING_KINDS = ("forward_backward", "optim_step", "save_weights_for_sampler", "save_state")


def outcome(result: RunResult) -> list[tuple[int, float, int, float | None]]:
    """What a run's stdout and metrics show: step, accuracy, datums, loss."""
    return [(m.step, m.accuracy, m.datums, m.loss) for m in result.steps]


class FailAt(Observer):
    """After step `step`, make the next call of `kind` fail (before or after taking effect)."""

    def __init__(self, backend: FakeBackend, step: int, kind: str, after_apply: bool) -> None:
        self.backend, self.step, self.kind, self.after_apply = backend, step, kind, after_apply

    def on_step(self, metrics: StepMetrics) -> None:
        if metrics.step == self.step:
            self.backend.fail_next(self.kind, after_apply=self.after_apply)


@dataclass(frozen=True, slots=True)
class Clean:
    """What a fault-free run shows and leaves: its outcome, weights, optimizer state, save name."""

    outcome: list[tuple[int, float, int, float | None]]
    theta: list[float]
    adam: object
    saved_name: str


MATRIX_CONFIG = TrainConfig(steps=8, save_every=3)


@cache
def clean_run(config: TrainConfig) -> Clean:
    """The fault-free reference run at `config`, made once per session and compared against."""
    with tempfile.TemporaryDirectory(prefix="mathrl-clean-") as folder:
        model = FakeModel(math_references())
        backend = FakeBackend(model, task_name="addition", checkpoint_dir=Path(folder))
        result = run_grpo(backend, MathAdapter(), config)
        return Clean(
            outcome(result),
            list(backend.theta),
            copy.deepcopy(model.adam),
            Path(result.saved_path).name,
        )


FAST_FAULTS = {("optim_step", True, 5), ("save_state", False, 2)}
"""The cases of the fault matrix the fast suite runs; `nox -s slow` runs all sixteen."""


@pytest.mark.parametrize(
    ("kind", "after_apply", "step"),
    [
        pytest.param(kind, after, step, marks=[] if (kind, after, step) in FAST_FAULTS
                     else [pytest.mark.slow])
        for kind in TRAINING_KINDS
        for after in (False, True)
        for step in (2, 5)
    ],
)  # fmt: skip
def test_a_training_side_fault_is_retried_without_applying_anything_twice(
    fake_backend_factory: FakeFactory, kind: str, after_apply: bool, step: int
) -> None:
    clean = clean_run(MATRIX_CONFIG)
    faulty = fake_backend_factory()
    lines: list[str] = []
    retrying = RetryingBackend(faulty, FAST, lines.append)
    result = run_grpo(
        retrying, MathAdapter(), MATRIX_CONFIG, FailAt(faulty, step, kind, after_apply)
    )
    assert outcome(result) == clean.outcome
    assert faulty.theta == clean.theta  # the same weights: nothing applied twice
    assert isinstance(faulty.model, FakeModel)
    assert faulty.model.adam == clean.adam
    assert Path(result.saved_path).name == clean.saved_name
    (line,) = lines
    assert line.startswith(
        f"retry 1 of 3 of {kind}"
        if "save" in kind
        else "retry 1 of 3 of forward_backward/optim_step"
    )
    assert any(c.failed for c in faulty.log.calls)
    if kind in ("forward_backward", "optim_step"):
        assert faulty.log.count("load_state") == 1  # the last saved state, restored first


class Steps(Observer):
    """Records what each finished step showed, as `outcome` does for a whole run."""

    def __init__(self) -> None:
        self.shown: list[tuple[int, float, int, float | None]] = []

    def on_step(self, m: StepMetrics) -> None:
        self.shown.append((m.step, m.accuracy, m.datums, m.loss))


@settings(max_examples=examples(2, 6), deadline=None)  # two training runs each
@given(rate=st_.fault_rates, seed=st.integers(0, 50))
def test_a_run_under_a_fault_rate_trains_exactly_as_without_one(rate: float, seed: int) -> None:
    config = TrainConfig(steps=6, batch=4, seed=seed, save_every=2)
    clean_backend = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), config), checkpoint_dir=None
    )
    clean = run_grpo(clean_backend, MathAdapter(), config)
    faulty = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), config), fault_rate=rate
    )
    retrying = RetryingBackend(faulty, replace(FAST, retries=8))
    steps = Steps()
    exhausted: RetriesExhausted | None = None
    try:
        result = run_grpo(retrying, MathAdapter(), config, steps)
    except RetriesExhausted as exc:
        exhausted = exc
    if exhausted is not None:
        # Nine failures in a row: possible, just rare. The run ends saying so, and every step
        # it finished showed what the clean run's did: nothing was lost or applied twice.
        assert " failed 9 times in a row (8 retries, --retries): " in str(exhausted)
        assert len(steps.shown) < config.steps
        assert steps.shown == outcome(clean)[: len(steps.shown)]
        return
    assert steps.shown == outcome(result) == outcome(clean)
    assert faulty.theta == clean_backend.theta


def test_samples_are_retried_with_the_same_seed(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    lines: list[str] = []
    retrying = RetryingBackend(backend, FAST, lines.append)

    async def go() -> None:
        path = await (await retrying.submit_save_for_sampler("s"))
        sampler = await retrying.create_sampler(path)
        prompt = backend.tokenizer.encode(PROMPT)
        params = SampleParams(8, 1.0, ("\n",), seed=5)
        first = await sampler.sample(prompt, 4, params)
        backend.fail_next("sample", times=2)
        assert await sampler.sample(prompt, 4, params) == first

    asyncio.run(go())
    assert [line.split(":")[0] for line in lines] == [
        "retry 1 of 3 of sample in 0.0 s", "retry 2 of 3 of sample in 0.0 s"
    ]  # fmt: skip


def test_a_call_that_keeps_failing_ends_after_the_retries(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    retrying = RetryingBackend(backend, FAST)
    backend.fail_next("create_sampler", times=4)

    async def go() -> None:
        path = await (await retrying.submit_save_for_sampler("s"))
        await retrying.create_sampler(path)

    with pytest.raises(RetriesExhausted) as excinfo:
        asyncio.run(go())
    assert str(excinfo.value) == (
        "create_sampler failed 4 times in a row (3 retries): "
        "create_sampler: injected transient failure"
    )
    assert excinfo.value.settings == ("retries",)  # the command line names its flag
    assert backend.log.count("create_sampler") == 4


def test_a_call_past_its_deadline_is_retried_then_given_up(
    fake_backend_factory: FakeFactory,
) -> None:
    # Every fake call takes 10 s; the deadline is 1 s: each attempt times out.
    backend = fake_backend_factory(latency=10.0)
    lines: list[str] = []
    retrying = RetryingBackend(
        backend, RetryPolicy(retries=2, call_timeout=1.0, delay=0.5), lines.append
    )

    async def go() -> str:
        return await (await retrying.submit_save_for_sampler("s"))

    with pytest.raises(RetriesExhausted, match=r"\(2 retries\): no answer within 1 s$") as excinfo:
        run_virtual(go())
    assert excinfo.value.settings == ("retries", "call_timeout")
    assert len(lines) == 2


def test_errors_a_retry_cannot_fix_pass_at_once(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    retrying = RetryingBackend(backend, FAST)

    async def go() -> None:
        with pytest.raises(BackendError, match="cannot load the fake checkpoint"):
            await retrying.create_sampler("/nowhere.json")
        with pytest.raises(ValueError, match="learning_rate"):
            await retrying.submit_train_step([], 0.0)

    asyncio.run(go())
    assert backend.log.count("create_sampler") == 1


def test_a_training_fault_with_no_saved_state_says_so(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    retrying = RetryingBackend(backend, FAST)
    tok = backend.tokenizer
    datum = build_datum(tok.encode(PROMPT), tok.encode(" 42\n"), [-0.2] * 4, 1.0)
    assert datum is not None
    backend.fail_next("optim_step")

    async def go() -> None:
        await (await retrying.submit_train_step([datum], 1e-4))

    with pytest.raises(BackendError, match="no training state was saved before it"):
        asyncio.run(go())


@pytest.mark.slow
def test_a_failed_restore_is_itself_retried(fake_backend_factory: FakeFactory) -> None:
    config = TrainConfig(steps=4)
    clean_backend = fake_backend_factory()
    clean = run_grpo(clean_backend, MathAdapter(), config)
    faulty = fake_backend_factory()

    class FailTwice(Observer):
        def on_step(self, metrics: StepMetrics) -> None:
            if metrics.step == 2:
                faulty.fail_next("optim_step", after_apply=True)
                faulty.fail_next("load_state", times=2)

    result = run_grpo(RetryingBackend(faulty, FAST), MathAdapter(), config, FailTwice())
    assert outcome(result) == outcome(clean)
    assert faulty.theta == clean_backend.theta
    assert faulty.log.count("load_state") == 3


@given(st.integers(1, 20), st.floats(0.0, 10.0))
def test_backoff_doubles_with_jitter_up_to_a_cap(attempt: int, delay: float) -> None:
    policy = RetryPolicy(delay=delay, max_delay=60.0)
    ceiling = min(60.0, delay * 2 ** (attempt - 1))
    pause = policy.backoff(attempt, random.Random(attempt))
    assert ceiling / 2 <= pause <= ceiling


def test_deadlines_apply_to_samples_on_a_silent_service(fake_backend_factory: FakeFactory) -> None:
    # A service that stops answering mid-run: every call hangs. The run ends after
    # the retries of its first call past the deadline, not after the SDK's hours.
    backend = fake_backend_factory()
    lines: list[str] = []
    retrying = RetryingBackend(
        backend, RetryPolicy(retries=1, call_timeout=2.0, delay=1.0), lines.append
    )

    class GoSilent(Observer):
        def on_phase(self, step: int, phase: str) -> None:
            if (step, phase) == (2, "sampling"):
                backend.latency = 3600.0

    with pytest.raises(RetriesExhausted, match=r"^sample failed 2 times in a row"):
        run_virtual(
            run_grpo_async(
                retrying, MathAdapter(), TrainConfig(steps=3), GoSilent(), workers=INLINE
            )
        )
    # Step 2's ten requests all timed out, were retried once (one line between them), and
    # timed out again; then the run tried to save step 1's state on its way out, and that
    # timed out too.
    assert len(lines) == 2
    assert re.fullmatch(
        r"retry 1 of 1 of sample \(10 requests\) in \d\.\d to \d\.\d s: no answer within 2 s",
        lines[0],
    ), lines[0]
    assert lines[1].startswith("retry 1 of 1 of save_state in ")


# -- pipelining through a recovery ---------------------------------------------------------


def two_datums(backend: FakeBackend) -> tuple[list[Datum], list[Datum]]:
    tok = backend.tokenizer
    prompts = [
        MathAdapter().make_prompt(p) for p in (AdditionProblem(12, 30), AdditionProblem(5, 7))
    ]
    first = build_datum(tok.encode(prompts[0]), tok.encode(" 42\n"), [-0.2] * 4, 1.0)
    second = build_datum(tok.encode(prompts[1]), tok.encode(" 11\n"), [-0.3] * 4, -1.0)
    assert first is not None
    assert second is not None
    return [first], [second]


def test_calls_sent_during_a_recovery_wait_their_turn(fake_backend_factory: FakeFactory) -> None:
    clean, faulty = fake_backend_factory(), fake_backend_factory()
    first, second = two_datums(clean)

    async def in_order(backend: FakeBackend) -> None:
        await (await backend.submit_save_state("s0"))
        await (await backend.submit_train_step(first, 1e-4))
        await (await backend.submit_train_step(second, 1e-4))

    async def pipelined() -> None:
        retrying = RetryingBackend(faulty, FAST)
        await (await retrying.submit_save_state("s0"))
        faulty.fail_next("optim_step", after_apply=True)
        one = await retrying.submit_train_step(first, 1e-4)
        while faulty.log.count("load_state") == 0:  # the first step's recovery is under way
            await asyncio.sleep(0)
        two = await retrying.submit_train_step(second, 1e-4)
        state = await retrying.submit_save_state("s1")
        await one
        await two
        await state

    asyncio.run(in_order(clean))
    asyncio.run(pipelined())
    assert faulty.theta == clean.theta  # first, then second: not the other way round
    saved = json.loads(Path(faulty.checkpoint_dir / "s1.json").read_text())
    assert saved["theta"] == clean.theta  # and the state saved after both holds both


def test_calls_behind_one_that_ran_out_of_retries_fail_too(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    first, second = two_datums(backend)

    async def go() -> list[object]:
        retrying = RetryingBackend(backend, replace(FAST, retries=0))
        await (await retrying.submit_save_state("s0"))
        backend.fail_next("optim_step")
        calls = [
            await retrying.submit_train_step(first, 1e-4),
            await retrying.submit_train_step(second, 1e-4),
            await retrying.submit_save_state("s1"),
        ]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    failed, skipped, unsaved = asyncio.run(go())
    assert isinstance(failed, RetriesExhausted)
    for outcome in (skipped, unsaved):
        assert isinstance(outcome, BackendError)
        assert "because an earlier training-side call failed" in str(outcome)
    # The calls already on their way were not sent again, nor anything to recover them.
    assert backend.log.kinds().count("forward_backward") == 2
    assert backend.log.count("load_state") == 0


class SlowToSubmit:
    """An inner backend whose first train step takes 5 s just to be sent (an SDK reconnecting)."""

    def __init__(self, inner: FakeBackend) -> None:
        self.inner = inner
        self.sent = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def submit_train_step(
        self, datums_D: list[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> object:
        self.sent += 1
        if self.sent == 1:
            await asyncio.sleep(5.0)
        return await self.inner.submit_train_step(datums_D, learning_rate, loss)


def test_a_submission_past_its_deadline_ends_the_run_rather_than_risk_a_double_step(
    fake_backend_factory: FakeFactory,
) -> None:
    # Sent late, it could land after a restore and a replay: nothing more may be sent.
    backend = fake_backend_factory()
    first, _ = two_datums(backend)
    slow = SlowToSubmit(backend)

    async def go() -> None:
        retrying = RetryingBackend(slow, replace(FAST, call_timeout=1.0))  # type: ignore[arg-type]
        await (await retrying.submit_save_state("s0"))
        await (await retrying.submit_train_step(first, 1e-4))

    with pytest.raises(
        BackendError, match=r"^forward_backward/optim_step was not accepted within 1 s"
    ):
        run_virtual(go())
    assert backend.log.count("load_state") == 0


def test_a_run_whose_sampling_fails_saves_its_last_step_first(
    fake_backend_factory: FakeFactory,
) -> None:
    # Steps 1-3 train; step 4's sampling keeps failing. The state saved on the way out is
    # step 3's, so the resume command redoes nothing (the last on cadence was step 0's).
    backend = fake_backend_factory()
    retrying = RetryingBackend(backend, RetryPolicy(retries=1, delay=0.0))
    states: list[int] = []

    class Watch(Observer):
        def on_phase(self, step: int, phase: str) -> None:
            if (step, phase) == (4, "sampling"):
                backend.fail_next("sample", 1_000)

        def on_checkpoint(self, checkpoint: Checkpoint) -> None:
            if checkpoint.kind == "state":
                states.append(checkpoint.step)

    config = TrainConfig(steps=6, save_every=5)
    with pytest.raises(RetriesExhausted, match=r"^sample failed 2 times in a row"):
        run_virtual(run_grpo_async(retrying, MathAdapter(), config, Watch()))
    assert states == [0, 3]
