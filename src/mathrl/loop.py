"""The GRPO loop: orchestrates the pure core over a `Backend`.

One on-policy step: a sampler for the current weights -> every problem's group
sampled concurrently -> rewards -> advantages, constant groups dropped ->
datums -> forward_backward and optim_step submitted back to back, with the
save for the next step's sampler (and, every `save_every` steps, the full
training state) right behind them. With `max_steps_off_policy=1`, step k+1 is
sampled from the weights before step k's update while step k trains; each
datum carries the logprobs of the sampler that drew it, so the
importance-sampling loss corrects for the lag.

Held-out evaluation (`eval_every` > 0) samples greedily from the sampler the
next step uses anyway, alongside that step's requests: it costs no save and
no extra round trip, except once after the last step.

A run can stop cleanly (`stop` is set: the step in progress is finished if
its training was submitted, abandoned otherwise) and resume from a saved
state (`resume`); either way no step is ever applied twice, and a resumed
run draws the same problems and request seeds as an uninterrupted one.

This module does no printing and no file I/O; it reports to an `Observer`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from mathrl.adapter import Adapter, Task, as_task
from mathrl.backend import Backend, Sampler, TrainResult
from mathrl.config import TrainConfig
from mathrl.report import Checkpoint, EvalMetrics, Observer, StepMetrics
from mathrl.rollout import Rollout, evaluate, heldout_problems, rollout, sample_params

P = TypeVar("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a run continues from: a saved state and the samplers around it."""

    step: int
    """The last step whose update the state holds."""
    state_path: str
    sampler_path: str
    """The latest sampler checkpoint at or before `step` (the current weights)."""
    lagged_sampler_path: str
    """The latest one at or before `step - 1`; off-policy step `step + 1` samples from it."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run did, and where its final weights are."""

    steps: list[StepMetrics]
    saved_path: str
    """The latest sampler checkpoint: the weights after the last completed step."""
    state_path: str
    """The latest full training state: what `--resume` continues from."""
    last_step: int
    """The last step completed (less than `config.steps` if the run was stopped)."""
    stopped: bool = False


def run_fingerprint(task: Task[P], config: TrainConfig) -> str:
    """8 hex digits that change with the task and every setting the loop trains with.

    The base model and LoRA rank are the backend's, not the loop's: MinT scopes
    each checkpoint path by its training run, and the fake has one model.
    """
    settings = (
        task.name, task.identity, task.stop, sample_params(task, config).max_tokens,
        config.batch, config.group, config.lr, config.temperature, config.seed,
        config.max_steps_off_policy,
    )  # fmt: skip
    return hashlib.blake2b(repr(settings).encode(), digest_size=4).hexdigest()


def run_name(task: Task[P], config: TrainConfig) -> str:
    """The prefix of a run's checkpoint names: task, seed and fingerprint."""
    return f"{task.name}-seed{config.seed}-{run_fingerprint(task, config)}"


def checkpoint_name(task: Task[P], config: TrainConfig, step: int, kind: str = "sampler") -> str:
    """The name of step `step`'s save (0: before training); it sorts by step.

    The same task and training settings give the same names, so a rerun or a
    resumed run prints the same `Saved:` line; runs that would train
    differently never share a name.
    """
    label = "step" if kind == "sampler" else "state"
    return f"{run_name(task, config)}-{label}{step:07d}"


CHECKPOINT_NAME = re.compile(
    r"(?P<task>[A-Za-z0-9][A-Za-z0-9_.-]*)-seed[0-9]+-[0-9a-f]{8}-(step|state)[0-9]+"
)


def task_of_checkpoint(path: str) -> str | None:
    """The task a checkpoint path was trained on, if its name is one of `checkpoint_name`'s."""
    name = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")
    match = CHECKPOINT_NAME.fullmatch(name)
    return match["task"] if match else None


