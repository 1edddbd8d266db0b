"""The one-file GRPO (`mathrl.plain`) is the algorithm `run_grpo` runs, datum for datum.

On the same fake backend and seed, `run_grpo` (pipelined, evaluating, saving
states) and `mathrl.plain.train` (every step's calls awaited before the next)
must train on exactly the same datums, minibatch by minibatch, with the same
loss, and print the same lines: at `TrainConfig`'s defaults on the addition,
math and dataset tasks, and with each algorithm choice (fill-batch, the
losses, scaled advantages, substeps, the KL penalty) on addition. `grpo_step`,
the step the loop pipelines, is held to it too. The pure functions both call
(`mathrl.grpo`) have properties and worked examples of their own
(tests/test_grpo.py).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_process import run_main
from conftest import BUILT_IN_ARGS
from mathrl.backend import Datum
from mathrl.checkpoints import checkpoint_name
from mathrl.cli.loader import load_task
from mathrl.config import FILL_BATCH_CAP, TrainConfig
from mathrl.grpo import is_constant_group
from mathrl.loop import run_grpo
from mathrl.plain import main, train
from mathrl.resolved import as_task
from mathrl.rollout import run_problems
from mathrl.step import grpo_step
from mathrl.tasks.addition import MathAdapter
from mathrl_fakes import FakeBackend, RecordingBackend

FakeFactory = Callable[..., FakeBackend]

TASKS = ["addition", "math", "dataset"]


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 7))])
@pytest.mark.parametrize("name", TASKS)
def test_run_grpo_trains_on_the_datums_of_the_one_file(
    tmp_path: Path, name: str, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    task = load_task(name, task_args=BUILT_IN_ARGS.get(name))
    config = TrainConfig(steps=4, seed=seed, eval_every=2, eval_problems=10)  # (change nothing)

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


@pytest.mark.parametrize("kind", ["feedback", "tools", "group rewards"])
def test_the_one_file_leaves_episodes_tools_and_group_rewards_to_the_full_loop(kind: str) -> None:
    from mathrl.resolved import as_task
    from mathrl.tasks.code.feedback import CodeFeedbackAdapter
    from mathrl.tasks.math_python import MathPython
    from mathrl.tasks.preference import PreferenceChat

    adapter = {"feedback": CodeFeedbackAdapter, "tools": MathPython,
               "group rewards": PreferenceChat}[kind]()  # fmt: skip
    backend: Any = None
    with pytest.raises(ValueError, match="the one-file GRPO plays one-turn tasks"):
        asyncio.run(train(backend, as_task(adapter), TrainConfig()))


SEEDS = [0, pytest.param(7, marks=pytest.mark.slow)]
"""A differential test's seeds: the second, the same comparison again, in the slow suite."""


ALGORITHMS: dict[str, dict[str, Any]] = {
    "fill-batch": {"fill_batch": True},
    "ppo, group scaling, 3 substeps": {"loss": "ppo", "scale_rewards": "group", "substeps": 3},
    "cispo, fill-batch, batch scaling": {
        "loss": "cispo", "clip_high": 2.0, "fill_batch": True, "scale_rewards": "batch"
    },
    "dro, 2 substeps": {"loss": "dro", "dro_beta": 0.1, "substeps": 2},
    "KL 0.1, 2 substeps": {"kl_coef": 0.1, "substeps": 2},
    "masked, 4 tokens": {"mask_truncated": True, "max_tokens": 4},
    "every choice": {
        "loss": "dro", "fill_batch": True, "kl_coef": 0.1, "substeps": 2, "scale_rewards": "group"
    },
}  # fmt: skip


FAST_ALGORITHMS = ("fill-batch", "dro, 2 substeps", "KL 0.1, 2 substeps", "masked, 4 tokens")
"""The settings the fast suite compares (every branch of the one file); `nox -s slow` all."""


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "algorithm",
    [
        pytest.param(name, marks=[] if name in FAST_ALGORITHMS else [pytest.mark.slow])
        for name in ALGORITHMS
    ],
)
def test_run_grpo_trains_each_algorithm_as_the_one_file(
    fake_backend_factory: FakeFactory, seed: int, algorithm: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 4 steps: the first, and three that carry what the steps before them left.
    config = TrainConfig(steps=4, seed=seed, batch=8, group=4, **ALGORITHMS[algorithm])
    loop = RecordingBackend(fake_backend_factory(seed=seed))
    run_grpo(loop, MathAdapter(), config)
    plain = RecordingBackend(fake_backend_factory(seed=seed))
    by_step = asyncio.run(train(plain, as_task(MathAdapter()), config))
    assert plain.trained == loop.trained  # every minibatch, in order
    assert plain.losses == loop.losses == [config.loss_fn] * len(loop.trained)
    # The logprobs asked besides the sampler's (the base model's, the policy's own), of the
    # same weights: the same requests, in whatever order they went out.
    assert sorted((Path(p).name, t) for p, t in plain.scored) == sorted(
        (Path(p).name, t) for p, t in loop.scored
    )
    assert sum(map(len, by_step)) > 0
    capsys.readouterr()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "setting",
    [{}, {"fill_batch": True}, {"kl_coef": 0.1}, {"loss": "dro", "scale_rewards": "group"}],
)
def test_grpo_step_is_the_one_files_step(
    fake_backend_factory: FakeFactory,
    seed: int,
    setting: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = TrainConfig(steps=4, seed=seed, batch=8, group=4, **setting)
    fill_batch, kl_coef = config.fill_batch, config.kl_coef
    task = as_task(MathAdapter())

    async def by_grpo_step(backend: FakeBackend) -> list[list[Datum]]:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        base = await backend.create_sampler(path) if kl_coef else None
        datums_by_step = []
        for step in range(1, config.steps + 1):
            outcome = await grpo_step(
                backend, await backend.create_sampler(path), task, config, step, base=base
            )
            datums_by_step.append(outcome.datums_D)
            # Exact-match rewards, one list per problem, one reward per sample; with fill_batch
            # as many problems as it took to find `batch` groups that teach something.
            informative = sum(not is_constant_group(r) for r in outcome.rewards_P_G)
            drawn = len(outcome.rewards_P_G)
            assert {len(r) for r in outcome.rewards_P_G} == {config.group}
            if fill_batch:
                assert informative == config.batch or drawn == FILL_BATCH_CAP * config.batch
                assert drawn >= config.batch
            else:
                assert drawn == config.batch
            assert {r for rewards_G in outcome.rewards_P_G for r in rewards_G} <= {0.0, 1.0}
            assert (
                (outcome.result is None) == (outcome.sampler_path is None) == (not outcome.datums_D)
            )
            path = outcome.sampler_path or path
        return datums_by_step

    stepped = asyncio.run(by_grpo_step(fake_backend_factory(seed=seed)))
    plain = asyncio.run(train(fake_backend_factory(seed=seed), task, config))
    assert stepped == plain
    assert sum(map(len, plain)) > 0
    capsys.readouterr()
