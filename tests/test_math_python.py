"""The math-python task: the math task's problems, a python tool run in the sandbox, its
reference episode, and that it learns on the fake and over the mint SDK."""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import os
import re
import shutil
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from cli_process import run_main
from conftest import import_extra
from doubles.fake_mint import FakeMintServer
from mathrl.adapter import OptionError
from mathrl.cli.loader import load_task
from mathrl.config import Config, TrainConfig
from mathrl.loop import run_grpo_async
from mathrl.resolved import as_task
from mathrl.service.mint_backend import Endpoint, open_backend
from mathrl.tasks.code import sandbox
from mathrl.tasks.math import MathDatasetAdapter, MathProblem, calculation
from mathrl.tasks.math.answers import exact_number
from mathrl.tasks.math_python import MathPython
from mathrl.tasks.math_python.python_tool import NOTHING, python_tool
from mathrl.tasks.math_python.task import reference_code
from mathrl.tools import Call, ToolFailed
from mathrl.workers import Workers
from mathrl_fakes import references_for
from sandbox_evidence import denied, refused

PYTHON = python_tool(5.0, 100)


def test_the_python_tool_returns_what_the_code_printed_cut_to_its_limit() -> None:
    assert PYTHON("import math\nprint(math.factorial(5), 6 * 7)") == "120 42\n"
    assert PYTHON("x = 6 * 7") == NOTHING  # a reminder to print
    assert PYTHON("print('a' * 150)") == "a" * 100 + "... (151 characters)"


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("print(1)\n1/0", "1\n\nZeroDivisionError: division by zero"),
        (
            "print(",
            "File \"<python>\", line 1\n    print(\n         ^\nSyntaxError: '(' was never closed",
        ),
        ("import os\nos.system('id')", refused("os.system")),
        ("import sys\nsys.exit(3)", "SystemExit: 3"),
    ],
)
def test_code_that_fails_is_a_failed_call_that_says_why(code: str, error: str) -> None:
    with pytest.raises(ToolFailed) as failed:
        PYTHON(code)
    assert str(failed.value) == error


def test_the_code_runs_in_the_sandbox_never_in_the_trainer(tmp_path: Path) -> None:
    # A file every user may read, outside /tmp (the code's /tmp is a tmpfs of its own): the
    # sandbox's layers (Landlock) keep the code from it, not the file's mode.
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(tmp_path)
    world = Path(tempfile.mkdtemp(prefix="mathrl-test-", dir=parent))
    try:
        world.chmod(0o755)
        (world / "notes.txt").write_text("the trainer's")
        (world / "notes.txt").chmod(0o644)
        with pytest.raises(ToolFailed, match=re.escape(denied(str(world / "notes.txt")))):
            PYTHON(f"print(open({str(world / 'notes.txt')!r}).read())")
    finally:
        shutil.rmtree(world)
    if os.geteuid() == 0:  # never real root: the sandbox's own user
        assert PYTHON("import os\nprint(os.getuid())") == "65534\n"
    assert PYTHON("import os\nprint(os.getpid())") != f"{os.getpid()}\n"  # its own pid space


@pytest.mark.slow  # the sandbox's own limits are test_sandbox's, in the fast suite
def test_the_codes_time_is_limited() -> None:
    started = time.monotonic()
    with pytest.raises(ToolFailed, match=r"^the code ran past its time limit \(cpu limit"):
        python_tool(1.0, 100)("while True:\n    pass")
    assert time.monotonic() - started < 10
    with pytest.raises(ToolFailed, match=r"^the code ran past its time limit \(killed after 2 s"):
        python_tool(1.0, 100)("import time\ntime.sleep(30)")


def test_a_call_on_a_worker_pool_runs_in_a_sandbox_started_ahead() -> None:
    async def twice(pool: Workers) -> list[str]:
        first = await pool.run(lambda: PYTHON("print(1)"))
        warm = sandbox.warm_of(pool)
        assert warm is not None
        deadline = time.monotonic() + 30
        while warm.ready < 1:  # started while the pool is idle
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        return [first, await pool.run(lambda: PYTHON("print(2)"))]

    with Workers(1) as pool:
        assert asyncio.run(twice(pool)) == ["1\n", "2\n"]
        warm = sandbox.warm_of(pool)
        assert warm is not None
        assert warm.taken == 1


