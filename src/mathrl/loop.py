"""The GRPO loop: the algorithm in `grpo_step`, and `run_grpo`, which schedules it.

Read `grpo_step` first. It is one plain on-policy GRPO step, written out top
to bottom: problems -> prompts -> a group of samples per problem -> rewards ->
advantages -> datums -> train -> save. Nothing else in this module changes
what a step computes.

`run_grpo` runs those steps for real. Around the same step it adds, each in
one place of `_Run`:

- pipelining (`_submit_update`): the training calls and the saves are
  submitted back to back and awaited together, one round trip;
- the off-policy lag (`max_steps_off_policy=1`, in `_train`): step k+1 is
  sampled from the weights before step k's update while step k trains; each
  datum carries the logprobs of the sampler that drew it, so the
  importance-sampling loss corrects for the lag;
- evaluation (`_start_eval`, `_report_eval`): greedy samples of the held-out
  problems from the sampler the next step uses anyway, alongside that step's
  requests: no save and no extra round trip, except once after the last step;
- the save cadence (`_submit_update`): the full training state every
  `save_every` steps, after the last step, and when the run stops early;
- stopping and resuming (`_wait_or_stop`, `_begin`): `stop` ends the run after
  the step in progress if its training was submitted, before it otherwise;
  `resume` continues from a saved state. No step is ever applied twice, and
  a resumed run draws the same problems and request seeds as an
  uninterrupted one.

The loop does no printing and no file I/O; it reports to an `Observer`.
`tests/reference_loop.py` holds the same algorithm as the seed writes it,
every call awaited in turn; the tests require `grpo_step` and `run_grpo` to
train on exactly its datums.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from mathrl.adapter import Adapter, Task, as_task
from mathrl.backend import Backend, Sampler, TrainResult
from mathrl.checkpoints import Kind, checkpoint_name
from mathrl.config import TrainConfig
from mathrl.grpo import Datum, group_advantages
from mathrl.report import Checkpoint, EvalMetrics, Observer, StepMetrics
from mathrl.rollout import (
    Rollout,
    datums_of,
    evaluate,
    evaluation_set,
    rewards_of,
    rollout,
    sample_groups,
)

P = TypeVar("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What `grpo_step` did: the datums it trained on, what training said, the new weights."""

    rewards_P_G: list[list[float]]
    datums_D: list[Datum]
    result: TrainResult | None
    """None when every group was constant: nothing was trained."""
    sampler_path: str | None
    """The saved weights after the update (None when nothing was trained)."""


async def grpo_step(
    backend: Backend, sampler: Sampler, task: Task[P], config: TrainConfig, step: int
) -> StepOutcome:
    """One on-policy GRPO step from `sampler`'s weights. This function is the algorithm.

    Shape suffixes: _P a problem, _G a member of its group, _T a token, _D a datum.
    """
    tokenizer, adapter = backend.tokenizer, task.adapter
    # 1. This step's problems, and their prompts as tokens.
    problems_P = adapter.build_dataset(config.seed, step, config.batch)
    prompts_P_T = [tokenizer.encode(adapter.make_prompt(p)) for p in problems_P]
    # 2. A group of `config.group` completions per problem, every request in flight at once.
    completions_P_G = await sample_groups(sampler, task, config, step, prompts_P_T)
    # 3. Each completion's reward, and its advantage: the reward minus its group's mean.
    rewards_P_G = rewards_of(task, tokenizer.decode, problems_P, completions_P_G)
    advantages_P_G = [group_advantages(rewards_G) for rewards_G in rewards_P_G]
    # 4. A datum per completion (prompt tokens weigh 0), dropping groups of equal rewards.
    datums_D = datums_of(prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G)
    if not datums_D:
        return StepOutcome(rewards_P_G, datums_D, None, None)
    # 5. forward_backward + optim_step, then save the new weights for the next step's
    #    sampler: submitted back to back, awaited together.
    training = await backend.submit_train_step(datums_D, config.lr)
    saving = await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
    return StepOutcome(rewards_P_G, datums_D, await training, await saving)


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
    return await _Run(backend, task, config, observer or Observer(), stop).train(resume)


