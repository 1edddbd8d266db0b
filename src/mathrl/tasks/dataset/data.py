"""`Data`: a data task's rows, made problems, split, drawn, and fitted to the token budget.

For: the data tasks (`dataset`, `math`), which differ only in what a row
means. One loader (`sources.read_source`) and one checker and splitter
(`rows`) serve both: a task gives `Data.load` its sources and the function
that makes a problem of a row, and gets back its training and held-out
problems, the digests that make the data part of the run (`Data.digests`,
a task's `data`), and the set-up line (`Data.line`). Not for: prompts or
rewards.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from mathrl.adapter import OptionError
from mathrl.resolved import OptionValue
from mathrl.tasks.dataset.rows import (
    Counts,
    Keyed,
    RowError,
    checked,
    epoch_draw,
    fit_references,
    split_heldout,
    without_heldout,
)
from mathrl.tasks.dataset.sources import Row, Source, read_source
from mathrl.text import shown

T = TypeVar("T")
Make = Callable[[Source, Row, int], Keyed[T]]
"""Makes row `index` of a source a problem, or raises `rows.BadRow`."""


@dataclass(slots=True)
class Data(Generic[T]):
    """A data task's problems: training ones, held-out ones, and what became of the rows."""

    sources: tuple[Source, ...]
    training: list[Keyed[T]]
    heldout: list[Keyed[T]]
    counts: Counts
    split: str
    """Where the held-out problems come from: a test source, or a share of train."""
    longest: tuple[int, int] | None = None
    """The most tokens a reference takes, and the max_tokens it was fitted to (`fit`)."""

    @classmethod
    def load(
        cls,
        train: str,
        test: str,
        make: Make[T],
        *,
        skip: bool = False,
        heldout: float = 0.1,
        split_seed: int = 0,
    ) -> Data[T]:
        """Read `train` (and `test`, if given), check every row, drop duplicates and the
        training problems a held-out one asks too; without `test`, hold out a seeded
        `heldout` share of train. OptionError (or RowError) names what cannot be used."""
        train_source = read_source(train, "train")
        training, counts = _problems(train_source, make, skip)
        sources = [train_source]
        if test:
            test_source = read_source(test, "test")
            held, test_counts = _problems(test_source, make, skip)
            training, overlapping = without_heldout(training, held)
            counts = replace(counts + test_counts, overlapping=overlapping)
            sources.append(test_source)
            split = test
        else:
            training, held = split_heldout(training, heldout, split_seed)
            split = f"a {heldout:g} share of train"
        if not training:
            raise OptionError("test", f"test holds every problem of train ({train}): none is left")
        return cls(tuple(sources), training, held, counts, split)

    @property
    def digests(self) -> dict[str, str]:
        """Each source's content digest, by the option that names it (a task's `data`)."""
        return {s.option: s.digest for s in self.sources}

    @property
    def specs(self) -> dict[str, str]:
        """Each source as a run records it (a file's absolute path), by its option."""
        return {s.option: s.spec for s in self.sources}

    def recorded(self, options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
        """`options` with each file source's path made absolute: a run folder records these,
        and then works from any folder."""
        specs = self.specs
        return {k: specs.get(k, v) if isinstance(v, str) else v for k, v in options.items()}

    def draw(self, seed: int, step: int, size: int) -> list[T]:
        """Step `step`'s training problems: one seeded shuffle an epoch (`rows.epoch_draw`)."""
        pool = self.training
        return [pool[i].problem for i in epoch_draw(len(pool), seed, step, size)]

    def heldout_problems(self, size: int) -> list[T]:
        """The held-out problems in their source's order, the same for every seed (so runs
        compare), repeated if `size` is larger."""
        pool = self.heldout
        return [pool[i % len(pool)].problem for i in range(size)]

    def take_examples(self, count: int, seed: str) -> list[T]:
        """`count` training problems, drawn by `seed`, taken out of training (they are shown
        in every prompt: a problem must not see its own answer)."""
        if count > len(self.training) - 1:
            raise OptionError(
                "few_shot",
                f"few_shot must leave a training problem to train on: train has "
                f"{len(self.training)} (got few_shot={count})",
            )
        chosen = set(random.Random(seed).sample(range(len(self.training)), count))
        examples = [k.problem for i, k in enumerate(self.training) if i in chosen]
        self.training = [k for i, k in enumerate(self.training) if i not in chosen]
        return examples

    def fit(
        self,
        tokens: Callable[[T], int],
        max_tokens: int,
        skip: bool,
        field: str,
    ) -> None:
        """Check every problem's reference against `max_tokens` (`tokens` counts one): a RowError
        for the first that does not fit, or with `skip` leave those out and count them."""

        def error(keyed: Keyed[T], needed: int) -> RowError:
            return RowError(
                "max_tokens",
                f"{keyed.where}: field {shown(field, 60)} makes a reference of {needed} tokens, "
                f"more than max_tokens={max_tokens}: raise max_tokens, or skip such rows "
                "(skip_bad_rows=true)",
            )

        training, dropped, longest = fit_references(self.training, tokens, max_tokens, skip, error)
        heldout, dropped_held, longest_held = fit_references(
            self.heldout, tokens, max_tokens, skip, error
        )
        if not training or not heldout:
            kind = "training" if not training else "held-out"
            raise OptionError(
                "max_tokens",
                f"max_tokens={max_tokens} fits the reference of no {kind} problem (the "
                f"shortest takes {min(tokens(k.problem) for k in self.training + self.heldout)})",
            )
        self.training, self.heldout = training, heldout
        self.counts = replace(self.counts, too_long=self.counts.too_long + dropped + dropped_held)
        self.longest = max(longest, longest_held), max_tokens

    def line(self, *more: str) -> str:
        """The set-up line: rows read, problems made, rows dropped and why, `more`, and the
        longest reference in tokens once `fit` has counted it."""
        given = [s.given for s in self.sources]
        said = [self.counts.line(len(self.training), len(self.heldout), given), *more]
        if self.longest is not None:
            said.append(
                f"the longest reference takes {self.longest[0]} of {self.longest[1]} tokens"
            )
        return "; ".join(said)


def _problems(source: Source, make: Make[T], skip: bool) -> tuple[list[Keyed[T]], Counts]:
    problems, counts = checked(source, lambda row, index: make(source, row, index), skip)
    if not problems:
        first = f" ({counts.first_skipped})" if counts.first_skipped else ""
        raise OptionError(
            source.option,
            f"{source.option} must hold at least one usable row (got {len(source.rows)} rows, "
            f"none usable){first}",
        )
    return problems, counts
