"""Deadlines and retries: the policy, the retrier, and a sampler that retries.

For: any call to a backend after set-up, so one transient failure does not
end a long run. Not for: set-up itself (`mathrl.service.mint_backend` bounds
that), errors that retrying cannot fix (`BackendError`, `ValueError`), which
pass through at once, or the training side, whose retries must restore state
first (`mathrl.service.recovery.RetryingBackend`).

Each call has a deadline (`call_timeout`). A transient failure
(`TransientBackendError`, or a call past its deadline) is retried after an
exponential backoff with jitter, at most `retries` times; each retry is
reported through `on_retry` (one line), and the last failure raises
`RetriesExhausted`. Sampling has no side effects: a sample request is retried
as it is, with the same request seed, so the samples are the same.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mathrl.backend import (
    BackendError,
    Completion,
    SampleParams,
    Sampler,
    TransientBackendError,
)
from mathrl.text import describe

T = TypeVar("T")


class RetriesExhausted(BackendError):
    """A call kept failing transiently after every retry. The message has the last error."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long one call may take and how often a failed one is retried."""

    retries: int = 3
    call_timeout: float = 600.0
    delay: float = 1.0
    """Seconds before the first retry; it doubles for each one after (with jitter)."""
    max_delay: float = 120.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The pause before retry number `attempt` (1, 2, ...): half fixed, half jitter."""
        ceiling = min(self.max_delay, self.delay * 2.0 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


class Retrier:
    """Deadlines, backoff and the retry budget of one policy; reports each retry."""

    def __init__(
        self,
        policy: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self.on_retry = on_retry or (lambda line: None)
        self._rng = rng or random.Random()

    async def retried(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` under the deadline, retried in place on transient failures."""
        failures = 0
        while True:
            try:
                return await self.deadline(attempt())
            except (TransientBackendError, TimeoutError) as exc:
                failures += 1
                await self.pause(what, failures, exc)

    async def deadline(self, awaitable: Awaitable[T]) -> T:
        """`awaitable`'s result, or TimeoutError after `call_timeout` seconds."""
        # Shielded: a call past its deadline is abandoned, not cancelled, since
        # cancelling cannot reach a request the service already has.
        future = asyncio.ensure_future(awaitable)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.policy.call_timeout)
        except (TimeoutError, asyncio.CancelledError):
            self.drain(future)
            raise

    async def pause(self, what: str, failures: int, exc: BaseException) -> None:
        """Report failure number `failures` and back off; raise once the budget is spent."""
        timed_out = isinstance(exc, TimeoutError)
        detail = f"no answer within {self.policy.call_timeout:g} s" if timed_out else describe(exc)
        retries = self.policy.retries
        if failures > retries:
            raise RetriesExhausted(
                f"{what} failed {failures} times in a row ({retries} retries): {detail}",
                settings=("retries", "call_timeout") if timed_out else ("retries",),
            ) from None
        delay = self.policy.backoff(failures, self._rng)
        self.on_retry(f"retry {failures} of {retries} of {what} in {delay:.1f} s: {detail}")
        await asyncio.sleep(delay)

    def drain(self, awaitable: Awaitable[Any]) -> None:
        """Let an abandoned call finish on its own, its outcome ignored."""
        observed(awaitable)


class RetryingSampler:
    """A sampler whose requests have a deadline and retries (same request, same seed)."""

    def __init__(self, inner: Sampler, retrier: Retrier) -> None:
        self._inner = inner
        self._retrier = retrier

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        return await self._retrier.retried(
            "sample", lambda: self._inner.sample(prompt_T, num_samples, params)
        )


def observed(awaitable: Awaitable[T]) -> asyncio.Future[T]:
    """`awaitable` as a future whose failure counts as seen, even by a caller that stops early.

    Whoever awaits it still gets the exception; asyncio just will not also log it
    as never retrieved when a run ends before every call has been waited for.
    """
    future = asyncio.ensure_future(awaitable)
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future
