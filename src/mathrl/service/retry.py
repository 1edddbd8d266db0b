"""Deadlines and retries: the policy, the retrier, and a sampler that retries.

For: any call to a backend after set-up, so one transient failure does not
end a long run. Not for: set-up itself (`mathrl.service.mint_backend` bounds
that), errors that retrying cannot fix (`BackendError`, `ValueError`), which
pass through at once, or the training side, whose retries must restore state
first (`mathrl.service.recovery.RetryingBackend`).

Each call has a deadline, and a transient failure (`TransientBackendError`,
or a call past its deadline) is retried as `RetryPolicy` says, by a window of
time as the Tinker SDK and cloud clients do; each retry is reported through
`on_retry` (one line, or one for a round of sample requests that failed
together), and the last failure raises `RetriesExhausted`. Sampling has no
side effects: a sample request is retried as it is, with the same request
seed, so the samples are the same.
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
from mathrl.config import CALL_TIMEOUT, RETRY_DELAY, RETRY_WINDOW
from mathrl.text import describe

T = TypeVar("T")


class RetriesExhausted(BackendError):
    """A call kept failing transiently for its whole retry window (or past its count cap)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long one call may take, and for how long a failing one is retried.

    A call that fails transiently is retried with jittered exponential backoff
    (`delay`, doubling, at most `max_delay` apart) for as long as the next try
    starts within `window` seconds of its first failure; `retries`, if set,
    also caps how many times.
    """

    retries: int | None = None
    """At most this many retries of one call, besides the window; None: no count cap."""
    call_timeout: float = CALL_TIMEOUT
    delay: float = RETRY_DELAY
    """Seconds before the first retry; it doubles for each one after (with jitter)."""
    max_delay: float = 30.0
    window: float = RETRY_WINDOW
    """Seconds from a call's first failure within which it is retried."""

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
        self.reporter = RetryLines(self.on_retry)
        self._rng = rng or random.Random()

    async def retried(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` under the deadline, retried in place on transient failures."""
        failures, since = 0, None
        while True:
            try:
                return await self.deadline(attempt())
            except (TransientBackendError, TimeoutError) as exc:
                failures += 1
                since = since if since is not None else asyncio.get_running_loop().time()
                await self.pause(what, failures, exc, since)

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

    async def pause(
        self, what: str, failures: int, exc: BaseException, since: float | None = None
    ) -> None:
        """Report failure number `failures` and back off; raise once the window is spent.

        `since` is when the call first failed (default: now).
        """
        timed_out = isinstance(exc, TimeoutError)
        detail = f"no answer within {self.policy.call_timeout:g} s" if timed_out else describe(exc)
        deadline_setting = ("call_timeout",) if timed_out else ()
        retries, window = self.policy.retries, self.policy.window
        if retries is not None and failures > retries:
            raise RetriesExhausted(
                f"{what} failed {failures} times in a row ({retries} retries): {detail}",
                settings=("retries", *deadline_setting),
            ) from None
        now = asyncio.get_running_loop().time()
        elapsed = now - (since if since is not None else now)
        delay = self.policy.backoff(failures, self._rng)
        if elapsed + delay > window:
            raise RetriesExhausted(
                f"{what} kept failing for {elapsed:.0f} s ({failures} failures), and the "
                f"{window:g} s retry window is spent: {detail}",
                settings=("retry_window", *deadline_setting),
            ) from None
        of = f" of {retries}" if retries is not None else ""
        head = f"retry {failures}{of} of {what}"
        self.reporter.report(what, head, delay, detail)
        gather = min(delay, RetryLines.GATHER)  # the others of its round report meanwhile
        await asyncio.sleep(gather)
        self.reporter.flush(head)
        await asyncio.sleep(delay - gather)

    def drain(self, awaitable: Awaitable[Any]) -> None:
        """Let an abandoned call finish on its own, its outcome ignored."""
        observed(awaitable)


class RetryLines:
    """Turns retries into lines: one each, except sampling's, gathered per round.

    A step's sample requests fail together when the service does (an outage),
    and a line for each would flood stderr: those at the same retry number
    that report while the first of them waits GATHER seconds (or its whole
    pause, if shorter) make one line, written when that wait ends.
    """

    GATHER = 0.1

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self._pending: dict[str, list[tuple[float, str]]] = {}

    def report(self, what: str, head: str, delay: float, detail: str) -> None:
        """Write the line now, or (sampling) gather it until `flush(head)`."""
        if what != "sample":
            self.write(f"{head} in {delay:.1f} s: {detail}")
            return
        self._pending.setdefault(head, []).append((delay, detail))

    def flush(self, head: str) -> None:
        """Write the gathered line of `head`, if any is still waiting."""
        gathered = self._pending.pop(head, [])
        if not gathered:
            return
        delays = [d for d, _ in gathered]
        if len(gathered) == 1:
            self.write(f"{head} in {delays[0]:.1f} s: {gathered[0][1]}")
            return
        self.write(
            f"{head} ({len(gathered)} requests) in {min(delays):.1f} to {max(delays):.1f} s: "
            f"{gathered[-1][1]}"
        )


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

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        return await self._retrier.retried(
            "compute_logprobs", lambda: self._inner.logprobs(tokens_T)
        )


def observed(awaitable: Awaitable[T]) -> asyncio.Future[T]:
    """`awaitable` as a future whose failure counts as seen, even by a caller that stops early.

    Whoever awaits it still gets the exception; asyncio just will not also log it
    as never retrieved when a run ends before every call has been waited for.
    """
    future = asyncio.ensure_future(awaitable)
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future
