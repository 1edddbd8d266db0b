"""FakeBackend: an in-memory `Backend` the GRPO loop cannot tell from MinT.

It is deterministic (every completion's randomness is keyed to the backend's
seed, the sampler's checkpoint, the prompt's index and the sample's index),
it trains for real (the importance-sampling loss of REFERENCE.md, then Adam),
it writes checkpoints to real files, and it refuses misuse the way the
service does. It also records every call, and has knobs for simulated latency
and injected transient failures.

Latency model, when `latency` > 0: every call costs one round trip from
submission to result; calls in flight overlap freely; training-side calls
(forward_backward, optim_step, save_weights_for_sampler) complete in
submission order; creating a sampler costs one round trip.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from mathrl.backend import (
    BackendError,
    Completion,
    SampleParams,
    TrainResult,
    TransientBackendError,
    check_datums,
    check_learning_rate,
    check_train_step,
)
from mathrl.grpo import Datum
from mathrl_fakes.policy import (
    VOCAB_SIZE,
    WIDTH,
    CharTokenizer,
    ReferenceTable,
    draw,
    initial_theta,
    logprob,
    step_at,
    uniforms,
)

T = TypeVar("T")

CHECKPOINT_FORMAT = "mathrl-fake-checkpoint/1"
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.95, 1e-12
"""Tinker's `AdamParams` defaults."""


@dataclass(slots=True)
class CallRecord:
    """One call the fake received, with when it was submitted and finished."""

    kind: str
    submitted: float
    finished: float = math.nan
    size: int = 0
    """Datums for forward_backward, else 0."""


@dataclass
class _Adam:
    m: list[float]
    v: list[float]
    t: int = 0


@dataclass
class CallLog:
    """What the fake has seen: every call, and the most in flight at once."""

    calls: list[CallRecord] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def kinds(self) -> list[str]:
        return [c.kind for c in self.calls]

    def count(self, kind: str) -> int:
        return sum(1 for c in self.calls if c.kind == kind)


class FakeSampler:
    """A sampler pinned to the weights of one checkpoint file."""

    def __init__(self, backend: FakeBackend, name: str, theta: Sequence[float]) -> None:
        self._backend = backend
        self._name = name
        self._theta = tuple(theta)
        self._unseeded: Counter[tuple[int, ...]] = Counter()

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1 (got {num_samples})")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 (got {params.max_tokens})")
        if not (params.temperature >= 0 and math.isfinite(params.temperature)):
            raise ValueError(f"temperature must be finite and >= 0 (got {params.temperature})")
        prompt = tuple(prompt_T)
        if params.seed is None:
            # Unseeded requests still replay exactly: key on how many times this
            # sampler has seen this prompt.
            self._unseeded[prompt] += 1
            request_key = f"unseeded-{self._unseeded[prompt]}"
        else:
            request_key = f"seed-{params.seed}"
        key = f"{self._backend.seed}/{self._name}/{request_key}/{','.join(map(str, prompt))}"
        return await self._backend._call(
            "sample", 0, lambda: self._sample_now(prompt, key, num_samples, params)
        )

    def _sample_now(
        self, prompt_T: tuple[int, ...], key: str, num_samples: int, params: SampleParams
    ) -> list[Completion]:
        _, target = self._backend._references.split(prompt_T)
        return [
            self._complete(target, uniforms(f"{key}/{g}", params.max_tokens), params)
            for g in range(num_samples)
        ]

    def _complete(
        self, target: tuple[int, ...] | None, u_T: list[float], params: SampleParams
    ) -> Completion:
        tokens: list[int] = []
        logprobs: list[float] = []
        text = ""
        for u in u_T:
            token, lp = draw(self._theta, step_at(target, tokens), u, params.temperature)
            tokens.append(token)
            logprobs.append(lp)
            if token == self._backend.tokenizer.eos_token_id:
                break
            text += chr(token)
            if any(text.endswith(s) for s in params.stop if s):
                break
        return Completion(tuple(tokens), tuple(logprobs))


