"""`MathDatasetAdapter`: math word problems from a dataset, graded for equivalence.

The built-in task `math`. It reads a training source and a held-out one
(files, shipped fixtures or Hugging Face datasets, checked row by row:
`mathrl.tasks.dataset`), draws training problems one seeded shuffle per
epoch, asks for the final answer in `\\boxed{}` in a conversation or a
few-shot text (`prompts`), and grades the final answer against the gold one
(`answers`, `grading`).

Its reward has two parts: `correct`, 1.0 when the completion's final answer
is equivalent to the gold one, and `format`, 0.1 when the final answer is in
`\\boxed{}` as asked; a completion cut off at the token limit states no
answer, and earns neither. `evaluate` counts the completions that are
correct; `final_answer` names each completion's answer, so `eval` reports
maj@k. With no options it trains on the shipped fixture
(`fixture:gsm-train`) and evaluates on its test set (`fixture:gsm-test`).
The few-shot examples are rows of the training data (seeded, and then not
trained on), or with `examples=built-in` the word problems in `prompts`.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any, TypeGuard

from mathrl.adapter import Message, OptionError, Response, Unavailable
from mathrl.backend import Tokenizer
from mathrl.rewards import ended_tokens
from mathrl.tasks.dataset.data import Data
from mathrl.tasks.dataset.rows import Keyed
from mathrl.tasks.dataset.sources import FIXTURE, Row, Source
from mathrl.tasks.math import prompts
from mathrl.tasks.math.answers import (
    boxed_answer,
    exact_number,
    final_answer,
    wrong_answer,
)
from mathrl.tasks.math.grading import DEFAULT_TIMEOUT, Grader, math_verify_version, warm
from mathrl.tasks.math.problems import MathProblem, answer_format, keyed, make_problem
from mathrl.text import shown

CORRECT, FORMAT = 1.0, 0.1
"""The reward parts' values: a correct final answer, and one in `\\boxed{}`."""
PROMPTS = ("chat", "few-shot")
GRADERS = ("math-verify", "exact")
EXAMPLES = ("train", "built-in")
DEFAULT_TRAIN, DEFAULT_TEST = f"{FIXTURE}gsm-train", f"{FIXTURE}gsm-test"
MAX_SHOTS = len(prompts.EXAMPLES)
MAX_TIMEOUT = 60.0


