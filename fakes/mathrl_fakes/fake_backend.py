"""FakeBackend: an in-memory `Backend` the GRPO loop cannot tell from MinT.

It is deterministic (every completion's randomness is keyed to the backend's
seed, the sampler's checkpoint, the request's seed and the sample's index),
it trains for real (`FakeModel`: the importance-sampling loss, then Adam), it
writes checkpoints to real files, and it refuses misuse the way the service
does. It also records every call, and has knobs for simulated latency and
injected transient failures.

Latency, ordering and faults are `mathrl_fakes.service.ServiceCalls`'s: the
training-side calls (forward_backward, optim_step, the two saves and
load_state) complete in submission order, creating a sampler costs one round
trip, and an injected training-side fault may strike after the call took
effect.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mathrl.adapter import Adapter
from mathrl.backend import (
    BackendError,
    Datum,
    TrainResult,
    check_train_step,
)
from mathrl.losses import IMPORTANCE_SAMPLING, Loss
from mathrl.resolved import Task, as_task
from mathrl_fakes.model import FakeModel, UnknownPrompts, parse_state, parse_weights
from mathrl_fakes.policy import VOCAB_SIZE, ByteTokenizer
from mathrl_fakes.references import PromptKey, Reference, RunProblems, StepByStep, references_for
from mathrl_fakes.sampler import FakeSampler
from mathrl_fakes.service import ServiceCalls

T = TypeVar("T")
P = TypeVar("P")

CHECKPOINT_FORMAT = "mathrl-fake-checkpoint/2"


class FakeBackend(ServiceCalls):
    """The in-memory backend. See the module docstring for what it models.

    Args:
        references: prompt text -> what the policy should learn to write.
            Build it from a task with `for_run` or `for_problems`.
        more: where to get more references when a prompt is missing, given the
            sample requests served so far (see `StepByStep`).
        task_name: written into checkpoints, so `sample` can refuse another
            task's weights.
        seed: keys every random draw, injected faults included.
        latency: simulated seconds per round trip.
        fault_rate: the share of calls that fail transiently.
        checkpoint_dir: where checkpoints are written; `mathrl-fake` under the
            system's temp folder by default.
        unknown_prompts: "error" (a prompt without a reference raises
            BackendError naming it) or "uniform" (it gets a uniform policy).
    """

    def __init__(
        self,
        references: Mapping[PromptKey, Reference],
        *,
        task_name: str | None = None,
        seed: int = 0,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        checkpoint_dir: Path | None = None,
        unknown_prompts: UnknownPrompts = "error",
        more: Callable[[int], Mapping[PromptKey, Reference] | None] | None = None,
    ) -> None:
        super().__init__(seed, latency, fault_rate)
        self.task_name = task_name
        self.checkpoint_dir = checkpoint_dir or Path(tempfile.gettempdir()) / "mathrl-fake"
        self.model = FakeModel(references, unknown_prompts, more)
        self._saved: dict[str, tuple[str, tuple[float, ...]]] = {}
        self._states: dict[str, dict[str, Any]] = {}

    @classmethod
    def for_problems(
        cls, task: Adapter[P] | Task[P], problems: Sequence[P], **knobs: Any
    ) -> FakeBackend:
        """A fake that knows the reference of each of `problems`, through the task's methods."""
        return cls(references_for(task, problems), task_name=as_task(task).name, **knobs)

    @classmethod
    def for_run(cls, task: Adapter[P] | Task[P], run: RunProblems[P], **knobs: Any) -> FakeBackend:
        """A fake for every problem a run draws, held-out ones included, as it is told them
        (`mathrl.run_problems(task, config)`).

        The held-out problems' references are drawn now; each training step's,
        as the run reaches it (from `run.first_step`, for a resumed run).
        """
        knobs.setdefault("seed", run.seed)
        resolved = as_task(task)
        more = StepByStep(resolved, run)
        return cls.for_problems(resolved, run.heldout(), more=more, **knobs)

    @property
    def tokenizer(self) -> ByteTokenizer:
        return self.model.tokenizer

    @property
    def theta(self) -> list[float]:
        """The current weights (the model's parameters)."""
        return self.model.theta

    # -- the Backend protocol ----------------------------------------------

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        check_train_step(datums_D, learning_rate, VOCAB_SIZE)  # before anything is submitted
        datums = list(datums_D)
        # One call of the protocol, so one draw of the fault rate, landing on either half.
        fault, u_half = self._draw(len(self.log.calls), training=True)
        forward = self.training_call(
            "forward_backward",
            lambda: self.model.forward_backward(datums, loss),
            size=len(datums),
            drawn=fault if u_half < 0.5 else "",
        )
        step = self.training_call(
            "optim_step",
            lambda: self.model.optim_step(learning_rate),
            drawn=fault if u_half >= 0.5 else "",
        )

        async def both() -> TrainResult:
            # Wait on both, so a failure of one never leaves the other unobserved.
            metrics, stepped = await asyncio.gather(forward, step, return_exceptions=True)
            for outcome in (metrics, stepped):
                if isinstance(outcome, BaseException):
                    raise outcome
            assert isinstance(metrics, dict)
            return TrainResult(loss=metrics["loss:sum"], metrics=metrics)

        return asyncio.ensure_future(both())

    async def submit_save_for_sampler(self, name: str) -> Awaitable[str]:
        _check_name(name)
        return self.training_call("save_weights_for_sampler", lambda: self.save(name, "sampler"))

    async def submit_save_state(self, name: str) -> Awaitable[str]:
        _check_name(name)
        return self.training_call("save_state", lambda: self.save(name, "state"))

    async def submit_load_state(self, path: str) -> Awaitable[None]:
        return self.training_call("load_state", lambda: self.restore(path))

    async def create_sampler(self, path: str) -> FakeSampler:
        return await self.call("create_sampler", lambda: self.open_sampler(path))

    # -- checkpoint files ---------------------------------------------------

    def save(self, name: str, kind: str) -> str:
        """Write the weights ("sampler") or weights and optimizer ("state"); return the path."""
        path = self.checkpoint_dir / f"{name}.json"
        state = self.model.state()
        payload = {
            "format": CHECKPOINT_FORMAT,
            "kind": kind,
            "name": name,
            "task": self.task_name,
            **(state if kind == "state" else {"theta": state["theta"]}),
        }
        # Written whole or not at all: another process may be reading this path.
        partial = path.with_name(f".{path.name}.{os.getpid()}-{id(self)}.tmp")
        try:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(payload))
            partial.replace(path)
        except OSError as exc:
            raise BackendError(
                f"cannot write the fake checkpoint {path} ({exc.strerror or exc}): the fake "
                "needs a folder it can write",
                settings=("fake_checkpoints",),
            ) from None
        if kind == "sampler":
            self._saved[str(path)] = (name, tuple(self.model.theta))
        else:
            self._states[str(path)] = state
        return str(path)

    @staticmethod
    def read(path: str, kind: str) -> dict[str, Any]:
        """A checkpoint file's contents; BackendError unless it is a fake `kind` checkpoint."""
        try:
            payload = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or f"not JSON: {exc}"
            raise BackendError(f"cannot load the fake checkpoint {path!r} ({reason})") from None
        if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
            raise BackendError(f"{path!r} is not a {CHECKPOINT_FORMAT} file")
        if payload.get("kind") != kind:
            raise BackendError(f"{path!r} is a {payload.get('kind')} checkpoint, not a {kind} one")
        return payload

    @staticmethod
    def check_checkpoint(path: str, kind: str) -> None:
        """BackendError (naming the file and why) unless `path` loads as a `kind` checkpoint
        ("sampler" or "state") as `create_sampler` or `submit_load_state` would load it:
        for a run about to rely on files written by another process, or long ago."""
        payload = FakeBackend.read(path, kind)
        try:
            if kind == "state":
                parse_state(payload)
            else:
                parse_weights(payload.get("theta"))
        except (KeyError, TypeError, ValueError) as exc:
            what = "training state" if kind == "state" else "weights"
            raise BackendError(f"{path!r} holds no usable {what} ({exc})") from None

    def restore(self, path: str) -> None:
        """Load the weights and optimizer state saved at `path` into the model."""
        # As for samplers: this run's own states come from memory.
        state = self._states.get(path) or self.read(path, "state")
        try:
            self.model.load_state(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"{path!r} holds no usable training state ({exc})") from None

    def open_sampler(self, path: str) -> FakeSampler:
        """A sampler for a sampler checkpoint written by this backend or another process."""
        # Our own checkpoints come from memory, so another run reusing the file
        # name cannot change what this run samples from.
        if path in self._saved:
            return FakeSampler(self, *self._saved[path])
        payload = self.read(path, "sampler")
        try:
            theta = parse_weights(payload.get("theta"))
        except (TypeError, ValueError) as exc:
            raise BackendError(f"{path!r} holds no usable weights ({exc})") from None
        return FakeSampler(self, str(payload.get("name")), theta)


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ValueError(f"checkpoint name must be a plain file name (got {name!r})")
