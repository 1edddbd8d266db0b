"""`DatasetTask`: a task made of rows and reward functions, with no class to write.

The built-in task `dataset`. Rows come from a file or a dataset (`sources`),
each checked before the first request (`rows`); the prompt is a format
string over a row's fields; the reward is one or more plain functions of a
completion and the row's fields (`functions`); the reference, which
`check-adapter` and the fake backend use, is the row's answer field:

    python -m mathrl --adapter dataset --task-arg train=units.csv \\
        --task-arg prompt='{value} {unit_from} in {unit_to}:' --task-arg answer=answer \\
        --task-arg reward=units.py:close

or from Python, the same options as keyword arguments, the functions as
themselves: `DatasetTask(train="units.csv", prompt="...", reward=close)`.

A problem is a `Row`: its prompt, its answer, its fields and where it is.
A completion cut off at the token limit earns 0 (it never finished its
answer), and the functions never see it. Otherwise the reward is each
function's value times its weight: one function's value as it is (a number
or its named parts), several functions' as parts named by function. A
completion is correct when its reward reaches `correct_at` times the sum of
the weights (every function's full credit, for functions that score out of
1). Metrics (`metrics`) are functions of the same kind, reported beside the
reward.

Without an answer field (`answer=`, empty) the task has no references: it
trains on MinT and runs in `eval`, but `check-adapter` skips the checks that
compare with a reference and the fake backend refuses it (it learns to write
references). Not for: episodes, tools or group rewards (write a class: see
`mathrl.adapter`).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import PurePath
from typing import Any

from mathrl.adapter import Message, NoReference, OptionError, Response
from mathrl.backend import Tokenizer
from mathrl.resolved import OptionValue
from mathrl.rewards import ended_tokens
from mathrl.tasks.dataset.data import Data
from mathrl.tasks.dataset.functions import (
    FunctionSpec,
    Named,
    RowFunction,
    call,
    check_takes,
    functions,
    recorded,
)
from mathrl.tasks.dataset.rows import BadRow, Keyed, cells, field_text
from mathrl.tasks.dataset.sources import FIXTURE, HF, SPEC_HELP, Source
from mathrl.tasks.dataset.sources import Row as Fields
from mathrl.text import shown

EXACT = "exact"
"""The default reward: 1.0 when the completion, stripped, is the answer, stripped."""
RESERVED = ("completion",)
"""Field names a function cannot take by name: the completion is its first argument."""


@dataclass(frozen=True, slots=True)
class Row:
    """One problem: its prompt (text, or a conversation's messages), the answer it asks for
    (None: the task has no answer field), and its row's fields."""

    prompt: str | tuple[tuple[str, str], ...]
    answer: str | None
    fields: tuple[tuple[str, Any], ...]
    where: str = field(default="", compare=False)
    """Where its row is (`train file 'units.csv' line 14`), for messages."""


def exact_on(field_name: str) -> RowFunction:
    """The `exact` reward for answers in field `field_name`: 1.0 when the completion, stripped,
    is the answer, stripped; else 0.0."""

    def exact(completion: str, **fields: object) -> float:
        return 1.0 if completion.strip() == str(fields.get(field_name, "")).strip() else 0.0

    return exact


class DatasetTask:
    """Rows and reward functions as a task (see the module docstring)."""

    name = "dataset"
    """`dataset.` and its training data's name, once built (`task_name`)."""

    def __init__(
        self,
        train: str = "",
        test: str = "",
        prompt: str = "{prompt}",
        system: str = "",
        chat: bool = False,
        answer: str = "answer",
        reward: FunctionSpec = EXACT,
        weights: str | Sequence[float] = "",
        metrics: FunctionSpec = "",
        correct_at: float = 1.0,
        stop: str = "\\n",
        max_tokens: int = 32,
        heldout: float = 0.1,
        split_seed: int = 0,
        skip_bad_rows: bool = False,
    ) -> None:
        """Read the rows, check each of them and every option (OptionError names a bad one).

        Args:
            train: the rows to train on: a .jsonl, .json, .csv or .parquet file,
                fixture:NAME or hf:NAME[:CONFIG]:SPLIT.
            test: the held-out rows, a source as train is; empty: a seeded share of
                train (see heldout).
            prompt: the prompt, a format string over a row's fields, e.g. 'Convert
                {value} {unit_from} to {unit_to}.' (a conversation's user message with
                system or chat).
            system: a system message, a format string like prompt; given, the prompt is a
                conversation.
            chat: true: the prompt is a conversation (a user message), for a chat model.
            answer: the field that holds each row's answer, the reference completion
                (or empty, for rows that have none: see the module docstring).
            reward: the reward: FILE.py:FUNCTION or MODULE:FUNCTION, several joined by
                commas; each takes a completion and the row's fields by name (the default,
                exact, pays 1 when the completion is the answer).
            weights: one weight a reward function, joined by commas (default 1 each).
            metrics: functions like reward's, reported beside it, not trained on.
            correct_at: the share of the full reward (the sum of the weights) a
                completion must reach to count as correct, above 0 and at most 1.
            stop: the text that ends a completion of a text prompt (\\n, \\t and \\\\
                are read as escapes), or empty for none; a conversation ends with its turn.
            max_tokens: tokens per completion, 1 to 32768.
            heldout: the share of train's rows held out when test is empty, above 0
                and at most 0.5.
            split_seed: seeds which rows are held out when test is empty.
            skip_bad_rows: leave out (and count) a row that cannot be used, instead of
                refusing the data at it.
        """
        _need("train", train, f"your rows: a {SPEC_HELP}", isinstance(train, str) and train != "")
        _need("test", test, "a source, or empty", isinstance(test, str))
        for option, value in (("prompt", prompt), ("system", system)):
            _need(option, value, "a format string over a row's fields", isinstance(value, str))
        _need("prompt", prompt, "a non-empty format string over a row's fields", bool(prompt))
        _need("chat", chat, "true or false", isinstance(chat, bool))
        _need("answer", answer, "a field name, or empty", isinstance(answer, str))
        _need("correct_at", correct_at, "a number above 0 and at most 1", _share(correct_at, 1))
        _need("stop", stop, "text, or empty", isinstance(stop, str))
        _need("max_tokens", max_tokens, "an integer from 1 to 32768",
              _is_int(max_tokens) and 1 <= max_tokens <= 32768)  # fmt: skip
        _need("heldout", heldout, "a number above 0 and at most 0.5", _share(heldout, 0.5))
        _need("split_seed", split_seed, "an integer", _is_int(split_seed))
        _need("skip_bad_rows", skip_bad_rows, "true or false", isinstance(skip_bad_rows, bool))
        if test and (heldout, split_seed) != (_DEFAULT_HELDOUT, 0):
            option = "heldout" if heldout != _DEFAULT_HELDOUT else "split_seed"
            raise OptionError(
                option, f"{option} splits train only when test is empty (got test={test})"
            )
        if (chat or system) and stop not in ("", _DEFAULT_STOP):
            raise OptionError(
                "stop",
                f"stop ends a text prompt's completion; a conversation's ends with its "
                f"turn (got stop={stop!r} with {'system' if system else 'chat=true'})",
            )
        self.templates = {"prompt": _fields_of(prompt, "prompt")}
        if system:
            self.templates["system"] = _fields_of(system, "system")
        self.prompt, self.system = prompt, system
        self.chat = chat or bool(system)
        self.answer = answer
        if not answer and isinstance(reward, str) and EXACT in reward.split(","):
            raise OptionError("reward", "reward=exact needs an answer field (answer=FIELD)")
        self.rewards = functions(reward, weights, "reward", {EXACT: exact_on(answer)})
        if not self.rewards:
            raise OptionError("reward", "reward must name at least one function (got '')")
        self.measures = functions(metrics, "", "metrics") if metrics else []
        self.correct_at = correct_at
        self.full = math.fsum(n.weight for n in self.rewards)
        self.max_tokens = max_tokens
        self.skip_bad_rows = skip_bad_rows
        unescaped = stop.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
        self.stop: tuple[str, ...] = () if self.chat or not unescaped else (unescaped,)
        self._data = Data.load(
            train, test, self._row, skip=skip_bad_rows, heldout=heldout, split_seed=split_seed
        )
        self.name = task_name(train)
        first = dict(self._data.training[0].problem.fields)
        check_takes(self.rewards, first, "reward")
        check_takes(self.measures, first, "metrics")
        given: dict[str, OptionValue] = {
            "train": train, "test": test, "prompt": prompt, "system": system, "chat": chat,
            "answer": answer,
            "reward": recorded(self.rewards),
            "weights": ",".join(f"{n.weight:g}" for n in self.rewards) if weights else "",
            "metrics": recorded(self.measures), "correct_at": correct_at, "stop": stop,
            "max_tokens": max_tokens, "heldout": heldout, "split_seed": split_seed,
            "skip_bad_rows": skip_bad_rows,
        }  # fmt: skip
        self.options: dict[str, OptionValue] = self._data.recorded(
            {k: v for k, v in given.items() if v != _DEFAULTS[k]}
        )
        self.data = self._data.digests
        """Each source's content digest: a changed file gives the run new checkpoint names."""
        self.version = _version([*self.rewards, *self.measures])
        """This package's code and the functions' modules': editing a reward gives new names."""

    # -- rows --------------------------------------------------------------------------

    def _row(self, source: Source, row: Fields, index: int) -> Keyed[Row]:
        """Row `index` of `source` as a problem; BadRow naming the field that is wrong."""
        fields = cells(row)
        for name in fields:
            if name in RESERVED and self.rewards:
                raise BadRow(name, "is reserved: a reward function takes the completion by it")
        texts = {}
        for option, names in self.templates.items():
            for name in names:
                texts[name] = field_text(fields, name, f"the {option} template names it")
        made = {option: getattr(self, option).format_map(texts) for option in self.templates}
        if not made["prompt"].strip():
            raise BadRow(None, f"makes an empty prompt of {shown(self.prompt)}")
        answer = field_text(fields, self.answer, "the answer") if self.answer else None
        prompt: str | tuple[tuple[str, str], ...] = made["prompt"]
        if self.chat:
            system = (("system", made["system"]),) if "system" in made else ()
            prompt = (*system, ("user", made["prompt"]))
        problem = Row(prompt, answer, tuple(fields.items()), source.where(index))
        return Keyed(problem, _key(prompt), answer, problem.where)

    # -- the contract ----------------------------------------------------------------

    def build_dataset(self, seed: int, step: int, size: int) -> list[Row]:
        return self._data.draw(seed, step, size)

    def heldout_dataset(self, seed: int, size: int) -> list[Row]:
        """The held-out rows in their source's order, the same for every seed (so runs
        compare), repeated if `size` is larger."""
        return self._data.heldout_problems(size)

    def make_prompt(self, problem: Row) -> str | list[Message]:
        if isinstance(problem.prompt, str):
            return problem.prompt
        return [{"role": role, "content": text} for role, text in problem.prompt]

    def compute_reward(self, completion: str, problem: Row) -> float | dict[str, float]:
        """Each function's weighted value (module docstring); 0 for a completion cut off."""
        response = _as_given(completion)
        if response.ended == "length":
            return 0.0 if len(self.rewards) == 1 else {n.name: 0.0 for n in self.rewards}
        parts = call(self.rewards, response, dict(problem.fields), problem.where)
        if len(self.rewards) == 1 and list(parts) == [self.rewards[0].name]:
            return parts[self.rewards[0].name]
        return parts

    def metrics(self, completion: str, problem: Row) -> dict[str, float]:
        if not self.measures:
            return {}
        return call(self.measures, _as_given(completion), dict(problem.fields), problem.where)

    def reference_completion(self, problem: Row) -> str:
        """The row's answer; a text prompt's continues after a space unless the prompt ends in
        one. NoReference when the task has no answer field."""
        if problem.answer is None:
            raise NoReference(
                "the dataset task was given no answer field (answer=), so it has no "
                "reference completions"
            )
        if isinstance(problem.prompt, str) and not problem.prompt[-1:].isspace():
            return " " + problem.answer
        return problem.answer

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of completions whose reward reaches `correct_at` x the sum of the
        weights."""
        bar = self.correct_at * self.full - 1e-9
        return sum(1 for r in rewards if r >= bar) / len(rewards) if rewards else 0.0

    def prepare(self, tokenizer: Tokenizer, max_tokens: int) -> str:
        """Check every row's reference against `max_tokens` on the model's tokenizer (or, with
        skip_bad_rows, leave out those that do not fit); the set-up line on the data."""
        if self.answer:
            self._data.fit(
                lambda p: ended_tokens(tokenizer, self.reference_completion(p), self.stop),
                max_tokens,
                self.skip_bad_rows,
                self.answer,
            )
        return self._data.line()


_DEFAULTS: dict[str, object] = {
    name: p.default
    for name, p in inspect.signature(DatasetTask.__init__).parameters.items()
    if name != "self"
}
"""Each option's default, from the constructor: the one place they are written."""
_DEFAULT_HELDOUT, _DEFAULT_STOP = _DEFAULTS["heldout"], _DEFAULTS["stop"]


def task_name(train: str) -> str:
    """The task's name, from its training data's (`dataset.units` for `units.csv` or
    `fixture:units`, `dataset.gsm8k` for `hf:openai/gsm8k:main:train`): runs of different
    data are told apart in the run folders' and checkpoints' names."""
    if train.startswith(HF):
        stem = train.removeprefix(HF).split(":")[0].rstrip("/").rsplit("/", 1)[-1]
    else:
        stem = PurePath(train.removeprefix(FIXTURE)).stem
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).strip("-._")[:48]
    return f"dataset.{cleaned}" if cleaned else "dataset"


