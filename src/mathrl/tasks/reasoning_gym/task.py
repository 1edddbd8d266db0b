"""`ReasoningGym`: procedural reasoning problems from reasoning-gym, scored by its own graders.

reasoning-gym (an optional extra: `pip install 'mathrl[reasoning-gym]'`) has about a
hundred seeded problem generators (`reasoning_gym.factory.DATASETS`), each with a
`score_answer(answer, entry)` in [0, 1]. This task draws from one of them (`dataset`,
with its own settings; see `settings.py`) and rewards with that score.

Problems. A draw for (stream, seed, step) creates the dataset in windows of WINDOW
problems, each window seeded by a hash of all four, and keeps the problems of its
stream: one in HELDOUT_EVERY questions, chosen by a hash of its text, is held out,
and training keeps the others. So a held-out question is never a training question,
at any seed or step, even where the generator repeats itself; and the problems are a
function of the arguments alone, the same in every process and after a resume
(generators that draw from the `random` module get it seeded by the problem, and
restored after). A problem the generator fails to make, or makes with an empty
question, is skipped and counted; `prepare` checks the first problems a run draws
(held-out and step 1's) against the token budget, and says how many were skipped.

Options. The task's name is `reasoning-gym.<dataset>`, so checkpoint names say which
dataset; `options` holds the dataset (unless it is the default) and each setting given.

Reward. The prompt (a conversation) asks for the final answer between `<answer>` and
`</answer>` (`answers.py`); the reward has two parts: `score`, the dataset's own
score of that answer, and `format`, 0.1 for an answer given so. A completion without
one, cut off at the token limit, with an answer longer than `answers.answer_limit`, or
one spelling digits outside ASCII scores 0. `final_answer` names each completion's
answer, so `eval` reports maj@k. The scorer runs in a child process (`scoring.py`): one that raises,
crashes, takes more than SCORE_SECONDS, or returns what is not a number scores 0,
and a number outside [0, 1] is clipped. Correct (`evaluate`) is a full score.

Without the library, the task is still listed and built, and `preflight` raises
`Unavailable` saying how to install it. Datasets whose scorer runs the answer as
Python, or whose problems are not a function of the seed, are refused, each with its
reason (`settings.REFUSED`). Not for: grading free-form math (the math task) or
running model code (the code task's sandbox).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import inspect
import io
import math
import random
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from mathrl.adapter import Message, OptionError, Response, Unavailable
from mathrl.backend import Tokenizer
from mathrl.resolved import OptionValue
from mathrl.rewards import ended_tokens
from mathrl.tasks.reasoning_gym import answers
from mathrl.tasks.reasoning_gym.answers import FORMAT, SYSTEM, final_answer, in_asked_form
from mathrl.tasks.reasoning_gym.scoring import ScoringProcesses
from mathrl.tasks.reasoning_gym.settings import check_dataset, convert_settings
from mathrl.text import describe, shown_end

INSTALL = "pip install 'mathrl[reasoning-gym]'"
DEFAULT_DATASET = "basic_arithmetic"
HELDOUT_EVERY = 10
"""One question in HELDOUT_EVERY is held out (by a hash of its text)."""
WINDOW = 64
"""Problems made per dataset created during a draw."""
MAX_WINDOWS = 200
"""A draw gives up after this many windows without enough problems of its stream."""
SCORE_SECONDS = 5.0
"""The longest one score may take (in its process, see `scoring.py`): then it is 0."""
PREPARED = 64
"""How many held-out and first-step problems `prepare` checks against the token budget."""
SEEDS = 2**31 - 2**20
"""Window seeds lie below this: reasoning-gym adds the index, and some of its generators
seed libraries that take 32-bit seeds only."""


class DrawError(RuntimeError):
    """A dataset gave too few problems of a stream (held-out or training) to draw from."""


@dataclass(frozen=True, slots=True)
class Item:
    """One reasoning-gym problem: its question, its reference answer (None if it has
    none: some datasets score by simulation), and the entry its scorer reads."""

    question: str
    answer: str | None
    entry: Mapping[str, Any] = field(compare=False, repr=False)


def is_heldout(question: str) -> bool:
    """True for the questions kept out of training (a fixed share, by hash of the text)."""
    data = question.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data, digest_size=8, person=b"mathrl-rg-split").digest()
    return int.from_bytes(digest, "little") % HELDOUT_EVERY == 0


def window_seed(dataset: str, stream: str, seed: int, step: int, window: int) -> int:
    """The reasoning-gym seed of one window of one draw: a hash, stable in every process."""
    key = f"mathrl/reasoning-gym/{dataset}/{stream}/seed={seed}/step={step}/window={window}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEEDS


def _library() -> ModuleType | None:
    """reasoning_gym, imported on first use (it takes about a second), or None if missing."""
    try:
        return importlib.import_module("reasoning_gym")
    except ImportError:
        return None


class ReasoningGym:
    """A reasoning-gym dataset as a task: its problems, its scorer, answers in `<answer>` tags."""

    stop = ()
    """The answer is the assistant's turn."""
    max_tokens = 2048
    """Room to reason before answering; on the fake (a token a byte) it fits the longest
    references, ARC grids of up to about 1,800 bytes."""

    def __init__(self, dataset: str = DEFAULT_DATASET, **settings: OptionValue) -> None:
        """Check the options (OptionError for a bad one) and load the dataset's generator.

        Args:
            dataset: the reasoning-gym dataset to draw from, e.g. chain_sum (its 106 are
                listed in reasoning_gym.factory.DATASETS; a few are refused, see settings.py).
            **settings: that dataset's own settings, by field name (e.g. min_terms=2): text
                is converted by the field's type, a list from comma-separated values.
        """
        self.dataset = dataset
        self.name = "reasoning-gym." + re.sub(r"[^A-Za-z0-9_.-]", "-", dataset)[:48]
        self._failed = 0
        """Problems the generator failed to make (or made with an empty question), skipped."""
        library = _library()
        self._library = library
        if library is None:  # preflight says so; options are recorded as given
            self.options: dict[str, OptionValue] = _options(dataset, dict(settings))
            self.version = _source_version("missing")
            return
        datasets = library.factory.DATASETS
        check_dataset(dataset, datasets)
        kwargs, recorded = convert_settings(dataset, datasets[dataset][1], settings)
        self.options = _options(dataset, recorded)
        self.version = _source_version(_installed_version())
        create: Callable[..., Any] = library.create_dataset
        self._create: Callable[[int, int], Any] = lambda seed, size: create(
            dataset, seed=seed, size=size, **kwargs
        )
        try:
            with _quiet(), _own_random(0):
                scorer = self._create(0, 1)
                scorer[0]
        except Exception as exc:
            raise OptionError(
                ",".join(sorted(recorded)) or "dataset",
                f"reasoning-gym's {dataset} cannot make problems with "
                f"{_shown_settings(recorded)}: {type(exc).__name__}: {describe(exc, 200)}",
            ) from None
        self._scoring = ScoringProcesses(
            lambda answer, entry: scorer.score_answer(answer=answer, entry=entry), SCORE_SECONDS
        )

    def preflight(self) -> str:
        """The library and dataset this task relies on; Unavailable if it is not installed."""
        self._need()
        return f"reasoning-gym {_installed_version()}, dataset {self.dataset}"

    def prepare(self, tokenizer: Tokenizer, max_tokens: int) -> str:
        """Check the first problems a run draws against the model's tokenizer: the held-out
        set's first PREPARED and training step 1's, each reference within `max_tokens` (a
        generator makes its problems as they are drawn: there is no file of them to check
        whole); OptionError for one that does not fit. The set-up line says what was seen."""
        self._need()
        drawn = [
            *self._draw("heldout", 0, 0, PREPARED, heldout=True),
            *self._draw("train", 0, 1, PREPARED, heldout=False),
        ]
        longest = 0
        for item in drawn:
            needed = ended_tokens(tokenizer, self.reference_completion(item), self.stop)
            if needed > max_tokens:
                raise OptionError(
                    "max_tokens",
                    f"reasoning-gym's {self.dataset} makes problems whose reference takes "
                    f"{needed} tokens, more than max_tokens={max_tokens} (the answer to "
                    f"{shown_end(item.question, 60)}): raise max_tokens, or choose settings that "
                    "make smaller problems",
                )
            longest = max(longest, needed)
        failed = f", {self._failed} the generator failed to make skipped" if self._failed else ""
        return (
            f"reasoning-gym {self.dataset}: the first {len(drawn)} problems checked (held-out "
            f"and step 1's){failed}; the longest reference takes {longest} of {max_tokens} tokens"
        )

    def build_dataset(self, seed: int, step: int, size: int) -> list[Item]:
        return self._draw("train", seed, step, size, heldout=False)

    def heldout_dataset(self, seed: int, size: int) -> list[Item]:
        return self._draw("heldout", seed, 0, size, heldout=True)

    def make_prompt(self, problem: Item) -> list[Message]:
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": problem.question},
        ]

    def compute_reward(self, completion: str, problem: Item) -> dict[str, float]:
        """`score`: the dataset's own score of the final answer; `format`: one was given."""
        answer = self.final_answer(completion)
        if answer is None or len(answer) > answers.answer_limit(problem.answer):
            return {"score": 0.0, "format": 0.0}
        return {"score": self._score(answer, problem), "format": FORMAT}

    def final_answer(self, completion: str) -> str | None:
        """The answer between `<answer>` tags (`answers.final_answer`), for maj@k; None when
        there is none, or the completion was cut off at the token limit before it ended."""
        if isinstance(completion, Response) and completion.ended == "length":
            return None
        return final_answer(completion)

    def reference_completion(self, problem: Item) -> str:
        return in_asked_form(problem.answer or "")

    def wrong_completions(self, problem: Item) -> list[str]:
        """Near misses (`answers.near_misses`) that this dataset scores below the reference."""
        best = sum(self.compute_reward(self.reference_completion(problem), problem).values())
        misses = answers.near_misses(problem.answer or "")
        return [w for w in misses if sum(self.compute_reward(w, problem).values()) < best]

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of completions with a full score (and the answer in the asked form)."""
        full = 1.0 + FORMAT - 1e-9
        return sum(1 for r in rewards if r >= full) / len(rewards) if rewards else 0.0

    # -- drawing and scoring ----------------------------------------------------------

    def _need(self) -> ModuleType:
        if self._library is None:
            raise Unavailable(
                f"the reasoning-gym task needs the reasoning-gym library, which is not "
                f"installed: {INSTALL}"
            )
        return self._library

    def _draw(self, stream: str, seed: int, step: int, size: int, heldout: bool) -> list[Item]:
        """`size` problems of the stream, from windows seeded by (stream, seed, step)."""
        self._need()
        items: list[Item] = []
        failed = 0
        if size <= 0:
            return items
        for window in range(MAX_WINDOWS):
            first = window_seed(self.dataset, stream, seed, step, window)
            with _quiet(), _own_random(first):
                source = self._create(first, WINDOW)
            for index in range(WINDOW):
                try:
                    with _quiet(), _own_random(first + index):
                        entry = source[index]
                    item = Item(str(entry["question"]), _text(entry["answer"]), entry)
                    if not item.question.strip():
                        raise ValueError("an empty question")
                except Exception:  # the generator's own failure: skip this problem, counted
                    failed += 1
                    self._failed += 1
                    continue
                if is_heldout(item.question) == heldout:
                    items.append(item)
                    if len(items) == size:
                        return items
        tries, kind = MAX_WINDOWS * WINDOW, "held-out" if heldout else "training"
        why = (
            f"its generator failed on {failed} of them"
            if failed > tries // 2
            else "with these settings it makes too few distinct questions to split them into "
            "training and held-out sets"
        )
        raise DrawError(
            f"reasoning-gym's {self.dataset} gave {len(items)} {kind} problems of {size} "
            f"in {tries} tries: {why}"
        )

    def _score(self, answer: str, problem: Item) -> float:
        """The dataset's score of `answer`, in [0, 1]; 0 where it cannot give one."""
        if answers.has_lookalike_digits(answer):
            return 0.0
        number = self._scoring(answer, problem.entry)
        if number is None or not math.isfinite(number):
            return 0.0
        return min(max(number, 0.0), 1.0)


