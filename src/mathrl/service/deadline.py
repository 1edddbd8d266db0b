"""Run blocking set-up work under a deadline that the process can walk away from.

For: MintBackend's connection set-up, which the SDK does synchronously and
retries for minutes. Not for: work that must be cancelled: the thread is
abandoned, not stopped.

A daemon thread does not keep the process alive once the deadline has
passed. (`asyncio.to_thread` would: its worker thread is not a daemon, so
`asyncio.run` waits for it at shutdown.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def run_in_daemon_thread(work: Callable[[], T], timeout: float) -> T:
    """Run blocking `work` in a daemon thread; raise TimeoutError after `timeout` s."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        outcome: Callable[[], None]
        try:
            outcome = functools.partial(done.set_result, work())
        except BaseException as exc:
            outcome = functools.partial(done.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(_unless_done, done, outcome)

    threading.Thread(target=run, name="mathrl-mint-setup", daemon=True).start()
    return await asyncio.wait_for(done, timeout)


def _unless_done(future: asyncio.Future[Any], settle: Callable[[], None]) -> None:
    if not future.done():  # else the deadline has cancelled it
        settle()