async def run_grpo_async(
    backend: Backend,
    adapter: Adapter[P] | Task[P],
    config: TrainConfig,
    observer: Observer | None = None,
    *,
    resume: Resume | None = None,
    stop: asyncio.Event | None = None,
) -> RunResult:
    """Run steps `resume.step + 1` (or 1) to `config.steps`; return what they did."""
    task = as_task(adapter)
    return await _Run(backend, task, config, observer or Observer(), stop).go(resume)


def run_grpo(
    backend: Backend,
    adapter: Adapter[P] | Task[P],
    config: TrainConfig,
    observer: Observer | None = None,
) -> RunResult:
    """Synchronous entry point: `asyncio.run(run_grpo_async(...))`."""
    return asyncio.run(run_grpo_async(backend, adapter, config, observer))


class _Run(Generic[P]):
    """One run's state between steps."""

    def __init__(
        self,
        backend: Backend,
        task: Task[P],
        config: TrainConfig,
        observer: Observer,
        stop: asyncio.Event | None,
    ) -> None:
        self.backend, self.task, self.config, self.obs = backend, task, config, observer
        self.stop = stop
        self.clock = asyncio.get_running_loop().time
        self.heldout: list[P] = []
        if config.eval_every:
            self.heldout, left_out = heldout_problems(task, config)
            if left_out:
                observer.on_warning(
                    f"{left_out} of {config.eval_problems} held-out problems of task "
                    f"{task.name!r} are also training problems of this run and were left out "
                    "of evaluation; declare heldout_dataset on the task to avoid this"
                )
        self.path = ""  # the latest sampler checkpoint
        self.state_path = ""
        self.state_step = -1

    async def save(self, step: int, kind: str) -> Awaitable[str]:
        name = checkpoint_name(self.task, self.config, step, kind)
        if kind == "sampler":
            return await self.backend.submit_save_for_sampler(name)
        return await self.backend.submit_save_state(name)

    def saved(self, step: int, kind: str, path: str) -> None:
        if kind == "sampler":
            self.path = path
        else:
            self.state_path, self.state_step = path, step
        self.obs.on_checkpoint(Checkpoint(step, kind, path))

    def start_rollout(self, sampler: Sampler, path: str, step: int) -> asyncio.Task[Rollout]:
        total = self.config.batch * self.config.group
        done = [0]

        def progress(n: int) -> None:
            done[0] += n
            self.obs.on_sampled(step, done[0], total)

        async def go() -> Rollout:
            self.obs.on_phase(step, "sampling")
            started = self.clock()
            batch = await rollout(
                self.backend.tokenizer, sampler, self.task, self.config, step, progress
            )
            return replace(batch, sampler_path=path, seconds=self.clock() - started)

        return asyncio.create_task(go())

    def start_eval(self, sampler: Sampler, path: str, step: int) -> asyncio.Task[EvalMetrics]:
        async def go() -> EvalMetrics:
            started = self.clock()
            result = await evaluate(
                self.backend.tokenizer, sampler, self.task, self.config, self.heldout
            )
            n = len(self.heldout)
            mean = sum(result.rewards_P) / n
            correct = round(result.accuracy * n)
            return EvalMetrics(
                step, result.accuracy, correct, n, mean, path, self.clock() - started
            )

        return asyncio.create_task(go())

    def eval_due(self, step: int) -> bool:
        every = self.config.eval_every
        return bool(every and self.heldout) and (step % every == 0 or step == self.config.steps)

    async def wait_or_stop(self, pending: asyncio.Task[T]) -> T | None:
        """The pending result, or None if a stop was requested first."""
        if self.stop is None:
            return await pending
        stopping = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({pending, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        return pending.result() if pending.done() else None

    async def go(self, resume: Resume | None) -> RunResult:
        config, backend = self.config, self.backend
        if resume is None:
            start, lagged = 0, ""
            first_sampler, first_state = await self.save(0, "sampler"), await self.save(0, "state")
            self.saved(0, "sampler", await first_sampler)
            self.saved(0, "state", await first_state)
        else:
            start, lagged = resume.step, resume.lagged_sampler_path
            await (await backend.submit_load_state(resume.state_path))
            self.path, self.state_path, self.state_step = (
                resume.sampler_path,
                resume.state_path,
                resume.step,
            )
        sampler = await backend.create_sampler(self.path)
        off_policy = config.max_steps_off_policy > 0
        lagging, lagging_path = sampler, self.path
        if off_policy and lagged and lagged != self.path:
            lagging, lagging_path = await backend.create_sampler(lagged), lagged
        pending = self.start_rollout(lagging, lagging_path, start + 1)
        evaluating = (
            self.start_eval(sampler, self.path, 0) if resume is None and self.eval_due(0) else None
        )
        sampler_path = self.path
        metrics: list[StepMetrics] = []
        done = start
        ended = self.clock()
        try:
            for step in range(start + 1, config.steps + 1):
                batch = await self.wait_or_stop(pending)
                if batch is None:
                    break
                last = step == config.steps
                keep_state = last or step % config.save_every == 0
                training: Awaitable[TrainResult] | None = None
                saving: Awaitable[str] | None = None
                state: Awaitable[str] | None = None
                submitted = self.clock()
                self.obs.on_phase(step, "training")
                if batch.datums_D:
                    # Back to back: the saves land after the update, in one round trip.
                    training = await backend.submit_train_step(batch.datums_D, config.lr)
                    saving = await self.save(step, "sampler")
                if keep_state:
                    state = await self.save(step, "state")
                if off_policy and not last:
                    # Sample the next step now, from the weights before this update.
                    pending = self.start_rollout(sampler, sampler_path, step + 1)
                if evaluating is not None:
                    # The previous step's evaluation, reported before this step: waited
                    # for only now, so that it never holds up this step's training.
                    self.obs.on_eval(await evaluating)
                    evaluating = None
                result = await training if training is not None else None
                trained = self.clock()
                saved = await saving if saving is not None else None
                state_saved = await state if state is not None else None
                done = step
                # The step first, its checkpoints after: a state on record always
                # comes with the record of every step it holds.
                metrics.append(self.step_metrics(step, batch, result, trained - submitted, ended))
                ended = self.clock()
                self.obs.on_step(metrics[-1])
                if saved is not None:
                    self.saved(step, "sampler", saved)
                if state_saved is not None:
                    self.saved(step, "state", state_saved)
                if saved is not None and (not last or self.eval_due(step)):
                    sampler, sampler_path = await backend.create_sampler(self.path), self.path
                if not off_policy and not last:
                    pending = self.start_rollout(sampler, sampler_path, step + 1)
                if self.eval_due(step):
                    self.obs.on_phase(step, "evaluating")
                    evaluating = self.start_eval(sampler, sampler_path, step)
                if self.stop is not None and self.stop.is_set():
                    break
            if evaluating is not None:  # the last step's, or one a stop came after
                self.obs.on_eval(await evaluating)
        finally:
            # A failure mid-run must not leave requests running.
            pending.cancel()
            if evaluating is not None:
                evaluating.cancel()
        if self.state_step != done:  # stopped between state saves: keep what was trained
            self.saved(done, "state", await (await self.save(done, "state")))
        return RunResult(metrics, self.path, self.state_path, done, done < config.steps)

    def step_metrics(
        self, step: int, batch: Rollout, result: TrainResult | None, training: float, ended: float
    ) -> StepMetrics:
        rewards = [r for rewards_G in batch.rewards_P_G for r in rewards_G]
        return StepMetrics(
            step=step,
            accuracy=batch.accuracy,
            mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            datums=len(batch.datums_D),
            groups=len(batch.rewards_P_G),
            group_size=self.config.group,
            constant_groups=batch.constant_groups,
            sampled_tokens=sum(len(c.tokens) for cs in batch.completions_P_G for c in cs),
            loss=result.loss if result is not None else None,
            backend_metrics=dict(result.metrics) if result is not None else {},
            seconds=self.clock() - ended,
            sampling_seconds=batch.seconds,
            training_seconds=training if result is not None else 0.0,
            sampler_path=batch.sampler_path,
        )