@contextlib.contextmanager
def _own_random(seed: int) -> Iterator[None]:
    """The `random` module seeded with `seed` meanwhile, and given back as it was after.

    Some generators draw from it (list_functions, and codeio's sample programs): so
    their problems are a function of the problem's seed too, and the caller's random
    state is untouched (as the Adapter contract asks).
    """
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


def _quiet() -> contextlib.AbstractContextManager[Any]:
    """Generators that print (bf prints progress dots) keep it off stdout, the run's output."""
    return contextlib.redirect_stdout(io.StringIO())


def _installed_version() -> str:
    """The installed distribution's version (the module's own `__version__` lags it)."""
    try:
        return importlib.metadata.version("reasoning-gym")
    except importlib.metadata.PackageNotFoundError:  # imported from a checkout on the path
        return "unknown"


def _text(answer: object) -> str | None:
    return None if answer is None else str(answer)


def _options(dataset: str, recorded: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """The options to record: the dataset when not the default, then each setting given."""
    chosen: dict[str, OptionValue] = {} if dataset == DEFAULT_DATASET else {"dataset": dataset}
    return chosen | dict(recorded)


def _shown_settings(recorded: Mapping[str, OptionValue]) -> str:
    if not recorded:
        return "its default settings"
    return ", ".join(f"{k}={v!r}" for k, v in sorted(recorded.items()))


def _source_version(library_version: str) -> str:
    """A hash of this package's source and the library's version: problems and scores
    change with either, so checkpoint names do too."""
    package = sys.modules[__name__.rpartition(".")[0]]
    modules = [package, answers, sys.modules[convert_settings.__module__]]
    modules += [sys.modules[ScoringProcesses.__module__], sys.modules[__name__]]
    sources = [inspect.getsource(m) for m in modules]
    text = "\n".join([*sources, f"reasoning-gym {library_version}"])
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