class MathDatasetAdapter:
    """Math problems from a dataset; reward: a correct final answer, and the asked format."""

    name = "math"

    def __init__(
        self,
        train: str = DEFAULT_TRAIN,
        test: str = "",
        question: str = "question",
        answer: str = "answer",
        prompt: str = "chat",
        instruction: str = prompts.INSTRUCTION,
        few_shot: int = 1,
        examples: str = "train",
        heldout: float = 0.1,
        grader: str = "math-verify",
        grading_timeout: float = DEFAULT_TIMEOUT,
        max_tokens: int = 512,
        skip_bad_rows: bool = False,
    ) -> None:
        """Read the sources, check every row and every option (OptionError names a bad one).

        Args:
            train: the training problems: a .jsonl, .json, .csv or .parquet file,
                fixture:NAME (gsm-train, gsm-test, equivalence) or hf:NAME[:CONFIG]:SPLIT.
            test: the held-out problems, a source as train is; empty: fixture:gsm-test
                with the default train, else a seeded share of train (see heldout).
            question: the field of a row that holds the question (MATH: problem).
            answer: the field that holds the answer: GSM8K's #### line, MATH's last
                \\boxed{}, or a bare answer (MATH: solution).
            prompt: chat (a conversation for the chat template) or few-shot (text for
                a base model).
            instruction: what the prompt asks after each question; it must ask for
                the final answer in \\boxed{}.
            few_shot: worked examples shown before the question, 0 to 8.
            examples: where the worked examples come from: train (rows of the training
                data, drawn seeded and not trained on) or built-in (word problems written
                for this project, whatever the data).
            heldout: the share of train's distinct questions held out when test is
                empty and train is not the default, above 0 and at most 0.5.
            grader: math-verify (exact numbers, then math-verify; needs mathrl[math])
                or exact (exact numbers and identical answers only).
            grading_timeout: seconds one math-verify grading may take before it
                counts as wrong, above 0 and at most 60.
            max_tokens: tokens per completion, 32 to 32768.
            skip_bad_rows: leave out (and count) a row that cannot be used, instead of
                refusing the data at it.
        """
        given = dict(locals())
        del given["self"]
        _check_options(given)
        self.prompt, self.instruction, self.few_shot = prompt, instruction, few_shot
        self.max_tokens = max_tokens
        self.skip_bad_rows = skip_bad_rows
        self.stop: tuple[str, ...] = (prompts.TEXT_STOP,) if prompt == "few-shot" else ()
        self.grader = Grader(grader == "math-verify", grading_timeout)
        test = test or (DEFAULT_TEST if train == DEFAULT_TRAIN else "")
        if test and heldout != _DEFAULTS["heldout"]:
            raise OptionError(
                "heldout",
                f"heldout splits train only when test is empty (got heldout={heldout} "
                f"with test={test})",
            )
        self._data = Data.load(train, test, _maker(question, answer), skip=skip_bad_rows,
                               heldout=heldout)  # fmt: skip
        self.examples: tuple[MathProblem, ...] = (
            prompts.EXAMPLES[:few_shot]
            if examples == "built-in"
            else tuple(self._data.take_examples(few_shot, "mathrl/math/examples"))
        )
        chosen = {k: v for k, v in given.items() if v != _DEFAULTS[k]}
        self.options = self._data.recorded(chosen)
        self.data = self._data.digests
        """Each source's content digest: a changed file gives the run new checkpoint names."""
        self.version = _version(type(self))

    @property
    def training(self) -> tuple[MathProblem, ...]:
        """The training problems, in their source's order."""
        return tuple(k.problem for k in self._data.training)

    @property
    def heldout_problems(self) -> tuple[MathProblem, ...]:
        """The held-out problems, in their source's order."""
        return tuple(k.problem for k in self._data.heldout)

    def build_dataset(self, seed: int, step: int, size: int) -> list[MathProblem]:
        return self._data.draw(seed, step, size)

    def heldout_dataset(self, seed: int, size: int) -> list[MathProblem]:
        """The held-out problems in their source's order, the same for every seed (so runs
        compare), repeated if `size` is larger."""
        return self._data.heldout_problems(size)

    def make_prompt(self, problem: MathProblem) -> str | list[Message]:
        if self.prompt == "few-shot":
            return prompts.text_prompt(problem, self.instruction, self.examples)
        return prompts.chat_prompt(problem, self.instruction, self.examples)

    def compute_reward(self, completion: str, problem: MathProblem) -> dict[str, float]:
        if isinstance(completion, Response) and completion.ended == "length":
            return {"correct": 0.0, "format": 0.0}  # cut off: it never stated its answer
        text = completion.text if isinstance(completion, Response) else completion
        answer = final_answer(text)
        right = answer is not None and self.grader.equivalent(problem.answer, answer)
        boxed = boxed_answer(text) is not None
        return {"correct": CORRECT if right else 0.0, "format": FORMAT if boxed else 0.0}

    def final_answer(self, completion: str) -> str | None:
        """The answer a completion states (`answers.final_answer`), a plain number written one
        way (`72`, `3/4`) however it was (`72.0`, `\\frac{3}{4}`); None if it states none."""
        if isinstance(completion, Response) and completion.ended == "length":
            return None
        text = completion.text if isinstance(completion, Response) else completion
        answer = final_answer(text)
        if answer is None:
            return None
        number = exact_number(answer)
        if number is None:
            return " ".join(answer.split())
        value = number.value
        return str(value.numerator) if value.denominator == 1 else str(value)

    def reference_completion(self, problem: MathProblem) -> str:
        """The final answer alone, boxed (see `prompts.reference`)."""
        lead = " " if self.prompt == "few-shot" else ""  # after "Answer:"
        return lead + prompts.reference(problem)

    def wrong_completions(self, problem: MathProblem) -> Sequence[str]:
        """A wrong final answer, boxed (the format part alone), and not boxed (nothing)."""
        lead = " " if self.prompt == "few-shot" else ""
        wrong = wrong_answer(problem.answer)
        return [f"{lead}{prompts.reference(MathProblem('', wrong, ''))}", lead + wrong]

    def preflight(self) -> str:
        """The grader; Unavailable when math-verify is asked for but absent. math-verify is
        loaded here, once, before any reward needs it."""
        if self.grader.math_verify:
            version = math_verify_version()
            if version is None:
                raise Unavailable(
                    "the math task's grader=math-verify needs math-verify, which is not "
                    "installed: pip install 'mathrl[math]' (or grader=exact: exact numbers only)"
                )
            # Its import and first gradings cost seconds: paid now, before training, not by
            # the first step's rewards (and every grading child starts with it loaded).
            warm()
            return (
                f"grading: exact numbers, then math-verify {version} in a child process "
                f"({self.grader.timeout:g} s limit each)"
            )
        return "grading: exact numbers and identical answers only"

    def prepare(self, tokenizer: Tokenizer, max_tokens: int) -> str:
        """Check every problem's reference against `max_tokens` on the model's tokenizer (or,
        with skip_bad_rows, leave out those that do not fit); the set-up line on the data."""
        self._data.fit(
            lambda p: ended_tokens(tokenizer, self.reference_completion(p), self.stop),
            max_tokens,
            self.skip_bad_rows,
            "answer",
        )
        shots = len(self.examples)
        where = "built-in" if self.options.get("examples") == "built-in" else "from train"
        examples = f"{shots} worked example{'s' * (shots != 1)} {where}" if shots else ""
        return self._data.line(*filter(None, [examples]))

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of completions whose final answer is correct."""
        return sum(1 for r in rewards if r >= CORRECT) / len(rewards) if rewards else 0.0


def _maker(question: str, answer: str) -> Any:
    """How a row of a source becomes a problem: the source's answer format decides what each
    of its answers must hold (`problems`)."""
    formats: dict[str, Any] = {}

    def make(source: Source, row: Row, index: int) -> Keyed[MathProblem]:
        if source.option not in formats:
            _fields_exist(source, question, answer)
            formats[source.option] = answer_format(source.rows, answer)
        problem = make_problem(row, question, answer, formats[source.option])
        return keyed(problem, source.where(index))

    return make


def _fields_exist(source: Source, question: str, answer: str) -> None:
    """OptionError for a field no row has: the option names the wrong field, not a row."""
    for field, name in ((question, "question"), (answer, "answer")):
        if source.rows and not any(field in row for row in source.rows):
            names = ", ".join(map(repr, (k for k in source.rows[0] if k is not None)))
            raise OptionError(
                name,
                f"{name} must name a field of {source.option}'s rows: no row has "
                f"{shown(field)} (the first row's fields: {names or 'none'})",
            )


_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(MathDatasetAdapter.__init__).parameters.items()
    if name != "self"
}
"""Each option's default, from the constructor: the one place they are written."""


