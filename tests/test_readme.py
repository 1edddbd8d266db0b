"""The README's examples are the real thing: its output, its task, its Python snippets."""

from __future__ import annotations

import importlib
import re
import shlex
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mathrl
import mathrl.service.mint_backend
from cli_process import run_main
from doubles.fake_mint import FakeMintServer
from mathrl import TrainConfig, run_grpo, run_problems
from mathrl.checkpoints import checkpoint_name
from mathrl.cli.settings import SETTINGS, default_of
from mathrl.resolved import as_task
from mathrl.service.mint_backend import Endpoint
from mathrl.tasks import BUILT_IN
from mathrl_fakes import FakeBackend, references_for

README = (Path(__file__).parents[1] / "README.md").read_text()
STEP_LINE = re.compile(r"Step (\d+): accuracy=(\d+\.\d)%, datums=(\d+)")


def block_after(marker: str, language: str) -> str:
    """The first fenced block of `language` after `marker` in the README."""
    rest = README.split(marker, 1)[1]
    return rest.split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def task_folder(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "subtraction.py").write_text(
        block_after("`subtraction.py` in the folder you run from", "python")
    )
    yield tmp_path
    sys.modules.pop("subtraction", None)  # the next test imports its own copy


def test_the_readme_shows_the_real_output_of_an_offline_run(tmp_path: Path) -> None:
    shown = block_after("python -m mathrl --backend fake\n```", "text")
    done = run_main(tmp_path, "--backend", "fake")
    # The clone's folder, and the run folder's name (the time it started), are the reader's.
    printed = done.stdout.replace(str(tmp_path), "/home/you/mathrl")
    assert re.sub(r"runs/\d{8}T\d{6}Z-", "runs/20260101T120000Z-", printed) == shown
    # The fake keeps its checkpoints in the run folder: a cleaned temp folder loses none.
    saved = Path(done.stdout.splitlines()[-1].removeprefix("Saved: "))
    assert saved.is_file()
    assert saved.parent.parent.parent == tmp_path / "runs"


QUICK = [True, pytest.param(False, marks=pytest.mark.slow)]
"""Each README example with 20 steps: as written, a learning run, in the slow suite; quick,
in the fast suite, the same commands with 3 steps (and check-adapter without --learns)."""


def quickly(command: str, quick: bool) -> str:
    """A README command as the fast suite runs it (`QUICK`)."""
    if not quick:
        return command
    return command.replace(" --learns", "").replace("--steps 20", "--steps 3")


@pytest.mark.parametrize("quick", QUICK)
def test_the_readme_task_passes_its_check_and_learns(task_folder: Path, quick: bool) -> None:
    commands = block_after("Then check it, train it offline", "console").splitlines()
    assert commands[0] == "python -m mathrl check-adapter subtraction:Subtraction --learns"
    check = run_main(task_folder, *quickly(commands[0], quick).split()[3:])
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("check-adapter: task 'subtraction' (subtraction:Subtraction)")
    assert "warning" not in check.stdout + check.stderr  # the example is one to copy
    train = run_main(task_folder, *quickly(commands[1], quick).split()[3:])
    assert train.returncode == 0, train.stderr
    (folder_line,) = train.stderr.splitlines()  # no warning or advice, just where it is
    assert folder_line.startswith("mathrl: run folder: ")
    accuracy = [float(m[2]) for m in map(STEP_LINE.fullmatch, train.stdout.splitlines()) if m]
    assert len(accuracy) == (3 if quick else 20)
    if not quick:
        assert sum(accuracy[15:]) / 5 >= sum(accuracy[:5]) / 5 + 20
    # The worked example stays about 30 lines long.
    assert 25 <= len((task_folder / "subtraction.py").read_text().splitlines()) <= 40


