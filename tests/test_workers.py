"""Workers: a task's calls off the event loop, each limited in time."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time

import pytest

from mathrl.workers import Late, WorkerDied, Workers, current, default_size, in_process


def run_in(workers: Workers, *fns: object) -> list[object]:
    async def go() -> list[object]:
        return await asyncio.gather(*(workers.run(fn) for fn in fns), return_exceptions=True)  # type: ignore[arg-type]  # any callables

    return asyncio.run(go())


def test_calls_return_their_values_and_raise_their_errors() -> None:
    def fail() -> int:
        raise KeyError("nope")

    with Workers(size=2) as workers:
        ok, error = run_in(workers, lambda: 41 + 1, fail)
    assert ok == 42
    assert isinstance(error, KeyError)


def test_calls_run_side_by_side_on_separate_threads() -> None:
    # Both calls must be inside the barrier at once, or it breaks after 10 s.
    barrier = threading.Barrier(2, timeout=10)
    with Workers(size=2) as workers:
        names = run_in(workers, *[lambda: (barrier.wait(), threading.current_thread().name)] * 2)
    assert all(isinstance(n, tuple) and n[1] == "mathrl-worker" for n in names)


def test_a_call_past_its_timeout_fails_and_the_pool_goes_on() -> None:
    release = threading.Event()
    with Workers(size=1, timeout=0.05) as workers:
        (late,) = run_in(workers, lambda: release.wait(10))
        assert isinstance(late, TimeoutError)
        assert str(late) == "it did not return within 0.05 s"
        # The hung call still holds its thread; a new one serves the next call.
        (after,) = run_in(workers, lambda: "served")
        release.set()
    assert after == "served"


def test_a_pool_of_no_threads_runs_each_call_on_the_loop_thread() -> None:
    loop_thread = threading.current_thread()
    workers = Workers(size=0)
    (where,) = run_in(workers, threading.current_thread)
    assert where is loop_thread
    assert workers.size == 0


def test_a_closed_pool_starts_again_when_used() -> None:
    workers = Workers(size=1)
    assert run_in(workers, lambda: 1) == [1]
    workers.close()
    assert run_in(workers, lambda: 2) == [2]
    workers.close()


def test_bad_sizes_and_timeouts_are_refused() -> None:
    with pytest.raises(ValueError, match=r"size must be >= 0 \(got -1\)"):
        Workers(size=-1)
    with pytest.raises(ValueError, match=r"timeout must be > 0 \(got 0\)"):
        Workers(timeout=0)


def test_the_default_size_is_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert default_size() == len(os.sched_getaffinity(0))
    assert Workers().size == default_size()
    monkeypatch.delattr(os, "sched_getaffinity")  # as on macOS
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert default_size() == 1


def test_in_process_runs_the_call_in_a_child_and_brings_back_its_answer() -> None:
    parent = os.getpid()
    assert in_process(os.getpid, 10)() != parent
    seen: list[int] = []

    def note() -> int:
        seen.append(1)
        return len(seen)

    # The child is a copy: what it changes stays in the copy.
    assert in_process(note, 10)() == 1
    assert seen == []

    def fail() -> None:
        raise KeyError("nope")

    with pytest.raises(KeyError, match="nope"):
        in_process(fail, 10)()


def test_in_process_names_a_child_that_dies_or_cannot_answer() -> None:
    with pytest.raises(WorkerDied, match=r"^its process ended with exit code 3 before returning$"):
        in_process(lambda: os._exit(3), 10)()
    with pytest.raises(TypeError, match="its result cannot be sent back from its process"):
        in_process(lambda: lambda: None, 10)()


def test_in_process_kills_a_child_past_its_timeout() -> None:
    with pytest.raises(Late, match=r"^it did not return within 0\.2 s$"):
        in_process(lambda: time.sleep(30), 0.2)()
    assert multiprocessing.active_children() == []


def test_a_work_process_leaves_the_trainers_signals_to_the_trainer() -> None:
    # A Ctrl-C to the process group must reach the trainer's handler once, not twice.
    assert in_process(lambda: signal.getsignal(signal.SIGINT), 10)() == signal.SIG_IGN
    assert in_process(lambda: signal.set_wakeup_fd(-1), 10)() == -1  # none inherited


def test_a_closed_pool_lets_its_watchdog_go_and_a_hung_thread_never_serves_again() -> None:
    release = threading.Event()
    workers = Workers(size=1, timeout=0.05)
    (late,) = run_in(workers, lambda: release.wait(10))
    assert isinstance(late, Late)
    watchdog = workers._watchdog
    workers.close()
    assert watchdog is not None
    watchdog.join(5)
    assert not watchdog.is_alive()
    # Used again after close: a fresh thread serves it (the hung one is not the pool's).
    assert run_in(workers, lambda: "again") == ["again"]
    release.set()
    workers.close()


def test_a_call_of_several_task_calls_has_their_time() -> None:
    release = threading.Event()
    with Workers(size=1, timeout=0.05) as workers:

        async def go() -> object:
            return await workers.run(lambda: release.wait(10), calls=3)

        with pytest.raises(Late, match=r"^it did not return within 0\.15 s \(3 calls of up to "):
            asyncio.run(go())
        release.set()


def test_the_pool_knows_when_it_is_idle() -> None:
    release, started = threading.Event(), threading.Event()

    def held() -> str:
        started.set()
        release.wait(10)
        return "done"

    with Workers(size=1) as workers:
        assert workers.wait_idle(0)  # nothing queued or running

        async def go() -> str:
            call = asyncio.ensure_future(workers.run(held))
            await asyncio.to_thread(started.wait, 10)
            assert not workers.wait_idle(0.05)  # a call is running
            release.set()
            return await call

        assert asyncio.run(go()) == "done"
        assert workers.wait_idle(5)


class Resource:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_what_a_pool_keeps_is_made_once_and_closed_with_it() -> None:
    made: list[Resource] = []

    def make() -> Resource:
        made.append(Resource())
        return made[-1]

    workers = Workers(size=1)
    (kept,) = run_in(workers, lambda: workers.kept("thing", make))
    assert workers.kept("thing", make) is kept
    assert made == [kept]
    (on_thread,) = run_in(workers, lambda: current() is workers)
    assert on_thread  # the pool's threads know it; others do not
    assert current() is None
    workers.close()
    assert made[0].closed
    assert workers.kept("thing", make) is None  # closed: nothing new that no close would end
    (again,) = run_in(workers, lambda: workers.kept("thing", make))
    assert again is made[1]  # used again, the pool starts afresh
    workers.close()
    assert made[1].closed


def test_a_call_given_up_on_leaves_the_pool_idle() -> None:
    release = threading.Event()
    with Workers(size=1, timeout=0.05) as workers:
        (late,) = run_in(workers, lambda: release.wait(10))
        assert isinstance(late, TimeoutError)
        assert workers.wait_idle(5)  # its thread still waits, but it is no call of the pool's
        release.set()


def test_a_fork_made_on_a_worker_thread_is_no_pools_thread() -> None:
    with Workers(size=1) as workers:
        (inside,) = run_in(workers, in_process(lambda: current() is None, 30))
    assert inside is True
