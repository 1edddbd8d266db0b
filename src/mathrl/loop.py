"""The GRPO loop: `run_grpo` runs `mathrl.step`'s two halves, scheduled.

Read `mathrl.step.grpo_step` first: it is the algorithm, one plain on-policy
step, `sample_and_score` then `train_and_save`. `_Run` calls those same two
halves (`_start_rollout`, `_submit_update`); nothing here changes what a step
computes, and nothing here prints (the loop reports to an `Observer`).
Around the step it adds, each in one place of `_Run`:

- pipelining: `train_and_save` submits the training calls and the save back
  to back, and they are awaited together (`_finish_update`), one round trip;
- the off-policy lag (`max_steps_off_policy=1`, in `train`): step k+1 is
  sampled from the weights before step k's update, from the moment they
  exist, so it samples while step k scores and trains; each datum carries
  the logprobs of the sampler that drew it, so the importance-sampling loss
  corrects for the lag;
- evaluation (`_start_eval`, `_report_eval`): greedy samples of the held-out
  problems (and with `eval_k`, max(eval_k) more of each, for pass@k) from the
  sampler the next step uses anyway, alongside that step's requests: no save
  and no extra round trip, except once after the last step;
- the save cadence (`_submit_update`): the full training state every
  `save_every` steps, after the last step, and when the run stops early;
- a note, once (`_note_temperature`): a loss that clips, at a sampling
  temperature other than 1, clips tokens the policy just sampled, and the
  first step trained says how many;
- stopping and resuming (`_wait_or_stop`, `_begin`): `stop` ends the run after
  the step in progress if its training was submitted, before it otherwise;
  `resume` continues from a saved state. No step is ever applied twice, and
  a resumed run draws the same problems and request seeds as an
  uninterrupted one. A failure (`TaskError`, `BackendError`) ends the run the
  same way, with a state saved at the last step trained if the service lets it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from mathrl.adapter import Adapter
from mathrl.backend import Backend, BackendError, Sampler, TrainResult
from mathrl.checkpoints import Kind, Resume, checkpoint_name
from mathrl.config import TrainConfig
from mathrl.evaluation import evaluate, evaluation_set
from mathrl.report import Checkpoint, EvalMetrics, Observer, RunResult, StepMetrics, TemperedRatio
from mathrl.resolved import Task, as_task
from mathrl.rewards import TaskError
from mathrl.rollout import Rollout, logged_groups, step_metrics
from mathrl.step import Update, sample_and_score, train_and_save
from mathrl.workers import Workers, borrowed

P = TypeVar("P")
T = TypeVar("T")
LAST_SAVE_SECONDS = 120.0  # how long a failed run may spend saving what it trained


async def run_grpo_async(
    backend: Backend,
    adapter: Adapter[P] | Task[P],
    config: TrainConfig,
    observer: Observer | None = None,
    *,
    resume: Resume | None = None,
    stop: asyncio.Event | None = None,
    workers: Workers | None = None,
) -> RunResult:
    """Run steps `resume.step + 1` (or 1) to `config.steps`; return what they did.

    The task is prepared first (`Adapter`'s `prepare`, on the backend's tokenizer), so a
    data task's references are checked against the token budget; `OptionError` says what
    cannot be used. `workers` runs the task's rewards and environment steps (default: `Workers()`).
    """
    task, observer = as_task(adapter), observer or Observer()
    # The task's data, checked on the model's tokenizer before anything is drawn (`prepare`).
    task.prepare(backend.tokenizer, config.max_tokens or task.max_tokens)
    with borrowed(workers) as pool:
        return await _Run(backend, task, config, observer, stop, pool).train(resume)


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
    """One step's submitted training-side calls, not yet awaited: `train_and_save`'s, and
    the state save that falls on this step (the save cadence)."""

    step: Update
    state: Awaitable[str] | None


class _Run(Generic[P]):
    """One run's state between steps: `grpo_step`, pipelined and made to last."""

    def __init__(
        self,
        backend: Backend,
        task: Task[P],
        config: TrainConfig,
        observer: Observer,
        stop: asyncio.Event | None,
        workers: Workers,
    ) -> None:
        self.backend, self.task, self.config, self.obs = backend, task, config, observer
        self.stop, self.workers = stop, workers
        self.clock = asyncio.get_running_loop().time
        self.off_policy = config.max_steps_off_policy > 0
        self.heldout: list[P] = []
        if config.eval_every:
            self.heldout, warnings = evaluation_set(task, config)
            for warning in warnings:
                observer.on_warning(warning)
        self.path, self.state_path, self.state_step = "", "", -1  # the latest checkpoints
        self.sampler: Sampler | None = None  # for self.path's weights, once created
        self.base: Sampler | None = None  # the step-0 weights', for the KL penalty
        self.sampler_path = ""
        self.rollouts: dict[int, asyncio.Task[Rollout]] = {}  # started, by step
        self.evaluating: asyncio.Task[EvalMetrics] | None = None
        self.evaluations: list[EvalMetrics] = []
        self.noted = False  # the note on a clipped loss at a temperature other than 1, given

    async def train(self, resume: Resume | None) -> RunResult:
        config = self.config
        done = start = await self._begin(resume)
        ended, metrics = self.clock(), list[StepMetrics]()
        in_flight: tuple[int, Rollout, _Update] | None = None
        try:
            for step in range(start + 1, config.steps + 1):
                batch = await self._wait_or_stop(self.rollouts[step])
                if batch is None:
                    break
                del self.rollouts[step]
                last = step == config.steps
                update = await self._submit_update(step, batch, last)
                in_flight = step, batch, update
                # The previous step's evaluation: waited for only now, never holding up training.
                await self._report_eval()
                metrics.append(await self._finish_update(step, batch, update, ended))
                ended, done, in_flight = self.clock(), step, None
                if update.step.saving is not None and (not last or self._eval_due(step)):
                    self.sampler = await self.backend.create_sampler(self.path)
                    self.sampler_path = self.path
                # On-policy, the next step samples from these weights; off-policy, the one after.
                self._start_rollout(step + 1 + self.off_policy)
                if self._eval_due(step):
                    self._start_eval(step)
                if self.stop is not None and self.stop.is_set():
                    break
            await self._report_eval()  # the last step's, or one a stop came after
        except (TaskError, BackendError):
            # Keep what was trained, if the service lets us: the update, then a state.
            with contextlib.suppress(BackendError, TimeoutError):
                async with asyncio.timeout(LAST_SAVE_SECONDS):  # a dead service: give up
                    if in_flight is not None:
                        metrics.append(await self._finish_update(*in_flight, ended))
                        done = in_flight[0]
                    if self.state_step != done:
                        self._saved(done, "state", await (await self._save(done, "state")))
            raise
        finally:
            # A failure mid-run must not leave requests running.
            for started in [*self.rollouts.values(), *filter(None, [self.evaluating])]:
                if not started.cancel() and not started.cancelled():
                    started.exception()  # failed unawaited: it fails with the run
        if self.state_step != done:  # stopped between state saves: keep what was trained
            self._saved(done, "state", await (await self._save(done, "state")))
        stopped = done < config.steps
        return RunResult(metrics, self.path, self.state_path, done, stopped, self.evaluations)

    # -- starting: fresh, or from a saved state -----------------------------------------

    async def _begin(self, resume: Resume | None) -> int:
        """Step 0's saves (or the resumed state); the first step's rollout (two off-policy)."""
        if resume is None:
            start, lagged = 0, ""
            first_sampler = await self._save(0, "sampler")
            first_state = await self._save(0, "state")  # submitted back to back
            self._saved(0, "sampler", await first_sampler)
            self._saved(0, "state", await first_state)
        else:
            start, lagged = resume.step, resume.lagged_sampler_path
            await (await self.backend.submit_load_state(resume.state_path))
            self.path = resume.sampler_path
            self.state_path, self.state_step = resume.state_path, resume.step
        self.sampler, self.sampler_path = await self.backend.create_sampler(self.path), self.path
        if self.config.kl_coef:  # the base model: the step-0 sampler (a LoRA starts as it)
            if resume is None:
                self.base = self.sampler
            elif resume.base_sampler_path:
                self.base = await self.backend.create_sampler(resume.base_sampler_path)
            else:
                raise ValueError("kl_coef > 0 needs Resume.base_sampler_path, the step-0 sampler")
        if self.off_policy and lagged and lagged != self.path:
            # Off-policy, the first resumed step samples from the weights before the state.
            self._start_rollout(start + 1, await self.backend.create_sampler(lagged), lagged)
        self._start_rollout(start + 1)
        if self.off_policy:
            self._start_rollout(start + 2)  # from the weights before step start + 1's update
        if (resume is None or resume.evaluate_first) and self._eval_due(start):
            self._start_eval(start)  # step 0's; or the resumed step's, lost to a failure
        return start

    # -- one step: sample, then the update -------------------------------------------------

    def _start_rollout(self, step: int, sampler: Sampler | None = None, path: str = "") -> None:
        """Sample and score step `step` (from the current sampler unless given one), unless
        it is past the last step or already started."""
        if step > self.config.steps or step in self.rollouts:
            return
        sampler, path = (sampler, path) if sampler is not None else self._current()
        total, done = self.config.batch * self.config.group, [0]

        def progress(n: int) -> None:
            done[0] += n  # with fill_batch, more than the first round's total: a full bar
            self.obs.on_sampled(step, min(done[0], total), total)

        async def go() -> Rollout:
            self.obs.on_phase(step, "sampling")
            started = self.clock()
            given = (self.task, self.config, step, self.workers, progress)
            batch = await sample_and_score(self.backend.tokenizer, sampler, *given)
            return replace(batch, sampler_path=path, seconds=self.clock() - started)

        self.rollouts[step] = asyncio.create_task(go())

    async def _submit_update(self, step: int, batch: Rollout, last: bool) -> _Update:
        """Submit the step's training and its sampler save, and (on cadence) a state save
        behind them: one round trip for all."""
        self.obs.on_phase(step, "training")
        policy, _ = self._current()  # the weights being trained: the last update's
        given = (self.task, self.config, step, batch.datums_D, self.base, policy)
        update = await train_and_save(self.backend, *given)
        state = None
        if last or step % self.config.save_every == 0:
            state = await self._save(step, "state")
        return _Update(update, state)

    async def _finish_update(
        self, step: int, batch: Rollout, update: _Update, ended: float
    ) -> StepMetrics:
        """Await the update and its saves; report the step, then its checkpoints."""
        submitted = update.step
        result = await submitted.training if submitted.training is not None else None
        trained = self.clock()
        saved = await submitted.saving if submitted.saving is not None else None
        state = await update.state if update.state is not None else None
        # The step first, its checkpoints after: a state on record comes with its steps' records.
        metrics = step_metrics(
            self.config, step, batch, result, trained - submitted.submitted, submitted.kl
        )
        metrics = replace(metrics, seconds=self.clock() - ended)
        self.obs.on_step(metrics)
        self.obs.on_samples(logged_groups(step, batch))
        if result is not None:
            self._note_temperature(step, result)
        if saved is not None:
            self._saved(step, "sampler", saved)
        if state is not None:
            self._saved(step, "state", state)
        return metrics

    def _note_temperature(self, step: int, result: TrainResult) -> None:
        """Once a run: a loss that clips, at a sampling temperature other than 1, clips on-policy
        tokens too; how much, at the first step trained."""
        loss, temperature = self.config.loss_fn, self.config.temperature
        if loss.clips and temperature != 1.0 and not self.noted:
            self.noted = True
            clipped = result.metrics.get("clipped:frac")
            self.obs.on_tempered_ratio(TemperedRatio(step, loss, temperature, clipped))

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
        """Evaluate the weights after `step` on the held-out set, in the background: greedily,
        and with `eval_k` from max(eval_k) samples of each problem too."""
        sampler, path = self._current()
        if step:
            self.obs.on_phase(step, "evaluating")
        ks = self.config.eval_k

        async def go() -> EvalMetrics:
            started = self.clock()
            given = (self.task, self.config, self.heldout)
            result = await evaluate(
                self.backend.tokenizer, sampler, *given,
                workers=self.workers, samples=max(ks, default=0),
            )  # fmt: skip
            return result.metrics(step, path, self.clock() - started, ks)

        self.evaluating = asyncio.create_task(go())

    async def _report_eval(self) -> None:
        if self.evaluating is not None:
            self.evaluations.append(await self.evaluating)
            self.obs.on_eval(self.evaluations[-1])
            self.evaluating = None

    async def _wait_or_stop(self, pending: asyncio.Task[T]) -> T | None:
        """The pending result, or None if a stop was requested first."""
        if self.stop is None:
            return await pending
        stopping = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({pending, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        return pending.result() if pending.done() else None
