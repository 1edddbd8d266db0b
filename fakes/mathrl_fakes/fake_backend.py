"""FakeBackend: an in-memory `Backend` the GRPO loop cannot tell from MinT.

It is the contract, and only the contract: it records every call, refuses
misuse the way the service does, keeps training-side calls in submission
order, writes checkpoints to real files, pins each sampler to the weights it
was opened on, and has knobs for simulated latency and injected transient
failures. What the model computes (sampling, logprobs, the loss and Adam) is
the `Policy` it serves, which knows nothing of calls, files or faults.

The policy that learns is `mathrl_fakes.model.FakeModel` (a tiny policy with
exact logprobs, taught each prompt's reference through the task's methods:
`mathrl_fakes.references`); `for_run` and `for_problems` pair the two.
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
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mathrl.adapter import Adapter
from mathrl.backend import (
    BackendError,
    Completion,
    Datum,
    SampleParams,
    Tokenizer,
    TrainResult,
    check_train_step,
)
from mathrl.losses import IMPORTANCE_SAMPLING, Loss
from mathrl.resolved import Task, as_task
from mathrl_fakes.model import FakeModel
from mathrl_fakes.references import RunProblems, StepByStep, references_for
from mathrl_fakes.sampler import FakeSampler
from mathrl_fakes.service import ServiceCalls

T = TypeVar("T")
P = TypeVar("P")

CHECKPOINT_FORMAT = "mathrl-fake-checkpoint/2"


class Policy(Protocol):
    """The model a `FakeBackend` serves: the computations a training service runs, with no
    I/O, no clock and no checks of the caller (the backend does those).

    Weights are a list of floats the backend saves and pins samplers to; a
    state is weights and optimizer as JSON-ready data.
    """

    @property
    def tokenizer(self) -> Tokenizer: ...

    theta: list[float]
    """The current weights."""

    def sample(
        self,
        theta: Sequence[float],
        prompt_T: Sequence[int],
        key: str,
        num_samples: int,
        params: SampleParams,
    ) -> list[Completion]:
        """`num_samples` completions under `theta`, their randomness keyed to `key`."""
        ...

    def sequence_logprobs(self, theta: Sequence[float], tokens_T: Sequence[int]) -> list[float]:
        """Under `theta`, the logprob of each token after the ones before it (not the first)."""
        ...

    def forward_backward(
        self, datums_D: Sequence[Datum], loss_fn: Loss = IMPORTANCE_SAMPLING
    ) -> tuple[dict[str, float], list[list[float]]]:
        """Accumulate the loss's gradient; the metrics the service reports (`loss:sum`), and
        the learner's logprob of each datum's target tokens."""
        ...

    def optim_step(self, lr: float) -> None:
        """One Adam step on the accumulated gradient (BackendError without one)."""
        ...

    def state(self) -> dict[str, Any]:
        """Weights and optimizer, JSON-ready, with `theta` the weights."""
        ...

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore a `state()`; KeyError, TypeError or ValueError if it is not one."""
        ...

    def parse_weights(self, values: Any) -> list[float]:
        """`values` (a saved `theta`) as weights; TypeError or ValueError if they are not."""
        ...

    def check_state(self, state: Mapping[str, Any]) -> None:
        """KeyError, TypeError or ValueError unless `state` would load."""
        ...


class FakeBackend(ServiceCalls):
    """The in-memory backend, serving `model`. See the module docstring for what it models.

    Args:
        model: the policy it serves (`FakeModel`, built by `for_run` or `for_problems`).
        task_name: written into checkpoints, so `sample` can refuse another
            task's weights.
        seed: keys every random draw, injected faults included.
        latency: simulated seconds per round trip.
        fault_rate: the share of calls that fail transiently.
        checkpoint_dir: where checkpoints are written; `mathrl-fake` under the
            system's temp folder by default.
    """

    def __init__(
        self,
        model: Policy,
        *,
        task_name: str | None = None,
        seed: int = 0,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        checkpoint_dir: Path | None = None,
    ) -> None:
        super().__init__(seed, latency, fault_rate)
        self.task_name = task_name
        self.checkpoint_dir = checkpoint_dir or Path(tempfile.gettempdir()) / "mathrl-fake"
        self.model = model
        self._saved: dict[str, tuple[str, tuple[float, ...]]] = {}
        self._states: dict[str, dict[str, Any]] = {}

    @classmethod
    def for_problems(
        cls, task: Adapter[P] | Task[P], problems: Sequence[P], **knobs: Any
    ) -> FakeBackend:
        """A fake whose policy learns the reference of each of `problems`, through the task's
        methods (`knobs`: the backend's, and `FakeModel`'s `unknown_prompts` and `more`)."""
        learning = {k: knobs.pop(k) for k in ("unknown_prompts", "more") if k in knobs}
        model = FakeModel(references_for(task, problems), **learning)
        return cls(model, task_name=as_task(task).name, **knobs)

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
    def tokenizer(self) -> Tokenizer:
        return self.model.tokenizer

    @property
    def theta(self) -> list[float]:
        """The current weights (the model's parameters)."""
        return self.model.theta

    # -- the Backend protocol ----------------------------------------------

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        # Before anything is submitted; the fake's tokenizer lists every id its model samples.
        check_train_step(datums_D, learning_rate, self.tokenizer.vocab_size)
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
            forwarded, stepped = await asyncio.gather(forward, step, return_exceptions=True)
            for outcome in (forwarded, stepped):
                if isinstance(outcome, BaseException):
                    raise outcome
            assert isinstance(forwarded, tuple)
            metrics, learner_D = forwarded
            learner = tuple(tuple(lp_T) for lp_T in learner_D)
            return TrainResult(metrics["loss:sum"], metrics, learner)

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

    def check_checkpoint(self, path: str, kind: str) -> None:
        """BackendError (naming the file and why) unless `path` loads as a `kind` checkpoint
        ("sampler" or "state") as `create_sampler` or `submit_load_state` would load it:
        for a run about to rely on files written by another process, or long ago."""
        payload = self.read(path, kind)
        try:
            if kind == "state":
                self.model.check_state(payload)
            else:
                self.model.parse_weights(payload.get("theta"))
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
            theta = self.model.parse_weights(payload.get("theta"))
        except (TypeError, ValueError) as exc:
            raise BackendError(f"{path!r} holds no usable weights ({exc})") from None
        return FakeSampler(self, str(payload.get("name")), theta)


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ValueError(f"checkpoint name must be a plain file name (got {name!r})")
