"""`MathDatasetAdapter`: math word problems from a dataset, graded for equivalence.

The built-in task `math`. It reads a training source and a held-out one
(files, shipped fixtures or Hugging Face datasets: `sources`), draws
training problems one seeded shuffle per epoch (`problems`), asks for the
final answer in `\\boxed{}` in a conversation or a few-shot text (`prompts`),
and grades the final answer against the gold one (`answers`, `grading`).

Its reward has two parts: `correct`, 1.0 when the completion's final answer
is equivalent to the gold one, and `format`, 0.1 when the final answer is in
`\\boxed{}` as asked. `evaluate` counts the completions that are correct.
With no options it trains on the shipped fixture (`fixture:gsm-train`) and
evaluates on its test set (`fixture:gsm-test`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Sequence
from importlib import resources
from typing import TypeGuard

from mathrl.adapter import Message, OptionError, Response, Unavailable
from mathrl.tasks.math import prompts
from mathrl.tasks.math.answers import boxed_answer, final_answer, wrong_answer
from mathrl.tasks.math.grading import DEFAULT_TIMEOUT, Grader, math_verify_version, warm
from mathrl.tasks.math.problems import (
    MathProblem,
    epoch_draw,
    problems_of,
    split_heldout,
    without,
)
from mathrl.tasks.math.sources import FIXTURE, read_rows
from mathrl.text import shown

CORRECT, FORMAT = 1.0, 0.1
"""The reward parts' values: a correct final answer, and one in `\\boxed{}`."""
PROMPTS = ("chat", "few-shot")
GRADERS = ("math-verify", "exact")
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
        heldout: float = 0.1,
        grader: str = "math-verify",
        grading_timeout: float = DEFAULT_TIMEOUT,
        max_tokens: int = 512,
    ) -> None:
        """Read the sources and check every option (OptionError names a bad one).

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
            heldout: the share of train's distinct questions held out when test is
                empty and train is not the default, above 0 and at most 0.5.
            grader: math-verify (exact numbers, then math-verify; needs mathrl[math])
                or exact (exact numbers and identical answers only).
            grading_timeout: seconds one math-verify grading may take before it
                counts as wrong, above 0 and at most 60.
            max_tokens: tokens per completion, 32 to 32768.
        """
        given = dict(locals())
        del given["self"]
        _check_options(given)
        self.options = {k: v for k, v in given.items() if v != _DEFAULTS[k]}
        self.prompt, self.instruction, self.few_shot = prompt, instruction, few_shot
        self.max_tokens = max_tokens
        self.stop: tuple[str, ...] = (prompts.TEXT_STOP,) if prompt == "few-shot" else ()
        self.grader = Grader(grader == "math-verify", grading_timeout)
        training = problems_of(read_rows(train, "train"), question, answer, "train")
        self.skipped = training.skipped
        test = test or (DEFAULT_TEST if train == DEFAULT_TRAIN else "")
        if test:
            if heldout != _DEFAULTS["heldout"]:
                raise OptionError(
                    "heldout",
                    f"heldout splits train only when test is empty (got heldout={heldout} "
                    f"with test={test})",
                )
            held = problems_of(read_rows(test, "test"), question, answer, "test")
            self.skipped += held.skipped
            self.heldout_problems = held.problems
            self.training = without(training.problems, {p.question for p in held.problems})
        else:
            self.training, self.heldout_problems = split_heldout(training.problems, heldout)
        if not self.training:
            raise OptionError("test", f"test holds every question of train ({train}): none is left")
        self.sources = f"{train}, {test or f'a {heldout:g} share of train'}"
        self.version = _version(self.training, self.heldout_problems)

    def build_dataset(self, seed: int, step: int, size: int) -> list[MathProblem]:
        return [self.training[i] for i in epoch_draw(len(self.training), seed, step, size)]

    def heldout_dataset(self, seed: int, size: int) -> list[MathProblem]:
        """The held-out problems in their source's order, the same for every seed (so runs
        compare), repeated if `size` is larger."""
        pool = self.heldout_problems
        return [pool[i % len(pool)] for i in range(size)]

    def make_prompt(self, problem: MathProblem) -> str | list[Message]:
        if self.prompt == "few-shot":
            return prompts.text_prompt(problem, self.instruction, self.few_shot)
        return prompts.chat_prompt(problem, self.instruction, self.few_shot)

    def compute_reward(self, completion: str, problem: MathProblem) -> dict[str, float]:
        text = completion.text if isinstance(completion, Response) else completion
        answer = final_answer(text)
        right = answer is not None and self.grader.equivalent(problem.answer, answer)
        boxed = boxed_answer(text) is not None
        return {"correct": CORRECT if right else 0.0, "format": FORMAT if boxed else 0.0}

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
        """The problems and the grader; Unavailable when math-verify is asked for but absent.
        math-verify is loaded here, once, before any reward needs it."""
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
            how = (
                f"exact numbers, then math-verify {version} in a child process "
                f"({self.grader.timeout:g} s limit each)"
            )
        else:
            how = "exact numbers and identical answers only"
        skipped = f"; {self.skipped} rows without an answer left out" if self.skipped else ""
        return (
            f"{len(self.training)} training and {len(self.heldout_problems)} held-out problems "
            f"({self.sources}){skipped}; grading: {how}"
        )

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of completions whose final answer is correct."""
        return sum(1 for r in rewards if r >= CORRECT) / len(rewards) if rewards else 0.0


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


def _version(training: Sequence[MathProblem], heldout: Sequence[MathProblem]) -> str:
    """A hash of this package's source and of the problems: new data, new checkpoint names."""
    digest = hashlib.blake2b(digest_size=8)
    package = resources.files(__package__)
    for module in sorted(p.name for p in package.iterdir() if p.name.endswith(".py")):
        digest.update(package.joinpath(module).read_bytes())
    for problems in (training, heldout):
        rows = [[p.question, p.answer, p.solution] for p in problems]
        digest.update(json.dumps(rows, ensure_ascii=False).encode())
    return digest.hexdigest()