def run_grpo(
    backend: Backend,
    adapter: Adapter[P] | Task[P],
    config: TrainConfig,
    observer: Observer | None = None,
) -> RunResult:
    """Synchronous entry point: `asyncio.run(run_grpo_async(...))`."""
    return asyncio.run(run_grpo_async(backend, adapter, config, observer))


@dataclass(frozen=True, slots=True)
class _Update:
    """One step's submitted training-side calls, not yet awaited."""

    training: Awaitable[TrainResult] | None
    sampler: Awaitable[str] | None
    state: Awaitable[str] | None
    submitted: float


class _Run(Generic[P]):
    """One run's state between steps: `grpo_step`, pipelined and made to last."""

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
        self.off_policy = config.max_steps_off_policy > 0
        self.heldout: list[P] = []
        if config.eval_every:
            self.heldout, left_out = evaluation_set(task, config)
            if left_out:
                observer.on_warning(
                    f"{left_out} of {config.eval_problems} held-out problems of task "
                    f"{task.name!r} are also training problems of this run and were left out "
                    "of evaluation; declare heldout_dataset on the task to avoid this"
                )
        self.path = ""  # the latest sampler checkpoint
        self.state_path = ""
        self.state_step = -1
        self.sampler: Sampler | None = None  # for self.path's weights, once created
        self.sampler_path = ""
        self.evaluating: asyncio.Task[EvalMetrics] | None = None

    async def train(self, resume: Resume | None) -> RunResult:
        config = self.config
        start, first = await self._begin(resume)
        pending = first
        done = start
        metrics: list[StepMetrics] = []
        ended = self.clock()
        try:
            for step in range(start + 1, config.steps + 1):
                batch = await self._wait_or_stop(pending)
                if batch is None:
                    break
                last = step == config.steps
                update = await self._submit_update(step, batch, last)
                if self.off_policy and not last:
                    # Sample the next step now, from the weights before this update.
                    pending = self._start_rollout(step + 1)
                # The previous step's evaluation, reported before this step: waited for
                # only now, so that it never holds up this step's training.
                await self._report_eval()
                metrics.append(await self._finish_update(step, batch, update, ended))
                ended, done = self.clock(), step
                if update.sampler is not None and (not last or self._eval_due(step)):
                    self.sampler = await self.backend.create_sampler(self.path)
                    self.sampler_path = self.path
                if not self.off_policy and not last:
                    pending = self._start_rollout(step + 1)
                if self._eval_due(step):
                    self._start_eval(step)
                if self.stop is not None and self.stop.is_set():
                    break
            await self._report_eval()  # the last step's, or one a stop came after
        finally:
            # A failure mid-run must not leave requests running.
            pending.cancel()
            if self.evaluating is not None:
                self.evaluating.cancel()
        if self.state_step != done:  # stopped between state saves: keep what was trained
            self._saved(done, "state", await (await self._save(done, "state")))
        return RunResult(metrics, self.path, self.state_path, done, done < config.steps)

    # -- starting: fresh, or from a saved state -----------------------------------------

    async def _begin(self, resume: Resume | None) -> tuple[int, asyncio.Task[Rollout]]:
        """Step 0's saves (or the resumed state); the first step's rollout, started."""
        if resume is None:
            start, lagged = 0, ""
            first_sampler, first_state = (
                await self._save(0, "sampler"),
                await self._save(0, "state"),
            )
            self._saved(0, "sampler", await first_sampler)
            self._saved(0, "state", await first_state)
        else:
            start, lagged = resume.step, resume.lagged_sampler_path
            await (await self.backend.submit_load_state(resume.state_path))
            self.path, self.state_path, self.state_step = (
                resume.sampler_path,
                resume.state_path,
                resume.step,
            )
        self.sampler, self.sampler_path = await self.backend.create_sampler(self.path), self.path
        if self.off_policy and lagged and lagged != self.path:
            # Off-policy, the first resumed step samples from the weights before the state.
            first = self._start_rollout(
                start + 1, await self.backend.create_sampler(lagged), lagged
            )
        else:
            first = self._start_rollout(start + 1)
        if resume is None and self._eval_due(0):
            self._start_eval(0)
        return start, first

    # -- one step: sample, then the update -------------------------------------------------

    def _start_rollout(
        self, step: int, sampler: Sampler | None = None, path: str = ""
    ) -> asyncio.Task[Rollout]:
        """Sample and score step `step` (from the current sampler unless given one)."""
        sampler, path = (sampler, path) if sampler is not None else self._current()
        total, done = self.config.batch * self.config.group, [0]

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

    async def _submit_update(self, step: int, batch: Rollout, last: bool) -> _Update:
        """Submit the step's training, its sampler save and (on cadence) a state save."""
        self.obs.on_phase(step, "training")
        submitted = self.clock()
        training = sampler = state = None
        if batch.datums_D:
            # Back to back: the saves land after the update, in one round trip.
            training = await self.backend.submit_train_step(batch.datums_D, self.config.lr)
            sampler = await self._save(step, "sampler")
        if last or step % self.config.save_every == 0:
            state = await self._save(step, "state")
        return _Update(training, sampler, state, submitted)

    async def _finish_update(
        self, step: int, batch: Rollout, update: _Update, ended: float
    ) -> StepMetrics:
        """Await the update and its saves; report the step, then its checkpoints."""
        result = await update.training if update.training is not None else None
        trained = self.clock()
        saved = await update.sampler if update.sampler is not None else None
        state = await update.state if update.state is not None else None
        # The step first, its checkpoints after: a state on record always comes with
        # the record of every step it holds.
        metrics = _step_metrics(self.config, step, batch, result, trained - update.submitted)
        metrics = replace(metrics, seconds=self.clock() - ended)
        self.obs.on_step(metrics)
        if saved is not None:
            self._saved(step, "sampler", saved)
        if state is not None:
            self._saved(step, "state", state)
        return metrics

    def _current(self) -> tuple[Sampler, str]:
        assert self.sampler is not None, "_begin creates the first sampler"
        return self.sampler, self.sampler_path

    async def _save(self, step: int, kind: Kind) -> Awaitable[str]:
        name = checkpoint_name(self.task, self.config, step, kind)
        if kind == "sampler":
            return await self.backend.submit_save_for_sampler(name)
        return await self.backend.submit_save_state(name)

    def _saved(self, step: int, kind: Kind, path: str) -> None:
        if kind == "sampler":
            self.path = path
        else:
            self.state_path, self.state_step = path, step
        self.obs.on_checkpoint(Checkpoint(step, kind, path))

    # -- evaluation ------------------------------------------------------------------------

    def _eval_due(self, step: int) -> bool:
        every = self.config.eval_every
        return bool(every and self.heldout) and (step % every == 0 or step == self.config.steps)

    def _start_eval(self, step: int) -> None:
        """Evaluate the weights after `step` greedily on the held-out set, in the background."""
        sampler, path = self._current()
        if step:
            self.obs.on_phase(step, "evaluating")

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

        self.evaluating = asyncio.create_task(go())

    async def _report_eval(self) -> None:
        if self.evaluating is not None:
            self.obs.on_eval(await self.evaluating)
            self.evaluating = None

    # -- stopping ----------------------------------------------------------------------------

    async def _wait_or_stop(self, pending: asyncio.Task[T]) -> T | None:
        """The pending result, or None if a stop was requested first."""
        if self.stop is None:
            return await pending
        stopping = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({pending, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        return pending.result() if pending.done() else None


def _step_metrics(
    config: TrainConfig, step: int, batch: Rollout, result: TrainResult | None, training: float
) -> StepMetrics:
    rewards = [r for rewards_G in batch.rewards_P_G for r in rewards_G]
    return StepMetrics(
        step=step,
        accuracy=batch.accuracy,
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        datums=len(batch.datums_D),
        groups=len(batch.rewards_P_G),
        group_size=config.group,
        constant_groups=batch.constant_groups,
        sampled_tokens=sum(len(c.tokens) for cs in batch.completions_P_G for c in cs),
        loss=result.loss if result is not None else None,
        backend_metrics=dict(result.metrics) if result is not None else {},
        sampling_seconds=batch.seconds,
        training_seconds=training if result is not None else 0.0,
        sampler_path=batch.sampler_path,
    )
