"""pass@k from the command line, on the fake: `python -m mathrl eval`, and `--eval-k` in training.

Every test calls `main()` in this process (`run_main`), as tests/test_cli.py
does. The eval command over the real SDK is in tests/test_eval_sdk.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import mathrl.service.mint_backend
from cli_process import Result, run_main, saved_names
from conftest import math_references
from doubles.fake_mint import FakeMintServer
from mathrl.cli.commands import main

TABLE = re.compile(r"(pass@\d+|maj@\d+|mean reward|greedy accuracy) +(.+)")
TRAINED = ("--steps", "20", "--eval-every", "5", "--log-dir", "run")


def table(done: Result) -> dict[str, str]:
    """The eval table's rows, by metric; the command must have succeeded."""
    assert done.returncode == 0, done.stderr
    rows = [TABLE.fullmatch(line) for line in done.stdout.splitlines()[3:]]
    assert all(rows), done.stdout
    return {m[1]: m[2] for m in rows if m}


def percent(text: str) -> float:
    return float(text.split("%")[0]) / 100


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def last_sampler(run: Path) -> dict[str, Any]:
    """The run's latest sampler checkpoint: its step and path."""
    return [c for c in records(run / "checkpoints.jsonl") if c["kind"] == "sampler"][-1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a 20-step fake run of the addition task in `run/`, evaluated every 5."""
    folder = tmp_path_factory.mktemp("trained")
    done = run_main(folder, "--backend", "fake", *TRAINED, "--fake-checkpoints", "ckpt")
    assert done.returncode == 0, done.stderr
    return folder


def test_eval_of_the_base_model_prints_its_table_and_writes_nothing(tmp_path: Path) -> None:
    done = run_main(tmp_path, "eval", "--backend", "fake", "--problems", "20")
    assert done.stdout.splitlines()[:3] == [
        "Model: Qwen/Qwen3-0.6B, Vocab: 257, Backend: fake",
        "Weights: the base model Qwen/Qwen3-0.6B",
        "Problems: 20 held-out (seed 0), 16 samples each at temperature 1, and one greedy",
    ]
    rows = table(done)
    assert list(rows) == [
        "pass@1", "pass@4", "pass@16", "maj@1", "maj@4", "maj@16", "mean reward",
        "greedy accuracy",
    ]  # fmt: skip
    # The addition task's reward is 1 exactly when the answer is right: pass@1 is its mean.
    assert percent(rows["pass@1"]) == pytest.approx(float(rows["mean reward"]), abs=0.001)
    assert percent(rows["pass@1"]) <= percent(rows["pass@4"]) <= percent(rows["pass@16"])
    assert re.fullmatch(r"\d+\.\d% \(\d+/20\)", rows["greedy accuracy"])
    assert done.stderr == ""
    assert list(tmp_path.glob("**/eval.jsonl")) == []


def test_eval_of_a_run_folder_beats_the_base_model_and_is_recorded(trained: Path) -> None:
    base = table(run_main(trained, "eval", "--backend", "fake"))
    done = run_main(trained, "eval", "--model-path", "run")
    after = table(done)
    saved = last_sampler(trained / "run")
    assert done.stdout.splitlines()[1] == f"Weights: {saved['path']} (step {saved['step']})"
    # The run folder gave the backend (fake), the task and its checkpoint folder.
    assert done.stdout.splitlines()[0].endswith("Backend: fake")
    for k in (1, 4):
        assert percent(after[f"pass@{k}"]) >= percent(base[f"pass@{k}"]) + 0.10
        assert percent(after[f"maj@{k}"]) > percent(base[f"maj@{k}"])
    assert percent(after["pass@16"]) >= percent(base["pass@16"])
    assert percent(after["greedy accuracy"]) > percent(base["greedy accuracy"])
    assert done.stderr == f"mathrl: appended to {Path('run') / 'eval.jsonl'}\n"
    (record,) = records(trained / "run" / "eval.jsonl")
    assert list(record) == [
        "task", "step", "accuracy", "correct", "problems", "mean_reward", "sampler_path",
        "seconds", "reward_parts", "samples", "pass@1", "pass@4", "pass@16", "maj@1", "maj@4",
        "maj@16", "sampled_mean_reward", "temperature", "seed", "at",
    ]  # fmt: skip
    assert (record["task"], record["step"], record["sampler_path"]) == (
        "addition", saved["step"], saved["path"]
    )  # fmt: skip
    assert (record["samples"], record["problems"], record["temperature"]) == (16, 100, 1.0)
    assert f"{record['pass@4']:.1%}" == after["pass@4"]
    assert f"{record['maj@16']:.1%}" == after["maj@16"]
    # A second evaluation adds a line; the run's own records are untouched.
    table(run_main(trained, "eval", "--model-path", "run", "--k", "2", "--temperature", "0.5"))
    second = records(trained / "run" / "eval.jsonl")[1]
    assert (second["samples"], second["temperature"], "pass@2" in second) == (2, 0.5, True)
    assert all("pass@1" not in r for r in records(trained / "run" / "metrics.jsonl"))


@pytest.mark.slow
def test_eval_of_a_checkpoint_path_is_the_run_folders_without_the_record(trained: Path) -> None:
    saved = last_sampler(trained / "run")
    by_path = run_main(trained, "eval", "--backend", "fake", "--model-path", saved["path"])
    by_folder = run_main(trained, "eval", "--model-path", "run")
    # The same weights, problems and seeds: the same table.
    assert table(by_path) == table(by_folder)
    assert by_path.stdout.splitlines()[1] == f"Weights: {saved['path']} (step {saved['step']})"
    assert by_path.stderr == ""
    # Its step 0: the untrained weights of the run, which the base model's table matches in
    # expectation, not sample for sample (other weights' names key other samples).
    untrained = re.sub(r"step\d+", "step0000000", saved["path"])
    before = table(run_main(trained, "eval", "--backend", "fake", "--model-path", untrained))
    assert percent(before["pass@1"]) < percent(table(by_path)["pass@1"])


def test_more_samples_than_k_estimate_the_same_pass_at_k(tmp_path: Path) -> None:
    done = run_main(tmp_path, "eval", "--backend", "fake", "--k", "1,4", "--samples", "32",
                    "--problems", "10")  # fmt: skip
    rows = table(done)
    assert list(rows)[:4] == ["pass@1", "pass@4", "maj@1", "maj@4"]
    assert "32 samples each" in done.stdout.splitlines()[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--k", "x"), "--k must be comma-separated integers from 1 to 256, e.g. 1,4,16 (got 'x')"),
        (("--k", "0,4"), "--k must be comma-separated integers from 1 to 256, e.g. 1,4,16 (got"),
        (("--k", "1,,4"), "--k must be comma-separated integers from 1 to 256"),
        (("--k", "300"), "--k must be comma-separated integers from 1 to 256"),
        (("--k", ""), "--k must be comma-separated integers from 1 to 256"),
        (("--k", "1,16", "--samples", "8"),
         "--k must be at most --samples, the samples drawn per problem (got k=16 and --samples 8)"),
        (("--samples", "0"), "--samples must be an integer from 1 to 256 (got '0')"),
        (("--samples", "1000"), "--samples must be an integer from 1 to 256 (got '1000')"),
        (("--problems", "10000", "--k", "16"),
         "--problems x --samples must be at most 65,536 samples (got 10,000 x 16 = 160,000)"),
        (("--problems", "0"), "--problems must be an integer from 1 to 10,000 (got '0')"),
        (("--temperature", "-1"), "--temperature must be a number >= 0 and <= 100 (got '-1')"),
        (("--model-path", "nope.json"),
         "--model-path 'nope.json': no such run folder or checkpoint file; no run folder is "
         "beside it or in runs/"),
        (("--model-path", ""), "--model-path must be a run folder or the path a run printed as "
                               "`Saved:` (got ''); leave it out to evaluate the base model"),
        (("--model-path", "."), "('.' is a folder)"),
        (("--model-path", "x" * 5000), "--model-path 'xxxxxxxx"),
        (("--model-path", "not-json.json"),
         "(cannot load the fake checkpoint 'not-json.json' (not JSON"),
        (("--model-path", "code-seed0-0123abcd-step0000003.json"),
         "--model-path 'code-seed0-0123abcd-step0000003.json' holds weights trained on task "
         "'code', not on task 'addition'"),
        (("--kk", "1"), "unrecognized arguments: --kk"),
    ],
)  # fmt: skip
def test_eval_refuses_a_mistake_in_one_line(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "code-seed0-0123abcd-step0000003.json").write_text("{}")
    (tmp_path / "not-json.json").write_text("{")
    done = run_main(tmp_path, "eval", "--backend", "fake", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr


def test_eval_refuses_a_run_folder_it_cannot_use(tmp_path: Path, trained: Path) -> None:
    done = run_main(trained, "eval", "--model-path", "run", "--adapter", "code")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mathrl: error: --adapter mathrl.tasks.code:CodeAdapter is task 'code', but the run "
        "folder run trained task 'addition': leave --adapter out\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"task": "addition", "settings": {}}))
    done = run_main(tmp_path, "eval", "--model-path", "empty", "--backend", "fake")
    assert done.stderr == (
        "mathrl: error: --model-path: the run folder empty records no sampler checkpoint\n"
    )
    (empty / "checkpoints.jsonl").write_text('{"step": 1, "kind": "sampler", "path": "w"}\n')
    (empty / "config.json").write_text(json.dumps({"task": "addition", "settings": {"group": 1}}))
    done = run_main(tmp_path, "eval", "--model-path", "empty", "--backend", "fake")
    assert done.stderr == (
        f"mathrl: error: --model-path: {Path('empty') / 'config.json'} holds unusable settings "
        "(TrainConfig.group must be an integer from 2 to 65,536 (got 1))\n"
    )
    (empty / "config.json").write_text("{")
    done = run_main(tmp_path, "eval", "--model-path", "empty", "--backend", "fake")
    assert (
        done.stderr == f"mathrl: error: --model-path: {Path('empty') / 'config.json'} is not JSON\n"
    )
    assert done.returncode == 2


def test_eval_on_mint_needs_a_key_and_a_tinker_path(tmp_path: Path) -> None:
    done = run_main(tmp_path, "eval")
    assert (done.returncode, done.stderr.startswith("mathrl: error: MINT_API_KEY must be set")) == (
        2, True
    )  # fmt: skip
    (tmp_path / "x.json").write_text("{}")  # there, but not MinT's
    done = run_main(tmp_path, "eval", "--model-path", "x.json", MINT_API_KEY="sk-x")
    assert done.returncode == 2
    assert "--model-path must be a run folder or a tinker:// path a run printed as `Saved:` " \
        "(got 'x.json')" in done.stderr  # fmt: skip


def test_eval_over_mint_of_a_checkpoint_and_of_the_base_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeMintServer(math_references(), checkpoint_dir=tmp_path)
    training = server.connect().create_lora_training_client("fake/base")
    path = training.save_weights_for_sampler("w").result().path
    real_open = mathrl.service.mint_backend.open_sampler
    opened: list[str | None] = []

    async def open_on_the_fake(config: Any, env: Any, model_path: str | None) -> Any:
        opened.append(model_path)
        return await real_open(config, env, model_path, service_client=server.connect())

    monkeypatch.setattr(mathrl.service.mint_backend, "open_sampler", open_on_the_fake)
    monkeypatch.setenv("MINT_API_KEY", "sk-test")
    monkeypatch.chdir(tmp_path)
    for given in ([path], []):
        model_path = ["--model-path", *given] if given else []
        assert main(["eval", *model_path, "--problems", "3", "--k", "1,2"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "Model: Qwen/Qwen3-0.6B, Vocab: 257"
        assert lines[1] == (
            f"Weights: {path}" if given else "Weights: the base model Qwen/Qwen3-0.6B"
        )
        assert [line.split()[0] for line in lines[3:]] == [
            "pass@1", "pass@2", "maj@1", "maj@2", "mean", "greedy"
        ]  # fmt: skip
    assert opened == [path, None]
    # Every sample request of both evaluations: 3 problems x (2 samples + 1 greedy) each.
    assert [p.temperature for p in server.sampling_params].count(0.0) == 6
    assert [p.temperature for p in server.sampling_params].count(1.0) == 6


# -- --eval-k in training ----------------------------------------------------------------


def test_eval_k_adds_pass_at_k_to_eval_lines_and_records_and_nothing_else(
    tmp_path: Path,
) -> None:
    done = run_main(tmp_path, "--backend", "fake", *TRAINED, "--eval-k", "4,1")
    again = run_main(tmp_path, "--backend", "fake", *TRAINED[:4], "--log-dir", "plain")
    assert done.returncode == again.returncode == 0, done.stderr
    with_k, without = saved_names(done.stdout).splitlines(), saved_names(again.stdout).splitlines()
    # The same lines, the same checkpoint (its name holds no trace of --eval-k) ...
    assert [line for line in with_k if not line.startswith("Eval")] == [
        line for line in without if not line.startswith("Eval")
    ]
    # ... and each Eval line adds pass@k, for each k in order, and only with --eval-k.
    evals = [line for line in with_k if line.startswith("Eval")]
    assert [line.split(", pass@")[0] for line in evals] == [
        line for line in without if line.startswith("Eval")
    ]
    assert all(re.fullmatch(r".*\), pass@1=\d+\.\d%, pass@4=\d+\.\d%", line) for line in evals)
    assert not any("pass@" in line for line in without)
    recorded = [r for r in records(tmp_path / "run" / "metrics.jsonl") if r.get("eval")]
    assert [(r["step"], r["samples"]) for r in recorded] == [(s, 4) for s in (0, 5, 10, 15, 20)]
    assert all({"pass@1", "pass@4", "maj@1", "maj@4", "sampled_mean_reward"} <= set(r)
               for r in recorded)  # fmt: skip
    plain_records = [r for r in records(tmp_path / "plain" / "metrics.jsonl") if r.get("eval")]
    greedy = {"eval", "step", "accuracy", "correct", "problems", "mean_reward", "sampler_path",
              "seconds", "reward_parts"}  # fmt: skip
    assert all(set(r) == greedy for r in plain_records)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["settings"]["eval_k"] == [1, 4]


def test_eval_k_may_be_given_when_resuming_and_is_refused_beyond_its_limits(
    tmp_path: Path,
) -> None:
    first = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--eval-every", "1",
                     "--log-dir", "run")  # fmt: skip
    assert first.returncode == 0, first.stderr
    done = run_main(tmp_path, "--resume", "run", "--steps", "3", "--eval-k", "2")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"Eval step 3: accuracy=.*, pass@2=\d+\.\d%", done.stdout.splitlines()[-2])
    # Same run, same names: --eval-k is no training setting.
    assert (
        done.stdout.splitlines()[-1].split("-step")[0]
        == (first.stdout.splitlines()[-1].split("-step")[0])
    )
    refused = run_main(tmp_path, "--backend", "fake", "--eval-every", "1", "--eval-k", "256",
                       "--eval-problems", "1000")  # fmt: skip
    assert (refused.returncode, refused.stderr) == (
        2, "mathrl: error: --eval-problems x the largest of --eval-k must be at most 65,536 "
           "samples an evaluation (got 1,000 x 256 = 256,000)\n",
    )  # fmt: skip
    refused = run_main(tmp_path, "--backend", "fake", "--eval-k", "1,x")
    assert refused.returncode == 2
    assert refused.stderr == (
        "mathrl: error: --eval-k must be comma-separated integers from 1 to 256, e.g. 1,4,16 "
        "(got '1,x')\n"
    )


def test_eval_k_without_evaluations_says_it_does_nothing(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "1", "--eval-k", "4")
    assert done.returncode == 0
    assert "mathrl: --eval-k has no effect without evaluations: set --eval-every too" in (
        done.stderr.splitlines()
    )
    assert "pass@" not in done.stdout


OVERLAPPING = """
from mathrl.tasks.addition import MathAdapter

class Overlapping(MathAdapter):
    name = "overlapping"
    heldout_dataset = None  # held-out problems from build_dataset's step 0, as by default
"""


@pytest.mark.slow
def test_eval_of_a_run_folder_leaves_out_what_its_run_trained_on(tmp_path: Path) -> None:
    (tmp_path / "overlapping.py").write_text(OVERLAPPING)
    train = run_main(tmp_path, "--backend", "fake", "--adapter", "overlapping:Overlapping",
                     "--steps", "2", "--batch", "500", "--log-dir", "run")  # fmt: skip
    assert train.returncode == 0, train.stderr
    done = run_main(tmp_path, "eval", "--model-path", "run", "--problems", "200", "--k", "1")
    # The run folder named the task; 1,000 of 9,000 training problems drawn: some overlap.
    left_out = re.match(r"mathrl: (\d+) of 200 held-out problems of task 'overlapping' are "
                        r"also training problems of this run", done.stderr)  # fmt: skip
    assert left_out, done.stderr
    kept = 200 - int(left_out[1])
    # Of those, a problem the held-out draw repeats is evaluated once, and that is said too.
    repeats = re.search(rf"the {kept} held-out problems asked for of task 'overlapping' hold "
                        r"only (\d+) distinct ones", done.stderr)  # fmt: skip
    kept = int(repeats[1]) if repeats else kept
    assert f"Problems: {kept} held-out (seed 0)" in done.stdout
