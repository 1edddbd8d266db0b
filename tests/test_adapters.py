"""The Adapter contract: defaults, `check_adapter`, and tasks loaded by `--adapter`.

The tasks of the `*_TASK` strings are written to a file outside the repo, as
a task author would, and run through the real command line.
"""

from __future__ import annotations

import math
import random
import re
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cli_process import run_main
from conftest import BUILT_IN_ARGS, checks_passed
from mathrl.adapter import DEFAULT_MAX_TOKENS, DEFAULT_STOP, AdapterError, Response
from mathrl.checkpoints import run_fingerprint
from mathrl.cli.loader import load_task, task_target
from mathrl.config import ConfigError, TrainConfig
from mathrl.resolved import as_task
from mathrl.tasks import BUILT_IN
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import check_adapter
from observing import moves_toward_its_references

STEP_LINE = re.compile(r"Step (\d+): accuracy=(\d+\.\d)%, datums=(\d+)")

SUBTRACTION_TASK = '''
import random, re

class Subtraction:
    """a - b with answers from -99 to 99: only the five required methods."""

    def build_dataset(self, seed, step, size):
        rng = random.Random(f"subtraction/{seed}/{step}")
        return [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(size)]

    def make_prompt(self, problem):
        return f"Q: What is 9 - 12?\\nA: -3\\n\\nQ: What is {problem[0]} - {problem[1]}?\\nA:"

    def compute_reward(self, completion, problem):
        match = re.search(r"-?[0-9]+", completion)
        return 1.0 if match and int(match.group()) == problem[0] - problem[1] else 0.0

    def reference_completion(self, problem):
        return f" {problem[0] - problem[1]}"

    def evaluate(self, rewards):
        return sum(r > 0 for r in rewards) / len(rewards) if rewards else 0.0
'''

COUNT_LETTERS_TASK = '''
import random

WORDS = ["strawberry", "raspberry", "crème brûlée", "straße", "über", "naïveté", "mirror",
         "résumé", "ärger", "error", "terror", "carrier", "rr", "arrière", "horreur"]

class CountLetters:
    """How many r's in a word? Prompts are not ASCII: curly quotes, accents."""

    name = "count-r"

    def build_dataset(self, seed, step, size):
        rng = random.Random(f"count-r/{seed}/{step}")
        return [rng.choice(WORDS) for _ in range(size)]

    def make_prompt(self, word):
        return f"Combien de \u2019r\u2019 dans \u00ab {word} \u00bb ? R\u00e9ponse :"

    def compute_reward(self, completion, word):
        return 1.0 if completion.strip() == str(word.count("r")) else 0.0

    def reference_completion(self, word):
        return f" {word.count('r')}"

    def evaluate(self, rewards):
        return sum(rewards) / len(rewards) if rewards else 0.0
'''

BROKEN = {
    "raises on empty": (
        "def compute_reward(self, completion, problem):\n"
        "        if not completion:\n"
        "            raise ValueError('empty')\n"
        "        return super().compute_reward(completion, problem)\n",
        r"^compute_reward\(the empty string, .*\) raised ValueError: empty( \(\d+ times\))?$",
    ),
    "global random": (
        "def build_dataset(self, seed, step, size):\n"
        "        import random\n"
        "        return [AdditionProblem(random.randint(0, 99), 1) for _ in range(size)]\n",
        r"^build_dataset\(seed=0, step=1, size=8\) depends on or advances the global random",
    ),
    "nan": (
        "def compute_reward(self, completion, problem):\n        return float('nan')\n",
        r"^compute_reward\(the reference, .*\) returned nan: a reward must be a finite number or "
        r"a mapping of names to finite numbers( \(\d+ times\))?$",
    ),
    "reference not best": (
        "def reference_completion(self, problem):\n        return f' {problem.answer + 1}'\n",
        r"^the reference completion earns 0\.0, which evaluate\(\[0\.0\] \* 4\) scores 0\.0, "
        r"not 1\.0: reference_completion must",
    ),
    "always one": (
        "def compute_reward(self, completion, problem):\n        return 1.0\n",
        r"^compute_reward gave every wrong completion tried .* the reference's reward 1\.0 "
        r"on .*: it cannot tell right from wrong( \(\d+ times\))?$",
    ),
}


MUST_BE = (
    "--adapter must be addition, code, code-feedback, dataset, math, math-python, preference, "
    "reasoning-gym "
    "or "
    "module:Class, "
    "e.g. mymod:MyTask"
)