def _check_options(given: dict[str, object]) -> None:
    """OptionError for the first option that is not what its `Args:` line says."""
    for option in ("train", "question", "answer"):
        value = given[option]
        _need(option, value, "a non-empty string", isinstance(value, str) and value != "")
    _need("test", given["test"], "a source, or empty", isinstance(given["test"], str))
    _need("prompt", given["prompt"], " or ".join(PROMPTS), given["prompt"] in PROMPTS)
    _need("grader", given["grader"], " or ".join(GRADERS), given["grader"] in GRADERS)
    _need("examples", given["examples"], " or ".join(EXAMPLES), given["examples"] in EXAMPLES)
    skip = given["skip_bad_rows"]
    _need("skip_bad_rows", skip, "true or false", isinstance(skip, bool))
    instruction = given["instruction"]
    _need(
        "instruction",
        instruction,
        "text of at most 2000 characters that asks for the final answer in \\boxed{}",
        isinstance(instruction, str) and "\\boxed" in instruction and len(instruction) <= 2000,
    )
    few_shot = given["few_shot"]
    _need(
        "few_shot",
        few_shot,
        f"an integer from 0 to {MAX_SHOTS}",
        _is_int(few_shot) and 0 <= few_shot <= MAX_SHOTS,
    )
    heldout = given["heldout"]
    _need("heldout", heldout, "a number above 0 and at most 0.5", _is_number(heldout, 0.5))
    timeout = given["grading_timeout"]
    _need(
        "grading_timeout",
        timeout,
        f"a number of seconds above 0 and at most {MAX_TIMEOUT:g}",
        _is_number(timeout, MAX_TIMEOUT),
    )
    max_tokens = given["max_tokens"]
    _need(
        "max_tokens",
        max_tokens,
        "an integer from 32 to 32768",
        _is_int(max_tokens) and 32 <= max_tokens <= 32768,
    )


def _need(option: str, value: object, must: str, ok: bool) -> None:
    if not ok:
        raise OptionError(option, f"{option} must be {must} (got {shown(value)})")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object, high: float) -> bool:
    """A number (not True or False) above 0 and at most `high`."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= high


def _version(cls: type) -> str:
    """A hash of the source of this package and of the data package it reads with: the code
    that makes problems and grades them (the data is the task's `data`); and of the modules
    that define a subclass, so editing one (the README's calculator) renames its checkpoints."""
    digest = hashlib.blake2b(digest_size=8)
    for package in (__package__, Data.__module__.rpartition(".")[0]):
        files = resources.files(package)
        for module in sorted(p.name for p in files.iterdir() if p.name.endswith(".py")):
            digest.update(files.joinpath(module).read_bytes())
    for klass in cls.__mro__:
        if klass.__module__.startswith(("mathrl.tasks.math", "builtins")):  # (and math_python)
            continue
        try:
            digest.update(inspect.getsource(sys.modules[klass.__module__]).encode())
        except (KeyError, OSError, TypeError):  # made in a REPL: its name stands in
            digest.update(klass.__module__.encode())
    return digest.hexdigest()