@pytest.mark.parametrize("quick", QUICK)
def test_the_readme_data_task_is_a_few_lines_that_check_and_learn(
    tmp_path: Path, quick: bool
) -> None:
    code = block_after("here in `units.py`:", "python")
    (tmp_path / "units.py").write_text(code)
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    commands = block_after("In 20 steps greedy held-out accuracy", "console")
    check, train = (
        shlex.split(quickly(c, quick)) for c in commands.replace("\\\n", " ").splitlines()
    )
    checked = run_main(tmp_path, *check[3:])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("check-adapter: task 'dataset.units' (mathrl.tasks.dataset:")
    assert "warning" not in checked.stdout + checked.stderr  # an example to copy
    done = run_main(tmp_path, *train[3:])
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0].startswith(
        "mathrl: 240 rows read (fixture:units): 216 training and 24 held-out problems; 0 skipped"
    )
    evals = [float(m[1]) for m in re.finditer(r"Eval step \d+: accuracy=(\d+\.\d)%", done.stdout)]
    assert 35 <= evals[0] <= 55  # "from about 45%"
    assert len(evals) == (2 if quick else 5)
    if not quick:
        assert evals[-1] == 100.0  # "to 100%"


@pytest.mark.parametrize("quick", QUICK)
def test_the_readme_tool_task_is_a_few_lines_that_check_and_learn(
    tmp_path: Path, quick: bool
) -> None:
    marker = "`calculator.py`, on the bundled"
    code = block_after(" ".join(marker.split()), "python") if marker in README else ""
    assert code, "the README's calculator"
    (tmp_path / "calculator.py").write_text(code)
    assert len(code.splitlines()) <= 30  # a few lines, as an author writes them
    said = " ".join(README.split())
    command = "check-adapter calculator:Calculator --learns"
    assert f"passes `{command}`" in said
    checked = run_main(tmp_path, *quickly(command, quick).split())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("check-adapter: task 'calculator' (calculator:Calculator)")
    assert "warning" not in checked.stdout + checked.stderr  # an example to copy
    train = "--backend fake --adapter calculator:Calculator --steps 20 --eval-every 5"
    done = run_main(tmp_path, *quickly(train, quick).split(), "--eval-problems", "50",
                    "--log-dir", "run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    evals = [float(m[1]) for m in re.finditer(r"Eval step \d+: accuracy=(\d+\.\d)%", done.stdout)]
    assert len(evals) == (2 if quick else 5)
    if not quick:
        assert evals[-1] >= evals[0] + 20
    records = (tmp_path / "run/samples.jsonl").read_text()
    assert '"calls": [{"name": "calculate", "arguments": {"expression": ' in records


@pytest.mark.parametrize("quick", QUICK)
def test_the_python_snippets_run(
    task_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    quick: bool,
) -> None:
    monkeypatch.chdir(task_folder)
    monkeypatch.syspath_prepend(str(task_folder))
    monkeypatch.setattr(tempfile, "tempdir", str(task_folder))  # the fake's checkpoints
    # check_adapter raises on any violation.
    call = re.search(r"From a test suite, `(check_adapter\(.*?\))`", README, re.DOTALL)
    assert call is not None
    imports = "from mathrl.testing import check_adapter\nfrom subtraction import Subtraction\n"
    checking = call[1].replace("learns=True", "learns=False") if quick else call[1]
    exec(compile(imports + checking, "README.md", "exec"), {})
    assert capsys.readouterr().out == ""

    # The README points at mathrl's docstring for a run from Python.
    assert "`help(mathrl)` shows a run from Python" in README
    doc = mathrl.__doc__ or ""
    code = doc.split("(`Subtraction` is the README's task):\n", 1)[1]
    snippet = textwrap.dedent(code.split("\nThe fake's checkpoints", 1)[0])
    steps = 3 if quick else 20
    exec(compile(snippet.replace("steps=20", f"steps={steps}"), "mathrl/__init__.py", "exec"), {})
    printed = capsys.readouterr().out
    # The same run, made here: its 20 accuracies, then the step-20 checkpoint in the temp folder.
    from subtraction import Subtraction  # type: ignore[import-not-found]

    config = TrainConfig(steps=steps, eval_every=5)
    again = FakeBackend.for_run(
        Subtraction(), run_problems(Subtraction(), config), checkpoint_dir=task_folder / "again"
    )
    result = run_grpo(again, Subtraction(), config)
    name = checkpoint_name(as_task(Subtraction()), config, steps)
    saved = task_folder / "mathrl-fake" / f"{name}.json"
    assert Path(result.saved_path).name == saved.name
    assert printed == f"{[m.accuracy for m in result.steps]} {saved}\n"
    assert saved.is_file()


def test_the_asyncio_snippet_trains_over_mint(
    task_folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README points at the mint backend's docstring for it.
    said = " ".join(README.split())
    assert "`help(mathrl.service.mint_backend)` the same on MinT, in asyncio" in said
    doc = mathrl.service.mint_backend.__doc__ or ""
    snippet = textwrap.dedent(doc.split("(`Subtraction` is the README's task):\n", 1)[1])
    monkeypatch.syspath_prepend(str(task_folder))
    from subtraction import Subtraction

    task = Subtraction()
    problems = [p for step in range(1, 21) for p in task.build_dataset(0, step, 10)]
    server = FakeMintServer(references_for(task, problems), checkpoint_dir=task_folder)
    real_open = mathrl.service.mint_backend.open_backend

    async def open_on_the_fake(config: Any, env: Any) -> Any:
        return await real_open(config, Endpoint("sk-x"), service_client=server.connect())

    monkeypatch.setattr(mathrl.service.mint_backend, "open_backend", open_on_the_fake)
    exec(compile(snippet, "README.md", "exec"), {"__name__": "__main__"})
    saved = capsys.readouterr().out.strip()
    assert saved.startswith("tinker://fake-run/sampler_weights/subtraction-seed0-")


def test_the_configuration_table_agrees_with_the_settings() -> None:
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| ")]
    rows = [line.split(" | ") for line in table[2:]]
    assert len(rows) >= 10
    for variable, flag, default in ((c.strip("|` ") for c in row) for row in rows):
        if flag == "--backend":  # not a Setting: a choice of the parser's
            assert default.startswith("mint")
            continue
        setting = next(s for s in SETTINGS if s.flag == flag)
        assert (setting.env or "—") == variable, flag
        value, word = default_of(setting), default.split()[0].strip("`")
        if value is None:
            assert default.startswith("the task's"), flag
        elif isinstance(value, int | float):
            assert float(word) == value, flag
        elif setting.field == "adapter":
            assert BUILT_IN[word][0] == value
        else:
            assert word == value, flag


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    # The project is unreleased, and the README keeps no changelog: --version says which.
    done = run_main(tmp_path, "--version")
    assert (done.returncode, done.stdout) == (0, f"mathrl {mathrl.__version__}\n")
    assert "## Changes" not in README


def test_each_test_the_seed_table_names_exists() -> None:
    table = README.split("## What the seed script got wrong", 1)[1]
    named = set(re.findall(r"`(test_\w+)`", table))
    assert len(named) >= 10
    sources = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    assert {name for name in named if f"def {name}(" not in sources} == set()


def test_the_readme_is_a_tour_that_cites_only_what_ships() -> None:
    # A tour of at most 400 lines: reference material lives in the docstrings it describes.
    assert len(README.splitlines()) <= 400
    # Every module or attribute it names by dotted path exists, so `help(...)` on it works.
    for name in sorted(set(re.findall(r"`(mathrl(?:_fakes)?(?:\.[A-Za-z_]+)+)`", README))):
        assert resolves(name), f"the README names {name}, which is not there"


def resolves(dotted: str) -> bool:
    """True if `dotted` is a module, or an attribute (of an attribute...) of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(target, part):
                return False
            target = getattr(target, part)
        return True
    return False


def test_resolves_tells_a_missing_name() -> None:
    assert resolves("mathrl.pairwise.win_rates")
    assert not resolves("mathrl.pairwise.no_such_function")
    assert not resolves("mathrl.no_such_module")