def _arithmetic(text: str) -> Fraction:
    """`text`, plain arithmetic, worked out exactly (here, in the test: trusted data)."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}  # fmt: skip

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp):
            return Fraction(ops[type(node.op)](value(node.left), value(node.right)))
        assert isinstance(node, ast.Constant)
        return Fraction(str(node.value))

    return value(ast.parse(text, mode="eval").body)


def test_every_bundled_problems_calculation_gives_its_answer() -> None:
    task = MathPython()
    problems = [*task.training, *task.heldout_problems]
    assert len(problems) == 250
    stepped = 0
    for problem in problems:
        worked = calculation(problem)
        gold = exact_number(problem.answer)
        assert gold is not None
        assert _arithmetic(worked) == gold.value, problem
        stepped += worked != problem.answer
    assert stepped == 250  # all from GSM8K's calculator steps
    # A problem without steps: the answer itself, printed.
    bare = MathProblem("What is 3/4 of 1?", "3/4", "3/4")
    assert (calculation(bare), reference_code(bare)) == ("3/4", "print('3/4')")
    assert reference_code(MathProblem("?", "1,200", "#### 1,200")) == "print(1200)"


@pytest.mark.slow  # 250 sandboxes: 15-30 s
def test_every_bundled_problems_reference_code_prints_its_answer() -> None:
    task = MathPython()
    for problem in [*task.training, *task.heldout_problems]:
        printed = PYTHON(reference_code(problem))
        gold = exact_number(problem.answer)
        assert gold is not None
        assert Fraction(printed.strip()) == gold.value


def test_the_reference_episode_is_a_call_then_the_answer_boxed() -> None:
    task = MathPython()
    problem = task.heldout_dataset(0, 1)[0]
    first = task.reference_completion(problem)
    resolved = as_task(task)
    assert resolved.toolbox is not None
    assert resolved.toolbox.parse(first) == [Call("python", {"code": reference_code(problem)})]
    assert task.reference_turn(problem, ()) == f"\\boxed{{{problem.answer}}}"
    llama = MathPython(tool_format="llama3-json")
    assert llama.reference_completion(problem) == json.dumps(
        {"name": "python", "parameters": {"code": reference_code(problem)}}
    )
    assert (resolved.max_turns, resolved.toolbox.calls_per_turn) == (4, 2)
    assert (resolved.toolbox.calls_per_episode, resolved.toolbox.seconds) == (4, 15.0)
    assert [t.name for t in resolved.toolbox.tools.values()] == ["python"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_turns", 1, "max_turns must be an integer from 2 to 10 (got 1)"),
        ("calls_per_turn", 0, "calls_per_turn must be an integer from 1 to 10 (got 0)"),
        ("calls_per_episode", 21, "calls_per_episode must be an integer from 1 to 20 (got 21)"),
        ("python_seconds", 0, "python_seconds must be a number of seconds above 0 and at most 60"),
        ("output_chars", 50, "output_chars must be an integer from 100 to 10000 (got 50)"),
        ("tool_format", "xml", "tool_format must be hermes or llama3-json (got 'xml')"),
        ("allow_missing_layers", "yes", "allow_missing_layers must be true or false (got 'yes')"),
    ],
)
def test_each_option_is_checked(option: str, value: Any, message: str) -> None:
    with pytest.raises(OptionError, match=f"^{re.escape(message)}") as refused_:
        MathPython(**{option: value})
    assert refused_.value.option == option


def test_the_options_given_are_kept_and_the_task_is_made_again_with_them() -> None:
    task = load_task("math-python", task_args={"calls_per_turn": "3", "python_seconds": "2.5"})
    assert task.options == {"calls_per_turn": 3, "python_seconds": 2.5}
    assert task.toolbox is not None
    assert (task.toolbox.calls_per_turn, task.toolbox.seconds) == (3, 12.5)
    again = load_task("math-python", task_args=dict(task.options))
    assert again.options == task.options
    assert again.version == task.version != as_task(MathDatasetAdapter()).version


def test_a_run_records_and_sample_shows_each_call(tmp_path: Path) -> None:
    run = run_main(tmp_path, "--backend", "fake", "--adapter", "test_tool_episodes:Doubling",
                   "--steps", "2", "--batch", "4", "--log-dir", "run")  # fmt: skip
    assert run.returncode == 0, run.stderr
    records = [
        json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()
    ]
    completions = [c for record in records for c in record["completions"]]
    called = [c for c in completions if "earlier" in c]
    assert called
    for completion in called:
        (first,) = completion["earlier"]
        (made,) = first["calls"]
        assert set(made) == {"name", "arguments", "result", "failed"}
        assert first["reply"] == made["result"]
        assert set(completion["metrics"]) == {"tool_calls", "failed_tool_calls"}
    right = [
        c["earlier"][0]["calls"][0] for c in called if not c["earlier"][0]["calls"][0]["failed"]
    ]
    assert right
    assert all(c["name"] == "double" and c["result"] == str(2 * c["arguments"]["n"]) for c in right)
    shown = run_main(tmp_path, "sample", "--model-path", "run", "--problems", "2")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(re.fullmatch(r"  call: double\(n=1\d\d\) -> '2\d\d'", line) for line in lines), lines


@pytest.mark.slow  # 20 steps, a sandbox for each call: about a minute
def test_math_python_learns_on_the_fake_and_eval_reports_pass_at_k_before_and_after(
    tmp_path: Path,
) -> None:
    import_extra("math_verify", "math")
    before = run_main(tmp_path, "eval", "--backend", "fake", "--adapter", "math-python",
                      "--problems", "50")  # fmt: skip
    assert before.returncode == 0, before.stderr
    run = run_main(tmp_path, "--backend", "fake", "--adapter", "math-python", "--steps", "20",
                   "--eval-every", "5", "--eval-problems", "50", "--log-dir", "run")  # fmt: skip
    assert run.returncode == 0, run.stderr
    after = run_main(tmp_path, "eval", "--model-path", "run", "--problems", "50")
    assert after.returncode == 0, after.stderr

    def pass_at_1(printed: str) -> float:
        match = re.search(r"^pass@1 +(\d+\.\d)%$", printed, re.MULTILINE)
        assert match is not None, printed
        return float(match[1])

    assert pass_at_1(after.stdout) >= pass_at_1(before.stdout) + 20
    evals = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    held_out = [e for e in evals if e.get("eval")]
    assert held_out[-1]["accuracy"] >= held_out[0]["accuracy"] + 0.2
    assert held_out[-1]["metric/tool_calls"] >= 0.9  # it calls the tool, about once an episode


@pytest.mark.slow  # 20 steps through the real SDK's client objects, the tools in the template
def test_math_python_learns_over_the_mint_sdk(tmp_path: Path) -> None:
    import_extra("math_verify", "math")
    adapter = MathPython()
    config = Config(TrainConfig(steps=20, eval_every=0), adapter="math-python")
    problems = [p for step in range(1, 21) for p in adapter.build_dataset(0, step, 10)]
    server = FakeMintServer(references_for(adapter, problems), checkpoint_dir=tmp_path)

    async def train() -> list[float]:
        backend = await open_backend(config, Endpoint("sk-x"), service_client=server.connect())
        result = await run_grpo_async(backend, adapter, config.train)
        return [m.accuracy for m in result.steps]

    accuracy = asyncio.run(train())
    assert statistics.mean(accuracy[15:]) >= statistics.mean(accuracy[:5]) + 0.20


def test_a_machine_without_a_layer_stops_the_run_and_what_comes_back_is_read_with_care(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mathrl.adapter import Unavailable
    from mathrl.tasks.code.sandbox import ALLOW_MISSING_LAYERS, Outcome, SandboxError
    from mathrl.tasks.math_python import python_tool as module

    def missing(*args: Any) -> Outcome:
        raise SandboxError("sandbox: no Landlock here", ALLOW_MISSING_LAYERS)

    monkeypatch.setattr(module, "call_function", missing)
    with pytest.raises(Unavailable, match="no Landlock here") as stopped:
        PYTHON("print(1)")
    assert getattr(stopped.value, "allowed_by", None) == ALLOW_MISSING_LAYERS
    # What comes back is the code's doing too: a result not as the runner returns it.
    monkeypatch.setattr(module, "call_function", lambda *args: Outcome("ok", ("forged",), ""))
    with pytest.raises(ToolFailed, match=r"^the code's output could not be read back$"):
        PYTHON("print(1)")
    forged = Outcome("ok", ([7, "long", None],), "")
    monkeypatch.setattr(module, "call_function", lambda *args: forged)
    assert PYTHON("print(1)") == NOTHING  # text not a str: none; a length not a number: its own
