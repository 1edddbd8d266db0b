"""A dataset's scorer, run in a child process with a time limit.

For: the reasoning-gym task's reward. A scorer is third-party code fed the model's
text, and some do unbounded work on a short answer: `coin_flip` reads
`<answer>1e999999999</answer>` as a `Fraction` and computes 10**999999999 in one C
call that holds the interpreter's lock, so in the trainer's process every thread
would stop (the worker pool's watchdog too). Here each thread that scores keeps a
child process, forked once (so the scorer and the library are there already), which
scores one answer at a time; an answer not scored within `seconds` kills the child
and scores None, and the thread's next call forks a fresh one. A call costs a
round trip through a pipe, not a fork. Not for: running model output as code (the
task refuses datasets whose scorer does; see `settings.RUNS_THE_ANSWER`).

A child is stopped once, by whoever takes it out of the scorer's list first
(`_take`): its thread's seat, when the thread ends, or the scorer, when it is
collected or the interpreter exits. The worker pool's threads end on their own
after it closes, so at exit the two may come at once; closing one pipe twice
from two threads could close a file descriptor the first close freed, and
another open had taken since (or print `OSError: [Errno 9] Bad file
descriptor` from the finalizer).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

Score = Callable[[str, Mapping[str, Any]], object]
"""A scorer: (answer, entry) -> what the dataset's `score_answer` returns."""
_FORKING = threading.Lock()
"""Held from a pipe's creation to the closing of the child's ends in this process, so no
other child forked meanwhile holds them (its end of file would never come)."""
_TAKING = threading.Lock()
"""Held while a child is taken out of a scorer's list of children (`_take`)."""


@dataclass(slots=True, eq=False)
class _Child:
    process: BaseProcess
    connection: Connection
    owner: int
    """The process that forked it: only that one may stop it. (A fork of the owner
    inherits its seats and their finalizers, which fire there when the threads go.)"""


class _Seat:
    """One thread's place at a scorer: `box[0]` is its child, if it has one. When the
    thread ends, its seat goes with it, and so does the child (see `_release`)."""

    __slots__ = ("__weakref__", "box")

    def __init__(self, children: list[_Child]) -> None:
        self.box: list[_Child | None] = [None]
        weakref.finalize(self, _release, self.box, children)


class ScoringProcesses:
    """`score(answer, entry)` in a child process per calling thread, within `seconds`."""

    def __init__(self, score: Score, seconds: float) -> None:
        self._score, self.seconds = score, seconds
        self._local = threading.local()
        self._children: list[_Child] = []
        """Every child alive: each thread's, stopped with the scorer (or with this process:
        they are daemons)."""
        weakref.finalize(self, _stop_all, self._children)

    def __call__(self, answer: str, entry: Mapping[str, Any]) -> float | None:
        """The score as a number, or None: not a number, raised, too slow, or crashed."""
        seat: _Seat | None = getattr(self._local, "seat", None)
        if seat is None:
            seat = self._local.seat = _Seat(self._children)
        child = seat.box[0]
        if child is None or not child.process.is_alive():
            _release(seat.box, self._children)
            child = seat.box[0] = self._start()
        try:
            child.connection.send((answer, entry))
            if child.connection.poll(self.seconds):
                result: float | None = child.connection.recv()
                return result
        except Exception:  # the pipe broke (the child died), or the entry does not pickle
            pass
        _release(seat.box, self._children, wait=0.0)  # it may be stuck: no waiting
        return None

    def _start(self) -> _Child:
        context = multiprocessing.get_context("fork")
        with _FORKING:
            ours, theirs = context.Pipe()
            # The child's copies of this end, and of its siblings' pipes, would keep each
            # pipe open after this process closes it: the child closes them first.
            inherited = [ours, *(c.connection for c in self._children)]
            process = context.Process(
                target=_serve, args=(self._score, theirs, inherited), daemon=True
            )
            process.start()
            theirs.close()
        child = _Child(process, ours, os.getpid())
        with _TAKING:
            self._children.append(child)
        return child


def _serve(score: Score, connection: Connection, inherited: list[Connection]) -> None:
    """In the child: score each (answer, entry) received, until the pipe closes."""
    # The trainer's signal handling is not the child's (as in mathrl.workers.in_process).
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for other in inherited:
        other.close()
    # A scorer that prints stays off the run's output; the file lives as long as the child.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    while True:
        try:
            answer, entry = connection.recv()
        except (EOFError, OSError):
            return
        try:
            value: Any = score(answer, entry)  # anything: float() decides
            result: float | None = float(value)
        except Exception:  # the scorer's own failure on this answer
            result = None
        connection.send(result)


def _stop(child: _Child, wait: float) -> None:
    """Close the child's pipe, which ends it; kill it if it has not ended within `wait` s."""
    child.connection.close()
    if os.getpid() != child.owner:  # a fork of the owner: its copy of the pipe is all it has
        return
    child.process.join(wait)
    if child.process.is_alive():
        child.process.kill()
        child.process.join()


def _release(box: list[_Child | None], children: list[_Child], wait: float = 1.0) -> None:
    """Stop a seat's child, if it has one and nothing else has taken it to stop."""
    child, box[0] = box[0], None
    if child is not None and _take(child, children):
        _stop(child, wait)


def _stop_all(children: list[_Child]) -> None:
    for child in list(children):  # a seat's finalizer may be taking one meanwhile
        if _take(child, children):
            _stop(child, wait=1.0)


def _take(child: _Child, children: list[_Child]) -> bool:
    """Take `child` out of `children`: True for the one caller that does, which stops it.

    In a fork of the owner (whose finalizers fire there, see `_Child.owner`)
    it is True: the fork has its own copy of the pipe to close, and its copy
    of the lock may have been held by a thread of the owner's when it forked.
    """
    if os.getpid() != child.owner:
        return True
    with _TAKING:
        for i, listed in enumerate(children):
            if listed is child:
                del children[i]
                return True
    return False
