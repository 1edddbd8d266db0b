"""`MathPython`: the math task, with a Python interpreter the model may call (tool-integrated
reasoning).

The built-in task `math-python`. Its problems, data options, grader and reward are the
math task's (`mathrl.tasks.math`: the bundled GSM8K-format set by default, any file
through `train=`/`test=`): `correct`, 1.0 when the final answer is equivalent to the gold
one, and `format`, 0.1 when it is in `\\boxed{}`. The prompt is a conversation (its tools
go to the chat template) asking for the answer in `\\boxed{}`, with the `python` tool at
hand (`python_tool`): the model may call it (`tool_format`, Hermes by default, as Qwen3
writes calls), read what its code printed, and call again or answer. A turn without a
call is the answer. Its metrics are the tools' own: `tool_calls` a episode, and
`failed_tool_calls` (unreadable calls, code that raised or ran too long, calls past a
cap).

The reference episode calls the tool once, with code that computes the answer (the last
of GSM8K's calculator steps, `<<245-2=243>>`, when it gives the gold answer, else the
answer itself printed), then answers, boxed: so the fake backend learns to call the tool
and then to answer, two turns each a target of its own.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from mathrl.adapter import OptionError, Response
from mathrl.tasks.code.sandbox import check_layers
from mathrl.tasks.math import prompts
from mathrl.tasks.math.answers import exact_number
from mathrl.tasks.math.grading import DEFAULT_TIMEOUT
from mathrl.tasks.math.problems import MathProblem
from mathrl.tasks.math.task import DEFAULT_TRAIN, MathDatasetAdapter
from mathrl.tasks.math.task import _version as math_version
from mathrl.tasks.math_python.python_tool import limits_for, python_tool
from mathrl.text import shown
from mathrl.tools import FORMATS, TOOL_TURNS

INSTRUCTION = (
    "Solve the problem. You may run Python with the python tool, which returns what the "
    "code prints. Then write the final answer in \\boxed{}."
)
SECONDS_MARGIN = 10.0
"""What a call's time limit adds to the code's: starting and stopping its sandbox."""


def reference_code(problem: MathProblem) -> str:
    """Code that prints `problem`'s answer, computed (`prompts.calculation`: the last of
    GSM8K's calculator steps, when it gives the answer), else the answer as written."""
    worked = prompts.calculation(problem)
    if worked != problem.answer:  # a calculator step: plain arithmetic
        return f"print({worked})"
    number = exact_number(problem.answer)
    if number is not None and number.value.denominator == 1:
        return f"print({number.value.numerator})"
    return f"print({problem.answer!r})"


