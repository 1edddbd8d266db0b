"""Rows made problems: every row checked, duplicates dropped, the held-out split, the draws.

For: the data tasks (`dataset`, `math`). Pure functions over rows already
read (`mathrl.tasks.dataset.sources`); no I/O. Not for: what a row means
(each task says, in the function that makes a problem of a row) or grading.

Every row is checked when the task is built, before the first request:

- the task's `make` turns a row into a problem, or raises `BadRow` naming
  the field at fault and why (a missing field, an empty prompt, an answer
  that states no final answer);
- two rows with the same prompt (`Keyed.key`) are one problem: the later
  copy is dropped and counted as a duplicate, or, if it asks for another
  answer, is a bad row itself;
- training rows whose prompt is also a held-out one are dropped and counted
  (`overlapping`), so no held-out problem is ever trained on;
- once the model's tokenizer is known (`Adapter.prepare`), every reference
  must fit the run's `max_tokens` (`fit_references`).

A bad row stops the task with `RowError`, one line naming the source, the
row's place and the field; with the task's `skip_bad_rows` option it is
left out and counted instead. `Counts.line` is the set-up line that says
what became of the rows.

Drawing: training step k (1, 2, ...) of a run seeded `seed` at `size`
problems a step takes positions (k-1) x size to k x size - 1 of one endless
stream, made of epochs one after another; each epoch is the training
problems in an order shuffled by (seed, epoch) alone. So within an epoch no
problem repeats and every one comes once, and any process, at any step,
computes the same problems from (seed, step, size) without drawing the
steps before.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from mathrl.adapter import OptionError
from mathrl.tasks.dataset.sources import Row, Source
from mathrl.text import shown

T = TypeVar("T")
SPLIT_SEED = "mathrl/math/heldout-split"
"""Seeds the held-out split of a training source without a test source (with the task's
`split_seed`): the same for every run, so runs on one file evaluate on one set."""


class BadRow(Exception):
    """A row cannot be made a problem: `field` is the field at fault (None: the row as a
    whole), and the message says why, e.g. `states no final answer ('#### 12' missing)`."""

    def __init__(self, field: str | None, why: str) -> None:
        super().__init__(why)
        self.field = field


class RowError(OptionError):
    """A row of a source cannot be used: the message names the source, the row's place and
    the field, e.g. `train file 'units.csv' line 14: field 'answer' is empty`."""


@dataclass(frozen=True, slots=True)
class Keyed(Generic[T]):
    """A problem made of a row: the problem, what tells it apart (its prompt, as text), the
    answer it asks for (None: the task has no answer field), and where its row is."""

    problem: T
    key: str
    answer: str | None
    where: str


@dataclass(frozen=True, slots=True)
class Counts:
    """What became of a source's rows, for the set-up line."""

    read: int = 0
    skipped: int = 0
    duplicates: int = 0
    overlapping: int = 0
    """Training rows dropped because a held-out row asks the same."""
    too_long: int = 0
    """Rows dropped (`skip_bad_rows`) because their reference did not fit `max_tokens`."""
    first_skipped: str = ""
    """Why the first skipped row was skipped, as `RowError` would have said it."""

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.read + other.read,
            self.skipped + other.skipped,
            self.duplicates + other.duplicates,
            self.overlapping + other.overlapping,
            self.too_long + other.too_long,
            self.first_skipped or other.first_skipped,
        )

    def line(self, training: int, heldout: int, sources: Sequence[str]) -> str:
        """`240 rows read (units.csv): 216 training and 24 held-out problems; 0 skipped, ...`."""
        said = (
            f"{self.read} rows read ({', '.join(sources)}): {training} training and {heldout} "
            f"held-out problems; {self.skipped + self.too_long} skipped as bad, "
            f"{self.duplicates} duplicates dropped, {self.overlapping} dropped for "
            "overlapping the held-out set"
        )
        if self.first_skipped:
            said += f" (the first skipped: {self.first_skipped})"
        return said


def checked(
    source: Source, make: Callable[[Row, int], Keyed[T]], skip: bool
) -> tuple[list[Keyed[T]], Counts]:
    """Every row of `source` made a problem by `make(row, index)`, duplicates dropped; a bad
    row raises RowError, or with `skip` is left out and counted."""
    kept: dict[str, Keyed[T]] = {}
    skipped, duplicates, first = 0, 0, ""
    for index, row in enumerate(source.rows):
        try:
            made = make(row, index)
            seen = kept.get(made.key)
            if seen is not None and seen.answer != made.answer:
                raise BadRow(
                    None,
                    f"asks what {seen.where} asks, for another answer ({shown(seen.answer)} "
                    f"there, {shown(made.answer)} here)",
                )
        except BadRow as bad:
            error = row_error(source, index, bad)
            if not skip:
                raise error from None
            skipped += 1
            first = first or str(error)
            continue
        if seen is not None:
            duplicates += 1
            continue
        kept[made.key] = made
    counts = Counts(len(source.rows), skipped, duplicates, first_skipped=first)
    return list(kept.values()), counts


