"""RetryingBackend: a deadline and retries on every call, never applying a step twice.

For: wrapping a `Backend` after set-up (`mathrl.service.retry` holds the
deadlines, the backoff and the retry budget it uses).

- Sampling and creating a sampler have no side effects: they are retried as
  they are, with the same request seed, so the samples are the same.
- The training side is never applied twice. A failed training call may or
  may not have taken effect (the service may have applied it and lost the
  answer), and no service says which. So before retrying one, the wrapper
  restores the last saved training state (`submit_load_state`) and replays
  the train steps completed since (their datums are kept until the next
  state save); then it retries. A failed save or load is retried in place:
  saving the same weights twice, or loading the same state twice, is
  harmless. Calls submitted behind a failed one are redone after it.

The caller keeps pipelining: calls are submitted at once and settle in
submission order, and only a failure costs extra round trips.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mathrl.backend import (
    Backend,
    BackendError,
    Datum,
    Sampler,
    Tokenizer,
    TrainResult,
    TransientBackendError,
)
from mathrl.losses import IMPORTANCE_SAMPLING, Loss
from mathrl.service.retry import Retrier, RetryingSampler, RetryPolicy, observed


@dataclass
class _Op:
    """One training-side call: how to submit it, and what became of it."""

    kind: str
    submit: Callable[[], Awaitable[Awaitable[Any]]]
    changes_state: bool
    epoch: int = 0
    restores: str = ""
    """For load_state: the path of the state it loads."""
    first: Awaitable[Any] | None = None
    error: BaseException | None = None


class RetryingBackend:
    """`Backend` with deadlines and retries around `inner` (see the module docstring)."""

    def __init__(
        self,
        inner: Backend,
        policy: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner
        self.retrier = Retrier(policy, on_retry, rng)
        self._epoch = 0
        self._tail: asyncio.Future[Any] | None = None
        self._last_state: str | None = None
        self._since: list[_Op] = []
        self._queued_changes = 0
        self._open: set[asyncio.Future[Any]] = set()
        self._recovering = False
        self._broken: BaseException | None = None
        """The first training-side failure that was not recovered: nothing after it is sent."""

    @property
    def tokenizer(self) -> Tokenizer:
        return self.inner.tokenizer

    async def create_sampler(self, path: str) -> Sampler:
        inner = await self.retrier.retried(
            "create_sampler", lambda: self.inner.create_sampler(path)
        )
        return RetryingSampler(inner, self.retrier)

    # -- the training side ------------------------------------------------------

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        datums = list(datums_D)
        submit = lambda: self.inner.submit_train_step(datums, learning_rate, loss)  # noqa: E731
        return await self._submit(_Op("forward_backward/optim_step", submit, changes_state=True))

    async def submit_save_for_sampler(self, name: str) -> Awaitable[str]:
        submit = lambda: self.inner.submit_save_for_sampler(name)  # noqa: E731
        return await self._submit(_Op("save_weights_for_sampler", submit, changes_state=False))

    async def submit_save_state(self, name: str) -> Awaitable[str]:
        return await self._submit(
            _Op("save_state", lambda: self.inner.submit_save_state(name), changes_state=False)
        )

    async def submit_load_state(self, path: str) -> Awaitable[None]:
        submit = lambda: self.inner.submit_load_state(path)  # noqa: E731
        return await self._submit(_Op("load_state", submit, changes_state=True, restores=path))

    async def _submit(self, op: _Op) -> Awaitable[Any]:
        op.epoch = self._epoch
        # While a recovery restores and replays, a new call waits its turn
        # instead: sent now, it would land before the replays.
        if not self._recovering and self._broken is None:
            try:
                op.first = observed(await self._send(op.submit, op.kind))
            except TransientBackendError as exc:
                op.error = exc  # settled (retried) in order, below
        self._queued_changes += op.changes_state
        settled = observed(self._settle(op, self._tail))
        self._tail = settled
        self._open.add(settled)
        settled.add_done_callback(self._open.discard)
        return settled

    async def close(self) -> None:
        """Stop settling calls nobody will wait for (a run that ended early).

        It returns once they have stopped. The calls themselves may still
        finish on the service; their outcome is ignored.
        """
        for settling in list(self._open):
            settling.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)

    async def _send(self, submit: Callable[[], Awaitable[Awaitable[Any]]], kind: str) -> Any:
        """Submit one training-side call; its result is awaited separately.

        A submission past its deadline may still reach the service later,
        after whatever is sent next, so nothing more can be sent safely: the
        run ends there, and the last saved state is intact.
        """
        try:
            return await self.retrier.deadline(submit())
        except TimeoutError:
            raise BackendError(
                f"{kind} was not accepted within {self.retrier.policy.call_timeout:g} s "
                "and might still arrive after later calls, so nothing more is sent; the last "
                "saved state is intact",
                settings=("call_timeout",),
            ) from None

    async def _settle(self, op: _Op, previous: asyncio.Future[Any] | None) -> Any:
        if previous is not None:
            await asyncio.wait({previous})  # in order; its outcome is its caller's business
        self._queued_changes -= op.changes_state
        try:
            if self._broken is not None:
                raise BackendError(
                    f"{op.kind} was not applied, because an earlier training-side call "
                    f"failed ({self._broken})"
                )
            if op.epoch != self._epoch:  # the state was restored after it was sent: again
                if op.first is not None:
                    self.retrier.drain(op.first)
                op.first, op.error = None, None
            try:
                if op.error is not None:
                    raise op.error
                pending = op.first if op.first is not None else await self._send(op.submit, op.kind)
                result = await self.retrier.deadline(pending)
            except (TransientBackendError, TimeoutError) as exc:
                result = await self._recover(op, exc)
        except asyncio.CancelledError:
            if op.first is not None:
                self.retrier.drain(op.first)
            raise
        except BaseException as exc:
            self._broken = self._broken or exc  # nothing after an unrecovered failure is sent
            raise
        self._done(op, result)
        return result

    def _done(self, op: _Op, result: Any) -> None:
        if op.kind == "save_state":
            self._last_state, self._since = result, []
        elif op.kind == "load_state":
            self._last_state, self._since = op.restores, []
        elif op.changes_state:
            self._since.append(op)

    async def _recover(self, op: _Op, exc: BaseException) -> Any:
        """Retry `op`, restoring the last saved state first if anything may have changed it.

        Each call of the recovery (every replayed step, and `op` itself) has its
        own budget of retries: a failure anywhere restores the state again and
        replays from the start, but only the call that failed spends a retry.
        """
        failures: Counter[int] = Counter()
        since: dict[int, float] = {}
        position, what = len(self._since), op.kind
        self._recovering = True
        try:
            while True:
                failures[position] += 1
                since.setdefault(position, asyncio.get_running_loop().time())
                await self.retrier.pause(what, failures[position], exc, since[position])
                try:
                    if op.kind == "load_state":
                        self._epoch += 1  # whatever it replaced is gone either way
                    elif op.changes_state or self._queued_changes:
                        await self._restore(op)
                        for index, past in enumerate(list(self._since)):
                            position = index  # a failure here spends this replay's retries
                            what = f"{past.kind} (replaying a step since the last saved state)"
                            await self._attempt(past.submit, past.kind)
                    position, what = len(self._since), op.kind
                    return await self._attempt(op.submit, op.kind)
                except (TransientBackendError, TimeoutError) as again:
                    exc = again
        finally:
            self._recovering = False

    async def _restore(self, failed: _Op) -> None:
        """Load the last saved state; the caller replays the train steps completed since."""
        if self._last_state is None:
            raise BackendError(
                f"cannot retry {failed.kind} without applying it twice: no training state "
                "was saved before it (save one with submit_save_state first)"
            )
        self._epoch += 1
        state, failures, since = self._last_state, 0, asyncio.get_running_loop().time()
        while True:
            try:
                await self._attempt(lambda: self.inner.submit_load_state(state), "load_state")
                return
            except (TransientBackendError, TimeoutError) as exc:
                failures += 1
                await self.retrier.pause("load_state", failures, exc, since)

    async def _attempt(self, submit: Callable[[], Awaitable[Awaitable[Any]]], kind: str) -> Any:
        return await self.retrier.deadline(await self._send(submit, kind))