class MathPython(MathDatasetAdapter):
    """Math word problems with a `python` tool; reward: a correct final answer, boxed."""

    name = "math-python"

    def __init__(
        self,
        train: str = DEFAULT_TRAIN,
        test: str = "",
        question: str = "question",
        answer: str = "answer",
        instruction: str = INSTRUCTION,
        heldout: float = 0.1,
        grader: str = "math-verify",
        grading_timeout: float = DEFAULT_TIMEOUT,
        max_tokens: int = 512,
        skip_bad_rows: bool = False,
        max_turns: int = TOOL_TURNS,
        calls_per_turn: int = 2,
        calls_per_episode: int = 4,
        python_seconds: float = 5.0,
        output_chars: int = 1000,
        tool_format: str = "hermes",
        allow_missing_layers: bool = False,
    ) -> None:
        """Read the sources and check every option (OptionError names a bad one).

        Args:
            train: the training problems, as the math task's train: a file, fixture:NAME or
                hf:NAME[:CONFIG]:SPLIT.
            test: the held-out problems, a source as train is; empty: fixture:gsm-test with
                the default train, else a seeded share of train (see heldout).
            question: the field of a row that holds the question.
            answer: the field that holds the answer (GSM8K's #### line, MATH's last
                \\boxed{}, or a bare answer).
            instruction: what the prompt asks after the question; it must ask for the final
                answer in \\boxed{}.
            heldout: the share of train's questions held out when test is empty and train is
                not the default, above 0 and at most 0.5.
            grader: math-verify (needs mathrl[math]) or exact.
            grading_timeout: seconds one math-verify grading may take, above 0, at most 60.
            max_tokens: tokens per turn, 32 to 32768.
            skip_bad_rows: leave out (and count) a row that cannot be used.
            max_turns: the model's turns per episode, 2 to 10: calls, then the answer.
            calls_per_turn: tool calls of one turn that are run, 1 to 10 (the rest are
                answered with an error).
            calls_per_episode: tool calls of one episode that are run, 1 to 20.
            python_seconds: CPU seconds one call's code may take (and a second more of
                wall time), above 0, at most 60.
            output_chars: the most characters of a call's output the model reads back,
                100 to 10000.
            tool_format: how the model writes calls: hermes (Qwen3) or llama3-json.
            allow_missing_layers: run the code with the sandbox layers this machine can set
                up, instead of refusing to (the code task's option).
        """
        given = {k: v for k, v in locals().items() if k in _DEFAULTS}
        _check(given)
        super().__init__(train, test, question, answer, "chat", instruction, 0, "built-in",
                         heldout, grader, grading_timeout, max_tokens, skip_bad_rows)  # fmt: skip
        self.max_turns = max_turns
        self.calls_per_turn, self.calls_per_episode = calls_per_turn, calls_per_episode
        self.call_seconds = python_seconds + SECONDS_MARGIN
        self.tool_format = tool_format
        self.allow_missing_layers = allow_missing_layers
        self.limits = limits_for(python_seconds, output_chars)
        self.tools = [python_tool(python_seconds, output_chars, allow_missing_layers)]
        chosen = {k: v for k, v in given.items() if v != _DEFAULTS[k]}
        self.options = self._data.recorded(chosen)
        self.version = _version(type(self))

    def reference_completion(self, problem: MathProblem) -> str:
        """One call of the `python` tool, with code that computes the answer."""
        return FORMATS[self.tool_format].write([("python", {"code": reference_code(problem)})])

    def reference_turn(self, problem: MathProblem, responses: Sequence[Response]) -> str:
        """After the call (or after anything), the final answer alone, boxed."""
        return prompts.reference(problem)

    def preflight(self) -> str:
        """The grader, and the sandbox's layers on this machine; Unavailable if either is
        missing (the sandbox's, unless `allow_missing_layers`)."""
        layers = check_layers(self.limits, self.allow_missing_layers).describe()
        return f"{super().preflight()}; python tool: {layers}"


def _check(given: dict[str, Any]) -> None:
    """OptionError for the first of the tool's options that is not what its `Args:` says."""
    rules: dict[str, tuple[str, Callable[[Any], bool]]] = {
        "max_turns": ("an integer from 2 to 10", lambda v: _int(v) and 2 <= v <= 10),
        "calls_per_turn": ("an integer from 1 to 10", lambda v: _int(v) and 1 <= v <= 10),
        "calls_per_episode": ("an integer from 1 to 20", lambda v: _int(v) and 1 <= v <= 20),
        "python_seconds": (
            "a number of seconds above 0 and at most 60",
            lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 60,
        ),
        "output_chars": ("an integer from 100 to 10000", lambda v: _int(v) and 100 <= v <= 10000),
        "tool_format": (" or ".join(FORMATS), lambda v: v in FORMATS),
        "allow_missing_layers": ("true or false", lambda v: isinstance(v, bool)),
    }
    for option, (must, ok) in rules.items():
        if not ok(given[option]):
            raise OptionError(option, f"{option} must be {must} (got {shown(given[option])})")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(MathPython.__init__).parameters.items()
    if name != "self"
}


def _version(cls: type) -> str:
    """A hash of the math task's code and this package's: what makes problems, runs the tool
    and grades (and a subclass's module: `cls`)."""
    digest = hashlib.blake2b(math_version(cls).encode(), digest_size=8)
    files = resources.files(__package__)
    for module in sorted(p.name for p in files.iterdir() if p.name.endswith(".py")):
        digest.update(files.joinpath(module).read_bytes())
    return digest.hexdigest()