def _version(named: Sequence[Named]) -> str:
    """A hash of this package's source and of the source of each function's module (or the
    function's own, or its name, when there is no module source to read)."""
    digest = hashlib.blake2b(digest_size=8)
    files = resources.files(__package__)
    for name in sorted(p.name for p in files.iterdir() if p.name.endswith(".py")):
        digest.update(files.joinpath(name).read_bytes())
    for n in named:
        module = sys.modules.get(getattr(n.function, "__module__", "") or "")
        for source in (module, n.function) if module else (n.function,):
            try:  # TypeError: a callable object, whose source getsource cannot find
                digest.update(inspect.getsource(source).encode())
                break
            except (OSError, TypeError):
                continue
        else:
            digest.update(n.spec.encode())
    return digest.hexdigest()


def _fields_of(template: str, option: str) -> tuple[str, ...]:
    """The fields a format string names; OptionError unless it is one with plain names."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise OptionError(
            option,
            f"{option} must be a format string, e.g. 'Convert {{value}} {{unit}}.' "
            f"(got {shown(template, 80)}: {exc}; write {{{{ and }}}} for a brace)",
        ) from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or any(c in name for c in ".[]") or spec or conversion:
            raise OptionError(
                option,
                f"{option} must name a row's fields plainly, like {{answer}} (got "
                f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} "
                f"in {shown(template, 80)})",
            )
        names.append(name)
    return tuple(dict.fromkeys(names))


def _key(prompt: str | tuple[tuple[str, str], ...]) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\x00".join(f"{role}\x01{text}" for role, text in prompt)


def _as_given(completion: str) -> Response:
    """The completion as a function gets it: its text without the stop that ended it."""
    if isinstance(completion, Response):
        return Response(completion.text, completion.ended, None, completion.turn, completion.tokens)
    return Response(completion)


def _need(option: str, value: object, must: str, ok: bool) -> None:
    if not ok:
        raise OptionError(option, f"{option} must be {must} (got {shown(value)})")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _share(value: object, high: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= high