def row_error(source: Source, index: int, bad: BadRow) -> RowError:
    """`bad`, as one line naming the source, the row's place and the field."""
    field = f": field {shown(bad.field, 60)}" if bad.field is not None else ""
    return RowError(source.option, f"{source.where(index)}{field} {bad}")


def cells(row: Row) -> Row:
    """A row's fields; BadRow for a CSV row with more cells than its header has names."""
    if None in row:
        # csv.DictReader files a row's surplus cells under the key None, which Row's type
        # (str keys, as the header's names are) leaves out: read as the mapping it is.
        extra = cast("Mapping[object, object]", row)[None]
        count = len(extra) if isinstance(extra, list) else 1
        raise BadRow(None, f"has {count} more cells than the header has names")
    return row


def field_text(row: Row, field: str, what: str) -> str:
    """The text of `row[field]` (a number written as text), stripped; BadRow if it is missing,
    empty, or neither text nor a number. `what` says what the field holds, for the message."""
    if field not in row:
        names = ", ".join(map(repr, (k for k in row if k is not None))) or "none"
        raise BadRow(field, f"is missing ({what}; the row's fields: {names})")
    value = row[field]
    if value is None:  # JSON's null, or a CSV row with fewer cells than its header
        raise BadRow(field, f"is empty ({what})")
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        text = str(value)
    else:
        raise BadRow(field, f"must be text or a number ({what}), not {shown(value)}")
    if not text:
        raise BadRow(field, f"is empty ({what})")
    return text


def without_heldout(
    training: Sequence[Keyed[T]], heldout: Sequence[Keyed[T]]
) -> tuple[list[Keyed[T]], int]:
    """`training` less the problems a held-out problem asks too, and how many those were."""
    asked = {k.key for k in heldout}
    kept = [k for k in training if k.key not in asked]
    return kept, len(training) - len(kept)


def split_heldout(
    problems: Sequence[Keyed[T]], share: float, seed: int = 0
) -> tuple[list[Keyed[T]], list[Keyed[T]]]:
    """(training, held-out): a seeded `share` of the problems held out, at least one and not
    all; OptionError (for `heldout`) when fewer than two problems are left to split."""
    if len(problems) < 2:
        raise OptionError(
            "heldout",
            "heldout needs a training source of at least two distinct problems to split, "
            f"or a test source (got {len(problems)})",
        )
    order = list(range(len(problems)))
    random.Random(SPLIT_SEED if seed == 0 else f"{SPLIT_SEED}/{seed}").shuffle(order)
    count = min(len(problems) - 1, max(1, round(share * len(problems))))
    held = set(order[:count])
    return (
        [p for i, p in enumerate(problems) if i not in held],
        [p for i, p in enumerate(problems) if i in held],
    )


def fit_references(
    problems: Sequence[Keyed[T]],
    tokens: Callable[[T], int],
    max_tokens: int,
    skip: bool,
    error: Callable[[Keyed[T], int], RowError],
) -> tuple[list[Keyed[T]], int, int]:
    """(the problems whose reference takes at most `max_tokens` tokens, how many did not,
    the most tokens a kept reference takes); `error(problem, tokens)` is raised for the first
    that does not fit, unless `skip`."""
    kept, dropped, longest = [], 0, 0
    for keyed in problems:
        needed = tokens(keyed.problem)
        if needed > max_tokens:
            if not skip:
                raise error(keyed, needed)
            dropped += 1
            continue
        kept.append(keyed)
        longest = max(longest, needed)
    return kept, dropped, longest


def epoch_draw(count: int, seed: int, step: int, size: int) -> list[int]:
    """Which of `count` training problems step `step` takes (see the module docstring)."""
    first = (step - 1) * size
    return [epoch_order(count, seed, i // count)[i % count] for i in range(first, first + size)]


@functools.lru_cache(maxsize=64)
def epoch_order(count: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The order of `count` problems in epoch `epoch` of a run seeded `seed`.

    Seeding `random.Random` with a string hashes it with SHA-512: the same in
    every process, unlike `hash()`.
    """
    order = list(range(count))
    random.Random(f"mathrl/math/seed={seed}/epoch={epoch}").shuffle(order)
    return tuple(order)
