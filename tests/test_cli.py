"""`python -m mathrl` on the fake backend: output, configuration, errors, `sample`.

Every test calls `main()` in this process (`run_main` gives it the folder and
environment a user's subprocess would have); tests/test_reliability.py and
tests/test_runs.py keep real processes where the process itself is tested.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from cli_process import run_main, saved_names
from mathrl.cli.commands import main
from mathrl.cli.parsers import shown_default
from mathrl.cli.settings import SETTINGS
from mathrl.cli.train import VARIED_GROUPS, longest_reference, untrained_step_advice
from mathrl.config import DEFAULT_BASE_URL, Config
from mathrl.report import StepMetrics
from mathrl.resolved import as_task
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl_fakes.tokenizer import ByteTokenizer

STEP_LINE = re.compile(r"Step (\d+): accuracy=(\d+\.\d)%, datums=(\d+)")
ALWAYS_RIGHT = """
from mathrl.tasks.addition import MathAdapter

class AlwaysRight(MathAdapter):
    name = "always-right"

    def compute_reward(self, completion, problem):
        return 1.0
"""


def test_fake_run_prints_the_seed_demo_lines(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Model: Qwen/Qwen3-0.6B, Vocab: 257, Backend: fake"
    steps = [STEP_LINE.fullmatch(line) for line in lines[1:-1]]
    assert [int(m[1]) if m else None for m in steps] == [1, 2, 3]
    assert lines[-1].startswith("Saved: ")
    saved = Path(lines[-1].removeprefix("Saved: "))
    assert saved.is_file()
    assert saved.is_relative_to(tmp_path)
    # stderr: where the run folder is, and nothing else (no progress bar when piped).
    (folder_line,) = done.stderr.splitlines()
    folder = r"runs/\d{8}T\d{6}Z-addition-[0-9a-f]{8}"
    assert re.fullmatch(rf"mathrl: run folder: {folder} \(task addition\)", folder_line)
    assert "\r" not in done.stderr


def test_same_seed_same_stdout_other_seed_other_stdout(tmp_path: Path) -> None:
    runs = [run_main(tmp_path, "--backend", "fake", "--steps", "4", "--seed", s) for s in "005"]
    assert saved_names(runs[0].stdout) == saved_names(runs[1].stdout)  # in other run folders
    assert saved_names(runs[0].stdout) != saved_names(runs[2].stdout)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {"MINT_RL_STEPS": "five"},
         "MINT_RL_STEPS must be an integer from 1 to 1,000,000 (got 'five')"),
        (("--steps", "0"), {}, "--steps must be an integer from 1 to 1,000,000 (got '0')"),
        ((), {"MINT_RL_BATCH": "0"}, "MINT_RL_BATCH must be an integer from 1 to 32,768 (got '0')"),
        ((), {"MINT_RL_GROUP": "1"}, "MINT_RL_GROUP must be an integer from 2 to 65,536 (got '1')"),
        (("--max-tokens", "0"), {}, "--max-tokens must be an integer from 1 to 32,768 (got '0')"),
        (("--max-tokens", "99999999999999999999"), {}, "--max-tokens must be an integer from 1"),
        ((), {"MINT_LORA_RANK": "0"},
         "MINT_LORA_RANK must be an integer from 1 to 1,024 (got '0')"),
        ((), {"MINT_RL_LR": "0"}, "MINT_RL_LR must be a number > 0 and <= 1 (got '0')"),
        (("--lr=-1e-4",), {}, "--lr must be a number > 0 and <= 1 (got '-1e-4')"),
        ((), {"MINT_RL_LR": "nan"}, "MINT_RL_LR must be a number > 0 and <= 1 (got 'nan')"),
        ((), {"MINT_RL_LR": "inf"}, "MINT_RL_LR must be a number > 0 and <= 1 (got 'inf')"),
        ((), {"MINT_RL_TEMPERATURE": "-0.5"}, "must be a number >= 0 and <= 100 (got '-0.5')"),
        (("--seed", "x"), {}, "--seed must be an integer from 0 to 2,147,483,647 (got 'x')"),
        (("--seed", "9" * 300), {}, "(300 characters)"),
        (("--max-steps-off-policy", "2"), {},
         "--max-steps-off-policy must be an integer from 0 to 1"),
        (("--stepz", "3"), {}, "unrecognized arguments: --stepz"),
        ((), {"MINT_RL_BATCH": "1_0"},
         "MINT_RL_BATCH must be an integer from 1 to 32,768 (got '1_0')"),
        ((), {"MINT_RL_LR": "\u0661e-4"}, "MINT_RL_LR must be a number > 0"),
        ((), {"MINT_SETUP_TIMEOUT": "0"}, "MINT_SETUP_TIMEOUT must be a number > 0"),
        (("--backend", "gpu"), {}, "--backend: invalid choice: 'gpu'"),
        (("--batch", "1000", "--group", "100"), {}, "--batch x --group must be at most 65,536"),
        (("--eval-problems", "0"), {}, "--eval-problems must be an integer from 1 to 10,000"),
        (("--fake-fault-rate", "1.5"), {},
         "--fake-fault-rate must be a number >= 0 and <= 1"),
    ],
)  # fmt: skip
def test_bad_configuration_exits_2_with_one_line(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    done = run_main(tmp_path, "--backend", "fake", *args, **env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert expected in done.stderr
    assert len(done.stderr) < 300
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_fake_only_flags_are_refused_on_mint(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--fake-latency", "0.1", MINT_API_KEY="sk-x")
    assert done.returncode == 2
    assert done.stderr == (
        "mathrl: error: --fake-latency works only with --backend fake (got --backend mint)\n"
    )


def test_a_flag_beats_its_variable(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "2", MINT_RL_STEPS="oops")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Step ") == 2


def test_dotenv_is_read_but_never_overrides_the_environment(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "# a comment\n"
        "export MINT_RL_STEPS=2  # trailing comment\n"
        'MINT_RL_BATCH="3"\n'
        "MINT_RL_GROUP='5'\n"
    )
    done = run_main(tmp_path, "--backend", "fake", MINT_RL_BATCH="4")
    assert done.returncode == 0, done.stderr
    steps = [STEP_LINE.fullmatch(line) for line in done.stdout.splitlines()[1:-1]]
    assert len(steps) == 2  # from .env
    # datums <= batch (4, from the environment, not .env's 3) * group (5, from .env)
    assert all(m is not None and int(m[3]) <= 20 for m in steps)
    assert any(m is not None and int(m[3]) > 15 for m in steps)


def test_help_lists_every_variable_with_its_default(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--help")
    assert done.returncode == 0
    assert re.search(r"MINT_API_KEY\s+required by --backend mint", done.stdout)
    assert re.search(rf"MINT_BASE_URL\s+default {DEFAULT_BASE_URL}", done.stdout)
    for setting in SETTINGS:
        assert setting.flag in done.stdout
        default = shown_default(setting)
        if setting.env:
            assert re.search(rf"{setting.env}\s+{setting.flag}\s+default {re.escape(str(default))}",
                             done.stdout), setting.env  # fmt: skip
    assert "default None" not in done.stdout
    # A loss setting's default is each loss's that takes it (`mathrl.losses.LOSSES`).
    for line in (
        "MINT_RL_CLIP_LOW --clip-low default the loss's: 0.8 for ppo, 0 for cispo",
        "MINT_RL_CLIP_HIGH --clip-high default the loss's: 1.2 for ppo, 4 for cispo",
        "MINT_RL_DRO_BETA --dro-beta default 0.05",
        "--loss LOSS the policy-gradient loss: importance_sampling, ppo, cispo or dro (default "
        "importance_sampling, env MINT_RL_LOSS)",
        "--clip-low FLOAT ppo and cispo: the lower bound of the importance ratio (default the "
        "loss's: 0.8 for ppo, 0 for cispo, env MINT_RL_CLIP_LOW)",
        "--dro-beta FLOAT dro: the weight of its quadratic penalty (default 0.05, env "
        "MINT_RL_DRO_BETA)",
    ):
        assert line in " ".join(done.stdout.split())


def test_a_dotenv_that_is_not_utf8_or_not_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"MINT_RL_STEPS=2\n\xff\n")
    done = run_main(tmp_path, "--backend", "fake")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"mathrl: error: .env must be UTF-8 text (got byte 0xff at offset 16 in {tmp_path}/.env)"
        ": save it as UTF-8"
    ]
    (tmp_path / ".env").write_bytes("MINT_RL_STEPS=2\n".encode("utf-16"))
    done = run_main(tmp_path, "--backend", "fake")
    assert done.stderr == (
        f"mathrl: error: .env must be UTF-8 text (got a UTF-16 byte-order mark in "
        f"{tmp_path}/.env): save it as UTF-8\n"
    )
    # A bad value read from .env says it came from there.
    (tmp_path / ".env").write_text("MINT_RL_STEPS=abc\n")
    done = run_main(tmp_path, "--backend", "fake")
    assert done.stderr == (
        f"mathrl: error: MINT_RL_STEPS (from {tmp_path}/.env) must be an integer from 1 to "
        "1,000,000 (got 'abc')\n"
    )
    (tmp_path / ".env").unlink()
    (tmp_path / ".env").mkdir()
    done = run_main(tmp_path, "--backend", "fake")
    assert (done.returncode, done.stderr) == (
        2, f"mathrl: error: .env must be a file (got something else at {tmp_path}/.env)\n"
    )  # fmt: skip


def test_a_step_where_every_answer_is_right_says_so(tmp_path: Path) -> None:
    (tmp_path / "always.py").write_text(ALWAYS_RIGHT)
    done = run_main(
        tmp_path, "--backend", "fake", "--steps", "1", "--adapter", "always:AlwaysRight"
    )
    assert "Step 1: accuracy=100.0%, datums=0" in done.stdout
    assert done.stderr.splitlines()[-1] == (
        "mathrl: step 1: every completion was right, so there was nothing left to learn."
    )


def test_a_step_with_only_constant_groups_says_why_on_stderr(tmp_path: Path) -> None:
    # One token cannot hold " 57": every completion is wrong, every group constant.
    done = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--max-tokens", "1")
    assert done.returncode == 0
    assert "Step 1: accuracy=0.0%, datums=0" in done.stdout
    assert "Step 2: accuracy=0.0%, datums=0" in done.stdout
    advice = done.stderr.splitlines()[1:]
    assert len(advice) == 2
    # Every completion ran into the limit of 1 token; step 1's longest reference, " 1xx" and
    # "\n" to stop, takes 4 or 5 of the fake's byte tokens.
    assert re.fullmatch(
        r"mathrl: step 1: all 10 groups had equal rewards, so nothing was trained: 40 of 40 "
        r"completions hit the token limit of 1, and the reference takes ([45]) tokens\. "
        r"Raise --max-tokens \(MINT_RL_MAX_TOKENS\) to \1 or more\.",
        advice[0],
    ), advice[0]


SAMPLE_LINE = re.compile(
    r"Q: What is \d+ \+ \d+\? -> '.*'( \* \d+)?: (correct|wrong) \(reward [01]\)"
)  # the question (what differs between prompts), and the answer: quoted, runs of bytes counted


@pytest.mark.parametrize(
    "steps",
    ["3", pytest.param("20", marks=pytest.mark.slow)],  # 20: a learning run
)
def test_sample_shows_what_training_changed(tmp_path: Path, steps: str) -> None:
    train = run_main(tmp_path, "--backend", "fake", "--steps", steps)
    saved = train.stdout.splitlines()[-1].removeprefix("Saved: ")
    done = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", saved,
                   "--problems", "12")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Model: ")
    assert len(lines) == 1 + 12 + 1
    for line in lines[1:-1]:
        assert SAMPLE_LINE.fullmatch(line), line
    correct = sum(": correct " in line for line in lines[1:-1])
    assert lines[-1] == f"Accuracy: {correct / 12:.1%} ({correct}/12)"

    if steps != "20":
        return  # 3 steps: sample works on a run's weights; 20 steps: and they learned

    # The weights at the path are what is sampled: greedily, the trained
    # checkpoint answers far more held-out problems than the untrained one.
    def accuracy(path: str) -> float:
        run = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", path,
                      "--problems", "200")  # fmt: skip
        assert run.returncode == 0, run.stderr
        return float(run.stdout.splitlines()[-1].split()[1].rstrip("%")) / 100

    untrained = re.sub(r"step\d+", "step0000000", saved)
    assert untrained != saved
    before, after = accuracy(untrained), accuracy(saved)
    assert before <= 0.70
    assert after >= before + 0.20


def test_sample_reads_only_the_settings_it_uses(tmp_path: Path) -> None:
    train = run_main(tmp_path, "--backend", "fake", "--steps", "1")
    saved = train.stdout.splitlines()[-1].removeprefix("Saved: ")
    done = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", saved,
                   "--problems", "2", "--connect-timeout", "5",
                   MINT_RL_STEPS="oops", MINT_RL_TEMPERATURE="-1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    help_text = run_main(tmp_path, "sample", "--help").stdout
    assert "default 0: greedy" in help_text
    assert "--connect-timeout" in help_text


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("nope.json", "--model-path 'nope.json': no such run folder or checkpoint file"),
        ("", "--model-path must be the path a run printed as `Saved:` (got '')"),
        (".", "('.' is a folder)"),
        ("/etc/passwd",
         "(cannot load the fake checkpoint '/etc/passwd' (not JSON"),
    ],
)  # fmt: skip
def test_sample_refuses_a_path_that_is_not_a_checkpoint(
    tmp_path: Path, path: str, reason: str
) -> None:
    done = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", path)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert reason in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sample", "--backend", "fake"], "--model-path"),
        (["sample", "--backend", "fake", "--model-path", "p", "--problems", "0"],
         "--problems must be an integer from 1 to 10,000 (got '0')"),
        (["sample", "--backend", "fake", "--model-path", "p", "--problems", "10001"],
         "--problems must be an integer from 1 to 10,000 (got '10001')"),
        (["sample", "--backend", "fake", "--model-path", "p", "--temperature", "-1"],
         "--temperature must be a number >= 0 and <= 100 (got '-1')"),
        (["sample", "--backend", "mint", "--model-path", "tinker://run/x"],
         "MINT_API_KEY must be set"),
        (["frobnicate"], "the command must be sample, eval, check-adapter, plot or tasks"),
    ],
)  # fmt: skip
def test_usage_errors_in_process(
    tmp_path: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINT_API_KEY", raising=False)
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_main_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # gettempdir() caches TMPDIR
    assert main(["--backend", "fake", "--steps", "2", "--batch", "4", "--eval-every", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Model: {Config().base_model}, Vocab: 257, Backend: fake"
    assert [line.split(":")[0] for line in out[1:-1]] == [
        "Eval step 0", "Step 1", "Eval step 1", "Step 2", "Eval step 2"
    ]  # fmt: skip
    saved = out[-1].removeprefix("Saved: ")
    assert main(["sample", "--backend", "fake", "--model-path", saved, "--problems", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("Accuracy: ")


ALPHABET = """
from mathrl.tasks.addition import MathAdapter

