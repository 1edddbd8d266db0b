"""A task's data, on the command line: prepared on the model's tokenizer, compared with a run's.

For: training, `eval` and `sample`, which each open a backend for a task.
Before the first problem is drawn, `prepared` has the task check its data on
the model's tokenizer (`Adapter`'s `prepare`: every reference within the
token budget) and returns its set-up line; for the fake backend, whose
tokenizer is known without opening it, that comes before the fake is made,
so the fake learns the problems the run will draw. `same_data` refuses a run
folder whose recorded data is not the data now. Not for: reading the data
(the task does) or what a row must hold (`mathrl.tasks.dataset`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mathrl.adapter import NoReference, OptionError
from mathrl.backend import Tokenizer
from mathrl.cli.run_folder import RunRecord
from mathrl.config import ConfigError
from mathrl.resolved import Task
from mathrl.text import one_line


def fake_tokenizer() -> Tokenizer:
    """The fake backend's tokenizer, known before the fake is made."""
    from mathrl_fakes import ByteTokenizer

    return ByteTokenizer()


def prepared(task: Task[Any], tokenizer: Tokenizer, max_tokens: int) -> str | None:
    """The task's data checked on `tokenizer` within `max_tokens` (`Task.prepare`): its set-up
    line, or None; ConfigError (one line naming the row) for data it cannot use."""
    try:
        line = task.prepare(tokenizer, max_tokens)
    except OptionError as exc:
        raise ConfigError(f"task {task.name!r}: {one_line(str(exc), 400)}") from None
    return one_line(str(line), 500) if line is not None else None


def say_line(line: str | None, say: Callable[[str], None]) -> None:
    """`say` the set-up line `prepared` gave, if it gave one."""
    if line is not None:
        say(line)


def same_data(record: RunRecord, task: Task[Any], given_with: str, otherwise: str) -> None:
    """ConfigError unless the task's data is the data `record`'s run read, naming what differs;
    `given_with` names what pointed at the run, `otherwise` what the user can do instead."""
    changed = record.changed_data(task)
    if changed is not None:
        raise ConfigError(f"{given_with}: {changed}; restore it {otherwise}")


def refused_by_the_fake(task: Task[Any], exc: NoReference, doing: str) -> ConfigError:
    """Why the fake cannot `doing` (train, evaluate) a task without references, in one line."""
    return ConfigError(
        f"the fake backend cannot {doing} task {task.name!r}: it learns to write each problem's "
        f"reference, and the task has none ({one_line(str(exc), 200)}); use the real backend "
        "(--backend mint), or give the task its references"
    )
