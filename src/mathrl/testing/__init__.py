"""`check_adapter`: the Adapter contract, checked from the outside, in one call.

Plain functions with no test-framework import, so pytest, unittest or a
script can call them (as trio's `check_*` suites are called). On success
`check_adapter` returns a one-line summary; on failure it raises
`AssertionError` listing every violation, one sentence each, naming the
method and the input. `python -m mathrl check-adapter module:Class` runs it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mathrl.adapter import Adapter, AdapterError, Unavailable
from mathrl.backend import Tokenizer
from mathrl.resolved import Task, as_task
from mathrl.testing.checker import Checker
from mathrl.testing.episode_checks import EpisodeChecks
from mathrl.testing.inputs import ADVERSARIAL, WRONG, random_texts
from mathrl.testing.reward_checks import RewardChecks
from mathrl.text import one_line, shown

__all__ = ["ADVERSARIAL", "WRONG", "check_adapter", "random_texts"]


def check_adapter(
    adapter: Adapter[Any] | Task[Any],
    *,
    seeds: Sequence[int] = (0, 1),
    steps: Sequence[int] = (1, 2, 3),
    size: int = 8,
    heldout_size: int = 32,
    guard_steps: int = 10,
    learns: bool = False,
    tokenizer: Tokenizer | None = None,
) -> str:
    """Check `adapter` against the contract; return a summary line or raise AssertionError.

    Args:
        seeds, steps, size: the (seed, step) pairs and batch size of the
            `build_dataset` checks.
        heldout_size: how many held-out problems to draw.
        guard_steps: held-out problems must avoid training steps 1..guard_steps
            (drawn at `size` problems a step).
        learns: also train 20 steps on the fake backend and require accuracy
            (steps 16-20 against steps 1-5) to rise by at least 10 points.
        tokenizer: the tokenizer the task's `max_tokens` is checked against
            (default: the fake backend's, which counts UTF-8 bytes, more than
            most real tokenizers do).
    """
    from mathrl_fakes import ByteTokenizer

    try:
        task = as_task(adapter)
    except AdapterError as exc:
        raise AssertionError(f"1 violation of the Adapter contract:\n- {exc}") from None
    checker = Checker(task)
    ready = _preflight(checker)
    train = checker.dataset(seeds, steps, size)
    held = checker.heldout(seeds[0], heldout_size, guard_steps, size) if train else []
    tokenizer = tokenizer or ByteTokenizer()
    rewards = RewardChecks(checker, tokenizer)
    rewards.run([*train[:2], *held[:1]], [*train, *held])
    if task.plays_episodes:
        EpisodeChecks(checker, rewards, tokenizer).run([*train[:2], *held[:1]])
    if learns and not checker.violations:
        _learning(checker)
    if checker.violations:
        n = len(checker.violations)
        lines = "\n".join(f"- {v}" for v in checker.report())
        raise AssertionError(
            f"{n} violation{'s' * (n != 1)} of the Adapter contract by task "
            f"{task.name!r} ({task.identity}):\n{lines}"
        )
    return f"task {task.name!r} ({task.identity}) passed {checker.checks} checks" + (
        f"; {ready}" if ready else ""
    )


def _preflight(checker: Checker) -> str | None:
    """`preflight()` returns None or one line; `Unavailable` (this machine cannot run the
    task) passes through, since no check can stand in for what is missing."""
    try:
        line = checker.task.preflight()
    except Unavailable:
        raise
    except Exception as exc:
        checker.expect(
            False,
            f"preflight() must not raise (it raised {type(exc).__name__}: "
            f"{one_line(str(exc), 200)}) except Unavailable",
            "preflight",
        )
        return None
    one = isinstance(line, str) and line.isprintable() and 0 < len(line) <= 500
    checker.expect(
        line is None or one,
        f"preflight() must return None or one printable line "
        f"of at most 500 characters (got {shown(line)})",
        "preflight",
    )
    return line if one else None


def _learning(checker: Checker) -> None:
    """20 steps on the fake backend raise accuracy by at least 10 points."""
    from mathrl.config import TrainConfig
    from mathrl.loop import run_grpo
    from mathrl_fakes import FakeBackend

    config = TrainConfig(steps=20, batch=8, group=4)
    with tempfile.TemporaryDirectory(prefix="mathrl-check-") as folder:
        backend = FakeBackend.for_run(checker.task, config, checkpoint_dir=Path(folder))
        result = run_grpo(backend, checker.task, config)
    accuracy = [m.accuracy for m in result.steps]
    start, end = sum(accuracy[:5]) / 5, sum(accuracy[-5:]) / 5
    checker.expect(
        end >= start + 0.10,
        f"a 20-step run on the fake backend did not learn: accuracy went from {start:.1%} "
        f"(steps 1-5) to {end:.1%} (steps 16-20); it must rise by at least 10 points",
    )