def write_task(folder: Path, module: str, source: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(source)


def broken_source(body: str) -> str:
    return (
        "from mathrl.tasks.addition import AdditionProblem, MathAdapter\n\n"
        "class Broken(MathAdapter):\n"
        "    name = 'broken'\n\n"
        f"    {body}"
    )


# -- defaults and shape ------------------------------------------------------------


class FiveMethods:
    """Only the required methods: every optional member takes its default."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"five/{seed}/{step}")
        return [rng.randint(0, 1_000_000) for _ in range(size)]

    def make_prompt(self, problem: int) -> str:
        return f"{problem}?"

    def compute_reward(self, completion: str, problem: int) -> float:
        return float(completion.strip() == str(problem))

    def reference_completion(self, problem: int) -> str:
        return f" {problem}"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


def test_an_adapter_with_only_the_five_methods_gets_documented_defaults() -> None:
    task = as_task(FiveMethods())
    assert (task.name, task.stop, task.max_tokens) == ("FiveMethods", None, DEFAULT_MAX_TOKENS)
    # No declared stop: one line for a text prompt, the assistant's turn for a conversation.
    assert task.stop_for("Q: 2?\nA:") == DEFAULT_STOP
    assert task.stop_for([{"role": "user", "content": "2?"}]) == ()
    assert (task.chat_template_options, task.mask_truncated) == ({}, False)
    assert not task.rewards_groups
    assert task.wrong_completions(3) == ()
    assert task.final_answer is None  # it names no answers: no maj@k
    assert len(task.version) == 8  # a hash of the module's source
    assert task.identity == f"{__name__}:FiveMethods"
    # The default held-out set is build_dataset's step 0, which training never draws.
    assert task.heldout(3, 5) == FiveMethods().build_dataset(3, 0, 5)
    assert task.options == {}
    checks_passed(FiveMethods())


def test_a_task_of_five_methods_moves_toward_its_references(tmp_path: Path) -> None:
    moves_toward_its_references(FiveMethods(), tmp_path)


@pytest.mark.slow  # a 20-step learning run; the fast suite's representative is above
def test_a_task_of_five_methods_passes_the_learning_check() -> None:
    # One check more with learns=True: a 20-step run on the fake, which learned.
    assert checks_passed(FiveMethods(), learns=True) == checks_passed(FiveMethods()) + 1


def test_options_and_chat_template_options_stay_apart() -> None:
    # Both are mappings read in one pass over the adapter: each must land in its own field.
    adapter = FiveMethods()
    adapter.chat_template_options = {"enable_thinking": False}  # type: ignore[attr-defined]  # set on the instance, as a task's class would
    adapter.options = {"few_shot": 2}  # type: ignore[attr-defined]  # as above
    task = as_task(adapter)
    assert task.chat_template_options == {"enable_thinking": False}
    assert task.options == {"few_shot": 2}


def test_the_math_task_declares_its_own_choices() -> None:
    task = as_task(MathAdapter())
    assert (task.name, task.stop, task.max_tokens) == ("addition", ("\n",), 8)
    assert task.heldout(0, 3) == MathAdapter().heldout_dataset(0, 3)
    assert task.final_answer is not None
    assert task.final_answer(Response(" 042\n")) == "42"
    assert as_task(task) is task


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("name", "has space", r"\.name must be 1 to 64 characters .* \(got 'has space'\)"),
        ("name", "x" * 65, r"\.name must be 1 to 64 characters"),
        ("stop", "\n", r"\.stop must be a tuple of non-empty strings.* \(got '\\n'\)"),
        ("stop", ("",), r"\.stop must be a tuple of non-empty strings"),
        ("max_tokens", 0, r"\.max_tokens must be an integer >= 1 \(got 0\)"),
        ("max_tokens", True, r"\.max_tokens must be an integer >= 1 \(got True\)"),
        ("heldout_dataset", 5, r"\.heldout_dataset must be a method"),
        ("final_answer", "42", r"\.final_answer must be a method \(got '42'\)"),
        (
            "options",
            ["few_shot"],
            r"\.options must map option names to strings, .*got \['few_shot'\]",
        ),
        ("options", {"x": None}, r"\.options must map option names .*\(got \{'x': None\}\)"),
        ("options", {"x": float("nan")}, r"\.options must map option names"),
        ("options", {1: 2}, r"\.options must map option names"),
    ],
)
def test_malformed_optional_members_are_named(attribute: str, value: Any, message: str) -> None:
    adapter = FiveMethods()
    setattr(adapter, attribute, value)
    with pytest.raises(AdapterError, match=message):
        as_task(adapter)


def test_something_that_is_not_an_adapter_is_named() -> None:
    with pytest.raises(
        AdapterError, match=r"^str is not an adapter: it has no build_dataset, make_prompt, "
    ):
        as_task("nope")  # type: ignore[arg-type]


# -- check_adapter ------------------------------------------------------------------


@pytest.mark.parametrize("defect", BROKEN)
def test_check_adapter_names_the_method_that_breaks_the_contract(
    tmp_path: Path, defect: str
) -> None:
    body, expected = BROKEN[defect]
    write_task(tmp_path, "broken", broken_source(body))
    done = run_main(tmp_path, "check-adapter", "broken:Broken")
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith("mathrl: ")
    assert "violation" in done.stderr
    assert any(re.search(expected, line) for line in done.stdout.splitlines()), done.stdout


def test_check_adapter_lists_every_violation_in_one_error() -> None:
    class TwoDefects(MathAdapter):
        def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
            return math.nan if completion else 1.0

        def evaluate(self, rewards: Sequence[float]) -> float:
            return 2.0

    with pytest.raises(AssertionError) as excinfo:
        check_adapter(TwoDefects(), across_processes=False)
    lines = str(excinfo.value).splitlines()
    assert re.fullmatch(
        r"\d+ violations of the Adapter contract by task 'addition' \(.*\):", lines[0]
    )
    assert any("returned nan" in line for line in lines)
    assert any("an accuracy must be a number in [0, 1]" in line for line in lines)
    assert all(line.startswith("- ") for line in lines[1:])


def test_check_adapter_passes_the_built_in_tasks_from_the_command_line(tmp_path: Path) -> None:
    done = run_main(tmp_path, "check-adapter", "mathrl.tasks.addition:MathAdapter")
    assert done.returncode == 0, done.stdout
    task = r"task 'addition' \(mathrl\.tasks\.addition:MathAdapter\)"
    # The seed's reward reads the first integer, however the completion ended: the task says
    # why (`cut_off_graded`), so no warning.
    assert re.fullmatch(rf"check-adapter: {task} passed \d+ checks\n", done.stdout)
    assert done.stderr == ""
    without = replace(as_task(MathAdapter()), cut_off_graded=None)
    assert "\nwarning: compute_reward pays the reference cut off at the token limit" in (
        check_adapter(without, across_processes=False)
    )


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_built_in_task_has_one_name_wherever_it_is_named(name: str) -> None:
    spec = BUILT_IN[name][0]
    task = load_task(name, task_args=BUILT_IN_ARGS.get(name))
    assert task.identity == spec  # what check-adapter, errors and run records say
    defined_in = f"{type(task.adapter).__module__}:{type(task.adapter).__qualname__}"
    again = load_task(defined_in, task_args=BUILT_IN_ARGS.get(name))
    assert again.identity == spec  # loaded by where its class is defined, too
    # The name it goes by is not in its checkpoints' names: those stay as they were.
    config = TrainConfig()
    assert run_fingerprint(replace(task, identity="x:Y"), config) == run_fingerprint(task, config)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nomodule:Task", "--adapter: cannot import module 'nomodule' (No module named 'nomodule'"),
        ("mathrl.tasks.addition:Nothing",
         "--adapter: module 'mathrl.tasks.addition' has no attribute 'Nothing'"),
        ("mathrl.tasks.addition:FEWSHOT", "--adapter: str is not an adapter"),
        ("noclass", f"{MUST_BE} (got 'noclass', with no ':Class' after the module or file)"),
        ("a:b:c", f"{MUST_BE} (got 'a:b:c', with a second ':' in the class part 'b:c')"),
        ("exploding:Task",
         "--adapter: importing 'exploding' failed (ZeroDivisionError: division by zero)"),
        ("missing.py:Task", "--adapter: no such file 'missing.py'"),
    ],
)  # fmt: skip
def test_an_adapter_that_cannot_be_loaded_exits_2_with_one_line(
    tmp_path: Path, spec: str, message: str
) -> None:
    write_task(tmp_path, "exploding", "1 / 0\n")
    done = run_main(tmp_path, "--backend", "fake", "--adapter", spec)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"mathrl: error: {message}")


@pytest.mark.parametrize(
    ("spec", "got"),
    [
        # 80 characters: the message keeps the last 60, where the ':Class' is missing.
        ("/home/someone/projects/tasks/folders/that/go/on/and/on/for/ever/mytask_module.py",
         "...'ts/tasks/folders/that/go/on/and/on/for/ever/mytask_module.py' "
         "(80 characters), with no ':Class' after the module or file"),
        (":Task", "':Task', with no module or file before the ':'"),
        ("mytask.py:", "'mytask.py:', with nothing after the ':'"),
    ],
)  # fmt: skip
def test_a_malformed_adapter_spec_is_quoted_where_it_is_wrong(spec: str, got: str) -> None:
    with pytest.raises(ConfigError) as raised:
        task_target(spec, "--adapter")
    assert str(raised.value) == f"{MUST_BE} (got {got})"


# -- new tasks through the command line ------------------------------------------------


def accuracies(stdout: str) -> list[float]:
    return [float(m[2]) for m in map(STEP_LINE.fullmatch, stdout.splitlines()) if m]


@pytest.mark.parametrize(
    ("module", "source", "spec"),
    [
        ("subtraction", SUBTRACTION_TASK, "subtraction:Subtraction"),
        pytest.param(  # the same task as by its file's path, below: in the slow suite
            "letters", COUNT_LETTERS_TASK, "letters:CountLetters", marks=pytest.mark.slow
        ),
        ("letters_file", COUNT_LETTERS_TASK, "tasks/letters_file.py:CountLetters"),
    ],
)
@pytest.mark.parametrize("steps", [3, pytest.param(20, marks=pytest.mark.slow)])  # 20: learns
def test_a_task_from_a_file_outside_the_repo_trains_on_the_fake_and_learns(
    tmp_path: Path, module: str, source: str, spec: str, steps: int
) -> None:
    write_task(tmp_path / ("tasks" if "/" in spec else ""), module, source)
    done = run_main(tmp_path, "--backend", "fake", "--adapter", spec, "--steps", str(steps))
    assert done.returncode == 0, done.stderr
    accuracy = accuracies(done.stdout)
    assert len(accuracy) == steps
    if steps == 20:
        assert statistics.mean(accuracy[15:]) >= statistics.mean(accuracy[:5]) + 20
    assert "Traceback" not in done.stderr


def test_two_tasks_at_the_same_settings_never_share_a_checkpoint(tmp_path: Path) -> None:
    write_task(tmp_path, "subtraction", SUBTRACTION_TASK)
    runs = [
        run_main(tmp_path, "--backend", "fake", "--steps", "1", *extra)
        for extra in ((), ("--adapter", "subtraction:Subtraction"))
    ]
    saved = [r.stdout.splitlines()[-1] for r in runs]
    assert saved[0] != saved[1]
    assert "addition-seed0-" in saved[0]
    assert "Subtraction-seed0-" in saved[1]


def test_sample_refuses_weights_trained_for_another_task(tmp_path: Path) -> None:
    write_task(tmp_path, "subtraction", SUBTRACTION_TASK)
    # Its run folder is neither above the checkpoint nor in runs/: nothing leads back to it.
    train = run_main(tmp_path, "--backend", "fake", "--steps", "1",
                     "--adapter", "subtraction:Subtraction", "--log-dir", "elsewhere",
                     "--fake-checkpoints", "apart")  # fmt: skip
    saved = train.stdout.splitlines()[-1].removeprefix("Saved: ")
    done = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", saved)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "trained on task 'Subtraction', not on task 'addition'" in line
    ok = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", saved,
                 "--adapter", "subtraction:Subtraction", "--problems", "3")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    # A run in runs/ records its checkpoints there: the path alone finds its task.
    into_runs = run_main(tmp_path, "--backend", "fake", "--steps", "1",
                         "--adapter", "subtraction:Subtraction")  # fmt: skip
    found = into_runs.stdout.splitlines()[-1].removeprefix("Saved: ")
    by_path = run_main(tmp_path, "sample", "--model-path", found, "--problems", "3")
    assert by_path.returncode == 0, by_path.stderr
    assert re.match(r"Q: What is \d+ - \d+\?", by_path.stdout.splitlines()[1]), by_path.stdout
    # A MinT path says which task it holds in its name; no key is needed to refuse it.
    mint = run_main(tmp_path, "sample", "--model-path",
                   "tinker://run/sampler_weights/code-seed0-0123abcd-step0000005")  # fmt: skip
    assert mint.returncode == 2
    assert "trained on task 'code', not on task 'addition'" in mint.stderr


SLOW_TO_CHECK = ("code", "code-feedback", "reasoning-gym", "math-python")
"""Built-in tasks whose check runs sandboxed code or a library's scorers: the slow suite's (a
tool task's checks run fast in test_tool_episodes and on the README's calculator)."""


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TO_CHECK else n for n in BUILT_IN]
)
def test_every_built_in_task_passes_its_checker_with_no_warning(name: str) -> None:
    task = load_task(name, task_args=BUILT_IN_ARGS.get(name))
    summary = check_adapter(task, across_processes=False)
    assert summary.startswith(f"task {task.name!r} ({BUILT_IN[name][0]}) passed ")
    assert "warning" not in summary, summary  # the tasks a user copies from heed their advice
