"""The one-file GRPO (`mathrl.plain`) is the algorithm `run_grpo` runs, datum for datum.

On the same fake backend and seed, at `TrainConfig`'s defaults, `run_grpo`
(pipelined, evaluating, saving states) and `mathrl.plain.train` (every call
awaited in turn) must train on exactly the same datums, step by step, and
print the same lines.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cli_process import run_main
from conftest import BUILT_IN_ARGS
from mathrl.cli.loader import load_task
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.plain import main, train
from mathrl.rollout import run_problems
from mathrl_fakes import FakeBackend, RecordingBackend

TASKS = ["addition", "math", "dataset"]


@pytest.mark.parametrize("seed", [0, 1, pytest.param(7, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", TASKS)
def test_run_grpo_trains_on_the_datums_of_the_one_file(
    tmp_path: Path, name: str, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    task = load_task(name, task_args=BUILT_IN_ARGS.get(name))
    config = TrainConfig(steps=4, seed=seed, eval_every=2)  # (evaluations change nothing)

    def backend(folder: str) -> RecordingBackend:
        fake = FakeBackend.for_run(
            task, run_problems(task, config), checkpoint_dir=tmp_path / folder
        )
        return RecordingBackend(fake)

    plain = backend("plain")
    by_step = asyncio.run(train(plain, task, config))
    loop = backend("loop")
    result = run_grpo(loop, task, config)
    assert loop.trained == plain.trained == [d for d in by_step if d]  # each step's datums
    assert sum(map(len, by_step)) > 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:-1] == [
        f"Step {m.step}: accuracy={m.accuracy:.1%}, datums={m.datums}" for m in result.steps
    ]
    assert printed[-1] == f"Saved: {result.saved_path}".replace("/loop/", "/plain/")


def test_python_m_mathrl_plain_prints_what_python_m_mathrl_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full = run_main(tmp_path, "--backend", "fake")
    assert full.returncode == 0, full.stderr
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the fake's checkpoints, as there
    asyncio.run(main(["--backend", "fake"]))
    plain = capsys.readouterr().out.splitlines()
    assert plain[:-1] == full.stdout.splitlines()[:-1]  # Model:, Step N: ... the same
    # Saved: the same checkpoint (the command line keeps it in its run folder).
    assert Path(plain[-1]).name == Path(full.stdout.splitlines()[-1]).name


def test_the_one_file_is_at_most_200_lines_and_marks_its_algorithm() -> None:
    import mathrl.plain

    source = Path(mathrl.plain.__file__).read_text().splitlines()
    assert len(source) <= 200
    assert sum("# ALGO LOGIC" in line for line in source) >= 6


def test_the_one_file_leaves_episodes_to_the_full_loop() -> None:
    from mathrl.resolved import as_task
    from mathrl.tasks.code.feedback import CodeFeedbackAdapter

    backend: Any = None
    with pytest.raises(ValueError, match="the one-file GRPO plays one-turn tasks"):
        asyncio.run(train(backend, as_task(CodeFeedbackAdapter()), TrainConfig()))
