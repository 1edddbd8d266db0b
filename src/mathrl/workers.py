"""Workers: where a task's own work runs, off the event loop, so it overlaps sampling.

For: the rollout, which runs every reward and every environment step of an
episode here, each as soon as its turn has been sampled, while other
episodes' requests are still in flight. Not for: anything pure and cheap
the loop computes itself.

The pool is `size` daemon threads (by default one per core). A task whose
work runs code does it in child processes (the code task's sandbox), which
the threads wait on, so every core works; a task that computes in Python
holds the interpreter's lock while it does. A call that does not return
within `timeout` seconds of starting raises TimeoutError; its thread is
given up (a daemon thread never holds the process open at exit) and another
takes its place. The timeout is wall-clock time, kept by a watchdog thread,
not the event loop's clock.

What the calls on one pool share lives as long as the pool (`kept`): the
code task's sandboxes started ahead of their calls, which a thread starts
while the pool is idle (`wait_idle`), for the calls that find themselves on
one of its threads (`current`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

T = TypeVar("T")
DEFAULT_TIMEOUT = 300.0
"""Seconds a reward or environment step may take by default."""


class WorkerDied(RuntimeError):
    """The process a call ran in ended without returning (a crash, or a kill)."""


def in_process(fn: Callable[[], T], timeout: float, calls: int = 1) -> Callable[[], T]:
    """`fn`, to run in a child process forked for the call, killed after `calls` x `timeout` s.

    The child is a copy of this process (nothing is pickled on the way in), so
    a task's objects and any module it was loaded from are all there; the
    result, or the exception, comes back pickled. A call that holds the
    interpreter's lock holds only its child's. Call the result on a worker
    thread: it blocks until the child answers.
    """

    def call() -> T:
        context = multiprocessing.get_context("fork")
        with _FORKING:  # no other child may inherit this pipe's write end, or its EOF is lost
            receive, send = context.Pipe(duplex=False)
            child = context.Process(target=_answer, args=(fn, send), daemon=True)
            child.start()
            send.close()
        try:
            if not receive.poll(timeout * calls):
                raise Late(timeout, calls)
            ok, value = receive.recv()
        except EOFError:
            child.join()
            raise WorkerDied(
                f"its process ended with exit code {child.exitcode} before returning"
            ) from None
        finally:
            receive.close()
            if child.is_alive():
                child.kill()
            child.join()
        if ok:
            result: T = value
            return result
        raise value

    return call


_FORKING = threading.Lock()


def _answer(fn: Callable[[], Any], send: Any) -> None:
    """In the child: send (True, fn()) or (False, the exception), pickled."""
    # The trainer's signal handling is not the child's: a Ctrl-C to the process group
    # must reach the trainer's handler once, through the trainer's own wake-up pipe.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        answer: tuple[bool, Any] = (True, fn())
    except Exception as exc:
        answer = (False, exc)
    try:
        send.send(answer)
    except Exception as exc:  # the result cannot be pickled: say so instead
        send.send((False, TypeError(f"its result cannot be sent back from its process: {exc}")))


class Late(TimeoutError):
    """A call still running after `calls` x `each` seconds: the pool gave up waiting for it."""

    def __init__(self, each: float, calls: int = 1) -> None:
        self.seconds = each * calls
        several = f" ({calls} calls of up to {each:g} s each)" if calls > 1 else ""
        super().__init__(f"it did not return within {self.seconds:g} s{several}")
        self.each, self.calls = each, calls


class Closable(Protocol):
    def close(self) -> None: ...


K = TypeVar("K", bound=Closable)
_CURRENT = threading.local()
# A fork made from a worker thread (`in_process`) is no pool's: its copies of the pool's
# state are not the pool's to use.
os.register_at_fork(after_in_child=lambda: vars(_CURRENT).clear())


def current() -> Workers | None:
    """The pool whose worker thread this is; None on any other thread."""
    pool: Workers | None = getattr(_CURRENT, "pool", None)
    return pool


_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]", int, float]
"""A call, the loop awaiting it, its future there, how many of a task's calls it makes, and
the seconds each may take."""


def borrowed(workers: Workers | None) -> contextlib.AbstractContextManager[Workers]:
    """`w` as it is (its owner closes it), or a default pool that closes on leaving the `with`."""
    return contextlib.nullcontext(workers) if workers is not None else Workers()


def default_size() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class Workers:
    """A pool of daemon threads for a task's calls, awaited from the event loop.

    `size` threads, one per core by default. With `size=0` there are none: each
    call runs on the event loop itself as it is awaited, untimed, and the rollout
    runs a `work_in_processes` task's calls in this process and an `async` group
    reward without a limit too (for a loop whose clock is virtual, where time
    spent in a thread would let the clock jump past other timers).
    """

    def __init__(self, size: int | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        if size is not None and size < 0:
            raise ValueError(f"size must be >= 0 (got {size})")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 (got {timeout})")
        self.size = size if size is not None else default_size()
        self.timeout = timeout
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._due = threading.Condition(self._lock)
        self._deadlines: list[tuple[float, int, _Job]] = []  # a heap, earliest first
        self._running: dict[int, threading.Thread] = {}  # call -> the thread running it
        self._ids = itertools.count()
        self._watchdog: threading.Thread | None = None
        self._closed = False
        self._busy = 0  # calls queued or running
        self._idle = threading.Condition(self._lock)
        self._kept: dict[str, Closable] = {}

    async def run(self, fn: Callable[[], T], calls: int = 1, seconds: float | None = None) -> T:
        """`fn()` on a worker thread; `Late` (a TimeoutError) if it runs longer than `calls`
        times the pool's timeout (`fn` making that many of a task's calls), or than `seconds`
        each instead, if given (a tool call's own limit)."""
        if self.size == 0:
            return fn()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._start()
        with self._lock:
            self._busy += 1
        self._jobs.put((fn, loop, future, calls, self.timeout if seconds is None else seconds))
        return await future

    def wait_idle(self, timeout: float) -> bool:
        """Block until no call is queued or running (True), or for `timeout` seconds (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def kept(self, key: str, make: Callable[[], K]) -> K | None:
        """The pool's own `key` object, made by `make()` on first use and closed with the pool:
        what the calls made on its threads share (a task's warm resources, say). None while
        the pool is closed (a call queued before `close` may still run), so nothing is made
        that no `close` would end."""
        with self._lock:
            if self._closed:
                return None
            if key not in self._kept:
                self._kept[key] = make()
            return cast(K, self._kept[key])  # `make` made it for this key

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let idle threads end (busy ones after their call), and the watchdog once no call
        is running. The pool starts again if used after."""
        with self._due:
            for _ in self._threads:
                self._jobs.put(None)
            self._threads.clear()
            self._closed = True
            self._due.notify()
            kept, self._kept = list(self._kept.values()), {}
        for resource in kept:
            resource.close()

    def _start(self) -> None:
        with self._lock:
            self._closed = False
            missing = self.size - len(self._threads)
            if self._watchdog is None or not self._watchdog.is_alive():
                self._watchdog = threading.Thread(
                    target=self._watch, name="mathrl-watchdog", daemon=True
                )
                self._watchdog.start()
        for _ in range(missing):
            self._spawn()

    def _watch(self) -> None:
        """Fail each call still running at its deadline, and replace its thread."""
        with self._due:
            while True:
                while self._deadlines and self._deadlines[0][1] not in self._running:
                    heapq.heappop(self._deadlines)  # finished in time
                if self._closed and not self._deadlines:
                    self._watchdog = None
                    return
                wait = self._deadlines[0][0] - time.monotonic() if self._deadlines else None
                if wait is not None and wait <= 0:
                    _, ident, (_, loop, future, calls, each) = heapq.heappop(self._deadlines)
                    hung = self._running.pop(ident)
                    self._finished()  # for the pool: its thread is not the pool's any more
                    if hung in self._threads:  # it is not the pool's any more
                        self._threads.remove(hung)
                    _hand_over(loop, future, None, Late(each, calls))
                    self._due.release()
                    try:
                        self._spawn()  # the hung call keeps its thread: another takes its place
                    finally:
                        self._due.acquire()
                    continue
                self._due.wait(wait)

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._work, name="mathrl-worker", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        _CURRENT.pool = self
        while (job := self._jobs.get()) is not None:
            if not self._one(job):
                return  # the watchdog gave up on its call and replaced this thread

    def _one(self, job: _Job) -> bool:
        """Run one call; False if the watchdog gave up on it."""
        fn, loop, future, calls, each = job
        if future.done():  # given up on before it started
            with self._lock:
                self._finished()
            return True
        ident = next(self._ids)
        deadline = time.monotonic() + each * calls
        with self._due:
            self._running[ident] = threading.current_thread()
            heapq.heappush(self._deadlines, (deadline, ident, job))
            self._due.notify()
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting coroutine, never lost
            error = exc
        with self._due:
            if ident not in self._running:
                return False  # counted as finished when it was given up on
            del self._running[ident]
            self._finished()
        _hand_over(loop, future, result, error)
        return True

    def _finished(self) -> None:
        """One call queued or running fewer (the lock held)."""
        self._busy -= 1
        if self._busy == 0:
            self._idle.notify_all()


def _hand_over(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: the run ended without it
        loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