class Alphabet(MathAdapter):
    name = "alphabet"

    def reference_completion(self, problem):
        return " abcdefghijklmnopqrstuvwxyz"
"""


def test_a_token_limit_below_the_references_length_is_named_as_the_cause(
    tmp_path: Path,
) -> None:
    (tmp_path / "alphabet.py").write_text(ALPHABET)
    done = run_main(
        tmp_path, "--backend", "fake", "--adapter", "alphabet:Alphabet",
        "--steps", "1", "--batch", "2", "--group", "4", "--max-tokens", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == "Step 1: accuracy=0.0%, datums=0"
    # The reference is 27 bytes and its stop "\n" one more: 28 tokens of the fake's bytes.
    assert re.search(
        r"^mathrl: step 1: all 2 groups had equal rewards, so nothing was trained: [1-8] of 8 "
        r"completions hit the token limit of 4, and the reference takes 28 tokens\. Raise "
        r"--max-tokens \(MINT_RL_MAX_TOKENS\) to 28 or more\.$",
        done.stderr,
        re.MULTILINE,
    ), done.stderr


def untrained(truncated: int) -> StepMetrics:
    """Step 3 of 2 groups of 4 that trained nothing, `truncated` of its 8 cut off."""
    return StepMetrics(3, 0.25, 0.25, 0, 2, 4, 2, 64, None, truncated=truncated)


@pytest.mark.parametrize(
    ("truncated", "reference", "advice"),
    [
        (0, 99, f"step 3: all 2 groups had equal rewards, so nothing was trained. {VARIED_GROUPS}"),
        (5, None, "step 3: all 2 groups had equal rewards, so nothing was trained: 5 of 8 "
                  f"completions hit the token limit of 16. {VARIED_GROUPS}"),
        (8, 12, "step 3: all 2 groups had equal rewards, so nothing was trained: 8 of 8 "
                f"completions hit the token limit of 16, though the reference takes only 12. "
                f"{VARIED_GROUPS}"),
        (8, 37, "step 3: all 2 groups had equal rewards, so nothing was trained: 8 of 8 "
                "completions hit the token limit of 16, and the reference takes 37 tokens. "
                "Raise --max-tokens (MINT_RL_MAX_TOKENS) to 37 or more."),
    ],
)  # fmt: skip
def test_a_step_that_trained_nothing_says_what_to_change(
    truncated: int, reference: int | None, advice: str
) -> None:
    assert untrained_step_advice(untrained(truncated), 16, lambda step: reference) == advice


class NoReference(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        raise RuntimeError("no reference here")


def test_the_longest_reference_is_none_when_the_task_cannot_say() -> None:
    # Addition's references are " 123" and the like: a byte a character, and "\n" to stop.
    problems = MathAdapter().build_dataset(0, 1, 4)
    longest = max(len(f" {p.answer}\n") for p in problems)
    assert longest_reference(as_task(MathAdapter()), ByteTokenizer(), 0, 4)(1) == longest
    assert longest_reference(as_task(NoReference()), ByteTokenizer(), 0, 4)(1) is None
