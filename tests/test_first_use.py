"""What a new user meets first: a mistyped path, a lost checkpoint, a setting given twice.

Each test makes the mistake the way a person following the README would, on
the fake backend, and holds the command line to one clear line that says
what is wrong and what would work, with the exit code the README gives.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given

from cli_process import run_main, saved_names
from conftest import needs_extra
from mathrl.cli.resume import unloadable
from mathrl.cli.run_folder import no_such_weights, read_jsonl, read_run
from mathrl.cli.sample import shown_completion
from mathrl.config import TrainConfig
from strategies import unicode_text

FAKE = ("--backend", "fake")
README = (Path(__file__).parents[1] / "README.md").read_text()


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """A folder with two one-step runs in runs/: seed0 and demo."""
    for name in ("seed0", "demo"):
        done = run_main(tmp_path, *FAKE, "--steps", "1", "--log-dir", f"runs/{name}")
        assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.mark.parametrize("command", ["sample", "eval"])
def test_a_mistyped_model_path_is_named_with_the_run_folders_nearby_and_needs_no_key(
    two_runs: Path, command: str
) -> None:
    done = run_main(two_runs, command, "--model-path", "runs/seed00")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mathrl: error: --model-path 'runs/seed00': no such run folder or checkpoint file; did "
        "you mean runs/seed0? (run folders: runs/seed0, runs/demo)\n"
    )
    assert "MINT_API_KEY" not in done.stderr  # only a tinker:// path goes to the service


def test_a_missing_path_with_no_run_folder_nearby_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Relative to a folder of its own: a checkout where the README's demo ran has runs/ nearby.
    monkeypatch.chdir(tmp_path)
    assert no_such_weights("runs/x", tmp_path / "runs") == (
        f"--model-path 'runs/x': no such run folder or checkpoint file; no run folder is beside "
        f"it or in {tmp_path / 'runs'}/"
    )
    assert no_such_weights("tinker://run/sampler_weights/x") is None  # the service's to know
    assert no_such_weights(str(tmp_path)) is None  # there: another check says what it is


def test_a_missing_path_far_from_any_run_folder_lists_them_without_a_guess(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    for n in range(7):
        (runs / f"run{n}").mkdir(parents=True)
        (runs / f"run{n}" / "config.json").write_text("{}")
    said = no_such_weights("elsewhere/zzz", runs)
    assert said is not None
    assert "did you mean" not in said
    assert said.endswith(f"(run folders: {', '.join(str(runs / f'run{n}') for n in range(5))} "
                         "and 2 more)")  # fmt: skip


# -- 2. the fake's checkpoints, lost or broken ------------------------------------------------


def test_the_fakes_checkpoints_live_in_the_run_folder(tmp_path: Path) -> None:
    done = run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", "R")
    assert done.returncode == 0, done.stderr
    saved = Path(done.stdout.splitlines()[-1].removeprefix("Saved: "))
    assert saved.parent == tmp_path / "R" / "checkpoints"  # absolute: any folder can resume
    assert sorted(p.name for p in saved.parent.iterdir()) == sorted(
        Path(c["path"]).name for c in read_jsonl(tmp_path / "R" / "checkpoints.jsonl")
    )
    assert not (tmp_path / "mathrl-fake").exists()  # nothing in the temp folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = run_main(elsewhere, "--resume", str(tmp_path / "R"), "--steps", "3")
    assert again.returncode == 0, again.stderr


def suggested(stderr: str) -> list[str]:
    """The command a line of stderr suggests (after `with: `), as argv for `main`."""
    command = shlex.split(stderr.strip().rsplit(" with: ", 1)[1])
    assert command[:3] == ["python", "-m", "mathrl"]
    return command[3:]


@pytest.mark.parametrize("damage", ["missing", "not JSON", "a sampler's"])
def test_a_lost_state_exits_2_naming_the_file_and_a_resume_that_works(
    tmp_path: Path, damage: str
) -> None:
    whole = run_main(tmp_path, *FAKE, "--steps", "6", "--log-dir", "whole")
    first = run_main(tmp_path, *FAKE, "--steps", "4", "--save-every", "2", "--log-dir", "R")
    assert first.returncode == 0, first.stderr
    state = next((tmp_path / "R" / "checkpoints").glob("*state0000004.json"))
    if damage == "missing":
        state.unlink()
        why = f"cannot load the fake checkpoint '{state}' (No such file or directory)"
    elif damage == "not JSON":
        state.write_text('{"format"')
        why = f"cannot load the fake checkpoint '{state}' (not JSON: "
    else:
        state.write_text(next(state.parent.glob("*step0000004.json")).read_text())
        why = f"'{state}' is a sampler checkpoint, not a state one"
    records = {p.name: p.read_text() for p in (tmp_path / "R").iterdir() if p.is_file()}
    done = run_main(tmp_path, "--resume", "R", "--steps", "6")
    assert (done.returncode, done.stdout) == (2, "")  # no `Saved:` for what cannot load
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"mathrl: error: --resume: R cannot go on from step 4 ({why}")
    assert line.endswith(
        "; the last step whose state can be loaded is 2: resume from it with: python -m mathrl "
        "--resume R --from-step 2 --steps 6"
    )
    assert records == {p.name: p.read_text() for p in (tmp_path / "R").iterdir() if p.is_file()}
    # The command it gives goes on from step 2 to the end an unbroken run reaches.
    resumed = run_main(tmp_path, *suggested(line))
    assert resumed.returncode == 0, resumed.stderr
    assert "mathrl: resuming R from step 2 (of 6)" in resumed.stderr
    assert (
        saved_names(resumed.stdout).splitlines()[1:] == (saved_names(whole.stdout).splitlines()[3:])
    )


def test_with_no_state_left_to_load_it_says_to_start_over_and_that_works(tmp_path: Path) -> None:
    whole = run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", "whole")
    run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", "R")
    for state in (tmp_path / "R" / "checkpoints").glob("*state*.json"):
        state.unlink()
    done = run_main(tmp_path, "--resume", "R", "--steps", "2")
    assert done.returncode == 2
    assert done.stderr.endswith(
        "; no earlier state can be loaded: start the run over with: python -m mathrl --resume R "
        "--from-step 0 --steps 2\n"
    )
    again = run_main(tmp_path, *suggested(done.stderr))
    assert again.returncode == 0, again.stderr
    assert "mathrl: starting R over: --from-step 0" in again.stderr
    assert saved_names(again.stdout) == saved_names(whole.stdout)
    assert [r["step"] for r in read_run(tmp_path / "R").steps] == [1, 2]


def test_from_step_names_the_steps_it_can_go_on_from(tmp_path: Path) -> None:
    run_main(tmp_path, *FAKE, "--steps", "4", "--save-every", "2", "--log-dir", "R")
    for step, said in [
        ("3", "(got '3')"),
        ("x", "(got 'x')"),
        ("-1", "(got '-1')"),
    ]:
        done = run_main(tmp_path, "--resume", "R", "--from-step", step)
        assert done.stderr == (
            f"mathrl: error: --from-step must be a step whose state {Path('R/checkpoints.jsonl')} "
            f"records, or 0 to start over: 0, 2, 4 {said}\n"
        )
        assert done.returncode == 2
    done = run_main(tmp_path, *FAKE, "--from-step", "2")
    assert (done.returncode, done.stderr) == (
        2, "mathrl: error: --from-step goes only with --resume RUN_DIR (got no --resume)\n"
    )  # fmt: skip


# -- 3. settings given, never dropped without a word -----------------------------------------


def test_a_variable_that_changes_a_resumed_runs_training_is_refused_as_a_flag_is(
    tmp_path: Path,
) -> None:
    run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", "R")
    flag = run_main(tmp_path, "--resume", "R", "--lr", "0.001")
    variable = run_main(tmp_path, "--resume", "R", MINT_RL_LR="0.001")
    assert flag.stderr == (
        f"mathrl: error: --lr 0.001 cannot be given with --resume: {Path('R/config.json')} "
        "records --lr 0.0001, and a resumed run trains as it started; leave it out, or start a "
        "new run\n"
    )
    assert variable.stderr == (
        f"mathrl: error: MINT_RL_LR=0.001 cannot be given with --resume: "
        f"{Path('R/config.json')} records --lr 0.0001, and a resumed run trains as it started; "
        "unset it, or give --lr 0.0001\n"
    )
    assert flag.returncode == variable.returncode == 2
    (tmp_path / ".env").write_text("MINT_RL_STEPS=9\nMINT_RL_BATCH=3\n")
    dotenv = run_main(tmp_path, "--resume", "R")
    assert dotenv.stderr == (
        f"mathrl: error: MINT_RL_STEPS=9 (from {tmp_path / '.env'}), MINT_RL_BATCH=3 (from "
        f"{tmp_path / '.env'}) cannot be given with --resume: {Path('R/config.json')} records "
        "--steps 2, --batch 10, and a resumed run trains as it started; unset them, or give "
        "--steps 2, --batch 10 (--steps 9 extends the run)\n"
    )
    # A flag beats its variable: given as the record has them, the run goes on.
    agreed = run_main(tmp_path, "--resume", "R", "--steps", "2", "--batch", "10")
    assert agreed.returncode == 0, agreed.stderr


def test_a_resumed_run_takes_its_resumable_settings_from_variables_too(tmp_path: Path) -> None:
    run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", "R")
    samples = (tmp_path / "R" / "samples.jsonl").read_text()
    done = run_main(tmp_path, "--resume", "R", "--steps", "3", MINT_RL_LOG_SAMPLES="0",
                    MINT_RL_FAKE_CHECKPOINTS="moved")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "R" / "samples.jsonl").read_text() == samples  # step 3 logged none
    assert done.stdout.splitlines()[-1].startswith(f"Saved: {Path('moved')}/")


@pytest.mark.parametrize("command", [(), ("sample", "--model-path", "R"), ("eval",)])
@pytest.mark.parametrize("where", ["flag", "variable"])
def test_a_task_token_limit_and_max_tokens_that_disagree_are_refused(
    tmp_path: Path, command: tuple[str, ...], where: str
) -> None:
    run_main(tmp_path, *FAKE, "--steps", "1", "--log-dir", "R")
    args = [*command, *FAKE, "--adapter", "math", "--task-arg", "max_tokens=64"]
    if where == "flag":
        done = run_main(tmp_path, *args, "--max-tokens", "128")
        given = "--max-tokens 128"
    else:
        done = run_main(tmp_path, *args, MINT_RL_MAX_TOKENS="128")
        given = "MINT_RL_MAX_TOKENS=128"
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"mathrl: error: --task-arg max_tokens=64 and {given} both set the tokens per "
        "completion, and disagree: give one of them\n"
    )


def test_a_line_cut_off_mid_write_is_trimmed_on_resume_and_said(tmp_path: Path) -> None:
    run_main(tmp_path, *FAKE, "--steps", "3", "--save-every", "2", "--log-dir", "R")
    checkpoints = tmp_path / "R" / "checkpoints.jsonl"
    kept = [r for r in read_jsonl(checkpoints) if (r["kind"], r["step"]) != ("state", 3)]
    checkpoints.write_text("".join(json.dumps(r) + "\n" for r in kept))  # died before its save
    with (tmp_path / "R" / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "accuracy": 0.4')  # and mid-write
    done = run_main(tmp_path, "--resume", "R")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "mathrl: trimmed R: metrics.jsonl's last line, cut off mid-write "
        '(\'{"step": 4, "accuracy": 0.4\'); the records of step 3 in metrics.jsonl, '
        "checkpoints.jsonl and samples.jsonl, which the resumed run does again"
    )
    assert [r["step"] for r in read_run(tmp_path / "R").steps] == [1, 2, 3]
    again = run_main(tmp_path, "--resume", "R", "--steps", "4")  # nothing to trim now
    assert not any("trimmed" in line for line in again.stderr.splitlines())


# -- 6. plot ------------------------------------------------------------------------------------


@needs_extra("matplotlib", "plot")
def test_plot_refuses_a_run_with_no_steps_and_puts_a_comparison_beside_the_first_run(
    tmp_path: Path,
) -> None:
    for name in ("A", "B"):
        assert run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", name).returncode == 0
    # A run that saved its step 0 and failed before step 1 finished: no step to draw.
    failed = run_main(tmp_path, *FAKE, "--steps", "2", "--log-dir", "C", "--fake-fault-rate",
                      "0.3", "--retries", "0")  # fmt: skip
    assert failed.returncode == 1
    assert read_run(tmp_path / "C").steps == []
    for runs in (["C"], ["A", "C"]):
        done = run_main(tmp_path, "plot", *runs)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            "mathrl: error: plot: C records no training step yet (metrics.jsonl has none), so "
            "there is nothing to draw\n"
        )
    assert not list(tmp_path.rglob("*.png"))  # no blank chart
    both = run_main(tmp_path, "plot", "A", "B")
    assert (both.returncode, both.stdout) == (0, f"{Path('A/compare.png')}\n")  # where it went
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*.png")] == [Path("A/compare.png")]


# -- 7. help, listing, and names a letter off -----------------------------------------------


@pytest.mark.parametrize("command", ["", "sample", "eval", "check-adapter", "plot", "tasks"])
def test_help_shows_each_values_kind_never_a_bare_x(tmp_path: Path, command: str) -> None:
    done = run_main(tmp_path, *filter(None, [command]), "--help", COLUMNS="200")
    assert done.returncode == 0
    assert not re.search(r"(--[a-z-]+|,) \[?X\]?\b", done.stdout), done.stdout


def test_help_names_the_kinds_and_the_readmes_default_task(tmp_path: Path) -> None:
    usage = run_main(tmp_path, "--help", COLUMNS="400").stdout
    for shown in ("--steps N", "--lr FLOAT", "--call-timeout SECONDS", "--log-dir PATH",
                  "--mask-truncated [BOOL]", "--eval-k K,K,...", "--adapter TASK",
                  "--task-arg NAME=VALUE", "--resume RUN_DIR", "--fake-latency SECONDS",
                  "--scale-rewards none|group|batch", "--from-step STEP"):  # fmt: skip
        assert shown in usage, shown
    # The README's table and --help give the same default: the built-in task's short name.
    assert "MINT_RL_ADAPTER)" in usage
    assert "(default addition, env MINT_RL_ADAPTER)" in " ".join(usage.split())
    assert "| `MINT_RL_ADAPTER` | `--adapter` | `addition` (" in README
    assert "(default false, env MINT_RL_MASK_TRUNCATED)" in " ".join(usage.split())
    eval_usage = run_main(tmp_path, "eval", "--help", COLUMNS="400").stdout
    for shown in ("--model-path PATH", "--k K,K,...", "--samples N", "--temperature FLOAT"):
        assert shown in eval_usage, shown


def test_tasks_shows_every_option_wrapped_to_the_terminal(tmp_path: Path) -> None:
    done = run_main(tmp_path, "tasks", COLUMNS="60")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 59
    code = lines.index(next(line for line in lines if line.startswith("code ")))
    following = " ".join(line.strip() for line in lines[code + 1 : code + 6])
    assert "--weak-sandbox (or MINT_RL_WEAK_SANDBOX=1) run model-written code" in following
    assert "--task-arg max_tokens=512 tokens per completion" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["sampel"], "(got 'sampel'); did you mean sample?"),
        (["--stesp", "3"], "unrecognized arguments: --stesp 3; did you mean --steps? (see "),
        (["eval", "--sampels=3"], "--sampels=3; did you mean --samples? (see "),
        (["--backend", "fake", "--adapter", "additon"], "; did you mean addition?"),
        (["check-adapter", "preferance"], "; did you mean preference?"),
        (["--backend", "fake", "--loss", "cipso"], "(got 'cipso'); did you mean cispo?"),
        (["--backend", "fake", "--adapter", "math", "--task-arg", "few_shots=2"],
         "; did you mean few_shot?"),
    ],
)  # fmt: skip
def test_a_name_a_letter_off_gets_a_did_you_mean(
    tmp_path: Path, args: list[str], said: str
) -> None:
    done = run_main(tmp_path, *args)
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = done.stderr.splitlines()
    assert said in line


def test_a_name_far_from_any_gets_no_guess(tmp_path: Path) -> None:
    for args in (["frobnicate"], ["--zzz"], ["--backend", "fake", "--adapter", "qqq"]):
        done = run_main(tmp_path, *args)
        assert done.returncode == 2
        assert "did you mean" not in done.stderr


def test_counts_of_one_read_as_english(tmp_path: Path) -> None:
    done = run_main(tmp_path, "eval", *FAKE, "--k", "1", "--problems", "2")
    assert done.stdout.splitlines()[2] == (
        "Problems: 2 held-out (seed 0), 1 sample each at temperature 1, and one greedy"
    )
    one = run_main(tmp_path, *FAKE, "--batch", "1", "--steps", "3")
    assert "mathrl: step 3: its one group had equal rewards, so nothing was trained" in one.stderr


# -- 8. reading what sample prints -------------------------------------------------------------


def evaluated(shown: str) -> str:
    """The text `shown_completion`'s expression stands for: its quoted terms, each repeated
    as it says, joined (only string literals, `+` and `* N`; never anything else run)."""

    def value(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return value(node.left) + value(node.right)
        assert isinstance(node, ast.BinOp), ast.dump(node)
        assert isinstance(node.op, ast.Mult), ast.dump(node)
        assert isinstance(node.right, ast.Constant), ast.dump(node)
        assert isinstance(node.right.value, int), ast.dump(node)
        return value(node.left) * node.right.value

    return value(ast.parse(shown, mode="eval").body)


def test_a_completion_shows_a_run_of_unprintable_characters_as_one_term() -> None:
    assert shown_completion(" 26\n") == "' 26\\n'"
    assert shown_completion("g\x00\x00\x00\x00\x00\x00\x00") == "'g' + '\\x00' * 7"
    assert shown_completion(" 12\ufffd\x00\x00\x00\x00") == "' 12\\ufffd' + '\\x00' * 4"
    assert shown_completion("\x00\x00\x00") == "'\\x00\\x00\\x00'"  # fewer than 4: as it is
    assert shown_completion("") == "''"
    assert shown_completion("aaaaaa") == "'aaaaaa'"  # printable runs are the text itself


@given(unicode_text)
def test_a_shown_completion_is_the_completion_whole_on_one_printable_line(text: str) -> None:
    shown = shown_completion(text)
    assert evaluated(shown) == text
    assert shown.isprintable()


def test_sample_shows_the_end_of_a_long_question_and_says_what_escapes_are(
    tmp_path: Path,
) -> None:
    run_main(tmp_path, *FAKE, "--adapter", "math", "--steps", "1", "--log-dir", "M")
    done = run_main(tmp_path, "sample", "--model-path", "M", "--problems", "3")
    assert done.returncode == 0, done.stderr
    questions = [line.split(" -> ")[0] for line in done.stdout.splitlines()[1:-1]]
    # The instruction every prompt ends with is left out, and a long question keeps its end,
    # where the questions differ.
    assert all(len(q) <= 60 for q in questions)
    assert all(q.startswith("...") and q.endswith("?") for q in questions), questions
    assert len(set(questions)) == 3
    assert "\\x00' * " in done.stdout  # the untrained fake's bytes, counted
    assert done.stderr.count("mathrl: note: \\x00, \\ufffd and the like in quotes are") == 1
    addition = run_main(tmp_path, *FAKE, "--steps", "1", "--log-dir", "A")
    assert addition.returncode == 0
    short = run_main(tmp_path, "sample", "--model-path", "A", "--problems", "2")
    assert [line.split(" -> ")[0] for line in short.stdout.splitlines()[1:-1]] == [
        "Q: What is 27 + 31?", "Q: What is 34 + 87?"
    ]  # fmt: skip


def test_the_readme_says_what_datums_and_vocab_are_and_keeps_no_changelog() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "`Vocab` is the size of the tokenizer's vocabulary" in quick_start
    assert "`datums` counts the completions a step trained on" in quick_start
    assert "## Changes" not in README
    assert len(README.splitlines()) <= 400


def test_each_file_a_resumed_run_loads_first_is_checked(tmp_path: Path) -> None:
    run_main(tmp_path, *FAKE, "--steps", "3", "--save-every", "1", "--log-dir", "R")
    point = read_run(tmp_path / "R").resume_point()
    assert point is not None
    on_policy, off_policy, kl = (
        TrainConfig(),
        TrainConfig(max_steps_off_policy=1),
        TrainConfig(kl_coef=0.1),
    )
    assert unloadable(None, on_policy) is None
    assert unloadable(point, on_policy) is unloadable(point, off_policy) is None
    Path(point.lagged_sampler_path).unlink()  # step 2's weights: off-policy, step 4 samples them
    assert unloadable(point, on_policy) is None
    assert f"'{point.lagged_sampler_path}' (No such file" in str(unloadable(point, off_policy))
    Path(point.base_sampler_path).unlink()  # the base model's: the KL penalty's
    assert f"'{point.base_sampler_path}' (No such file" in str(unloadable(point, kl))
    folder = replace(point, state_path=str(tmp_path))
    assert unloadable(folder, on_policy) == f"'{tmp_path}' is a folder"
    long = replace(point, state_path="x" * 5000)
    assert "cannot load the fake checkpoint 'xxxx" in str(unloadable(long, on_policy))