class FakeBackend:
    """The in-memory backend. See the module docstring for what it models.

    Args:
        references: prompt text -> the adapter's reference completion. The
            policy uses it, and nothing else, to know what a good answer is.
        seed: keys every random draw.
        latency: simulated seconds per round trip.
        checkpoint_dir: where checkpoints are written; a folder under the
            system's temp dir by default.
    """

    def __init__(
        self,
        references: Mapping[str, str],
        *,
        seed: int = 0,
        latency: float = 0.0,
        checkpoint_dir: Path | None = None,
    ) -> None:
        self.seed = seed
        self.latency = latency
        self.checkpoint_dir = checkpoint_dir or Path(tempfile.gettempdir()) / "mathrl-fake"
        self.log = CallLog()
        self._tokenizer = CharTokenizer()
        self._references = ReferenceTable(references, self._tokenizer)
        self.theta = initial_theta()
        self._adam = _Adam([0.0] * len(self.theta), [0.0] * len(self.theta))
        self._pending_grad: list[float] | None = None
        self._failures: Counter[str] = Counter()
        self._training_tail: asyncio.Future[None] | None = None
        self._saved: dict[str, tuple[str, tuple[float, ...]]] = {}

    @property
    def tokenizer(self) -> CharTokenizer:
        return self._tokenizer

    # -- knobs -------------------------------------------------------------

    def fail_next(self, kind: str, times: int = 1) -> None:
        """Make the next `times` calls of `kind` raise TransientBackendError."""
        self._failures[kind] += times

    # -- the Backend protocol ----------------------------------------------

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float
    ) -> Awaitable[TrainResult]:
        check_train_step(datums_D, learning_rate, VOCAB_SIZE)  # before anything is submitted
        forward = await self.submit_forward_backward(datums_D)
        step = await self.submit_optim_step(learning_rate)

        async def both() -> TrainResult:
            # Wait on both, so a failure of one never leaves the other unobserved.
            loss, stepped = await asyncio.gather(forward, step, return_exceptions=True)
            for outcome in (loss, stepped):
                if isinstance(outcome, BaseException):
                    raise outcome
            assert isinstance(loss, float)
            return TrainResult(loss=loss, metrics={"loss:sum": loss})

        return asyncio.ensure_future(both())

    # -- the service's separate training calls (beyond the protocol) -----------

    async def submit_forward_backward(self, datums_D: Sequence[Datum]) -> Awaitable[float]:
        """forward_backward alone: accumulate the gradient, return the loss."""
        check_datums(datums_D, VOCAB_SIZE)
        datums = list(datums_D)
        return self._training_call(
            "forward_backward", len(datums), lambda: self._forward_backward(datums)
        )

    async def submit_optim_step(self, learning_rate: float) -> Awaitable[None]:
        """optim_step alone: one Adam step on the accumulated gradient."""
        check_learning_rate(learning_rate)
        return self._training_call(
            "optim_step", 0, lambda: self._optim_step(learning_rate), on_failure=self._drop_grad
        )

    async def submit_save_for_sampler(self, name: str) -> Awaitable[str]:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"checkpoint name must be a plain file name (got {name!r})")
        return self._training_call("save_weights_for_sampler", 0, lambda: self._save(name))

    async def create_sampler(self, path: str) -> FakeSampler:
        return await self._call("create_sampler", 0, lambda: self._load(path))

    # -- the service's side --------------------------------------------------

    def _forward_backward(self, datums: list[Datum]) -> float:
        """Importance-sampling loss and its gradient with respect to theta."""
        grad = [0.0] * len(self.theta)
        loss = 0.0
        for datum in datums:
            full = (*datum.model_input, datum.target_tokens[-1])
            prompt_len, target = self._references.split(full)
            for i, (token, sampled_lp, adv) in enumerate(
                zip(datum.target_tokens, datum.logprobs, datum.advantages, strict=True)
            ):
                if adv == 0.0:
                    continue  # contributes exactly 0 to the loss and its gradient
                completion = full[prompt_len : i + 1] if i + 1 >= prompt_len else None
                step = step_at(target if completion is not None else None, completion or ())
                ratio = math.exp(logprob(self.theta, step, token) - sampled_lp)
                loss -= ratio * adv
                if step.target is not None:
                    p = math.exp(logprob(self.theta, step, step.target))
                    dlogp_dlogit = (1.0 if token == step.target else 0.0) - p
                    grad[step.position] -= ratio * adv * dlogp_dlogit * WIDTH
        # Gradients accumulate until the next optim_step, as on the service.
        if self._pending_grad is not None:
            grad = [a + b for a, b in zip(self._pending_grad, grad, strict=True)]
        self._pending_grad = grad
        return loss

    def _drop_grad(self) -> None:
        # A failed optim_step leaves no trace: its gradient is not applied later.
        self._pending_grad = None

    def _optim_step(self, lr: float) -> None:
        grad, self._pending_grad = self._pending_grad, None
        if grad is None:
            raise BackendError("optim_step without a preceding forward_backward")
        adam = self._adam
        adam.t += 1
        for j, g in enumerate(grad):
            adam.m[j] = ADAM_BETA1 * adam.m[j] + (1 - ADAM_BETA1) * g
            adam.v[j] = ADAM_BETA2 * adam.v[j] + (1 - ADAM_BETA2) * g * g
            m_hat = adam.m[j] / (1 - ADAM_BETA1**adam.t)
            v_hat = adam.v[j] / (1 - ADAM_BETA2**adam.t)
            self.theta[j] -= lr * m_hat / (math.sqrt(v_hat) + ADAM_EPS)

    def _save(self, name: str) -> str:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = self.checkpoint_dir / f"{name}.json"
        payload = {"format": CHECKPOINT_FORMAT, "name": name, "theta": self.theta}
        # Written whole or not at all: another process may be reading this path.
        partial = path.with_name(f".{path.name}.{os.getpid()}-{id(self)}.tmp")
        partial.write_text(json.dumps(payload))
        partial.replace(path)
        self._saved[str(path)] = (name, tuple(self.theta))
        return str(path)

    def _load(self, path: str) -> FakeSampler:
        # Our own checkpoints come from memory, so another run reusing the file
        # name cannot change what this run samples from.
        if path in self._saved:
            return FakeSampler(self, *self._saved[path])
        try:
            payload = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise BackendError(f"cannot load fake checkpoint {path!r}: {exc}") from None
        if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
            raise BackendError(f"{path!r} is not a {CHECKPOINT_FORMAT} file")
        return FakeSampler(self, str(payload["name"]), [float(x) for x in payload["theta"]])

    # -- latency, ordering, failures, records ---------------------------------

    def _training_call(
        self,
        kind: str,
        size: int,
        work: Callable[[], T],
        on_failure: Callable[[], None] | None = None,
    ) -> asyncio.Future[T]:
        """Schedule a training-side call: done after one round trip and after its predecessor."""
        previous = self._training_tail
        result = asyncio.ensure_future(self._call(kind, size, work, previous, on_failure))
        tail: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        result.add_done_callback(lambda _: tail.set_result(None))
        self._training_tail = tail
        return result

    async def _call(
        self,
        kind: str,
        size: int,
        work: Callable[[], T],
        after: asyncio.Future[None] | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> T:
        loop = asyncio.get_running_loop()
        record = CallRecord(kind, loop.time(), size=size)
        self.log.calls.append(record)
        self.log.in_flight += 1
        self.log.max_in_flight = max(self.log.max_in_flight, self.log.in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            if after is not None:
                await after
            if self._failures[kind] > 0:
                self._failures[kind] -= 1
                if on_failure is not None:
                    on_failure()
                raise TransientBackendError(f"{kind}: injected transient failure")
            return work()
        finally:
            self.log.in_flight -= 1
            record.finished = loop.time()
