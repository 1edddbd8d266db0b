"""RecordingBackend: wraps any Backend and keeps what the loop asked of it.

For tests and benchmarks that need to see the loop's traffic (the samples it
drew, from which checkpoint, and the datums it trained on) without knowing
which backend is underneath. It changes nothing it passes through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from mathrl.backend import (
    Backend,
    Completion,
    Datum,
    SampleParams,
    Sampler,
    Tokenizer,
    TrainResult,
)
from mathrl.losses import IMPORTANCE_SAMPLING, Loss


@dataclass
class SampleCall:
    """One sample request, in submission order, and its completions once answered."""

    path: str
    prompt_T: tuple[int, ...]
    params: SampleParams
    completions_G: list[Completion] = field(default_factory=list)


class RecordingBackend:
    """A pass-through `Backend` that records sample requests and train steps."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.samples: list[SampleCall] = []
        self.trained: list[list[Datum]] = []
        self.losses: list[Loss] = []
        """The loss of each train step."""
        self.scored: list[tuple[str, tuple[int, ...]]] = []
        """Each `logprobs` request: the sampler's path and the tokens."""
        self.train_submitted_at: list[float] = []
        """The event loop's time at each train step's submission."""

    @property
    def tokenizer(self) -> Tokenizer:
        return self.inner.tokenizer

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        self.trained.append(list(datums_D))
        self.losses.append(loss)
        self.train_submitted_at.append(asyncio.get_running_loop().time())
        return await self.inner.submit_train_step(datums_D, learning_rate, loss)

    async def submit_save_for_sampler(self, name: str) -> Awaitable[str]:
        return await self.inner.submit_save_for_sampler(name)

    async def submit_save_state(self, name: str) -> Awaitable[str]:
        return await self.inner.submit_save_state(name)

    async def submit_load_state(self, path: str) -> Awaitable[None]:
        return await self.inner.submit_load_state(path)

    async def create_sampler(self, path: str) -> RecordingSampler:
        return RecordingSampler(self, path, await self.inner.create_sampler(path))


class RecordingSampler:
    """The sampler half of RecordingBackend."""

    def __init__(self, recorder: RecordingBackend, path: str, inner: Sampler) -> None:
        self._recorder = recorder
        self._path = path
        self._inner = inner

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        call = SampleCall(self._path, tuple(prompt_T), params)
        self._recorder.samples.append(call)
        call.completions_G = await self._inner.sample(prompt_T, num_samples, params)
        return call.completions_G

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        self._recorder.scored.append((self._path, tuple(tokens_T)))
        return await self._inner.logprobs(tokens_T)
