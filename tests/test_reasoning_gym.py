"""The reasoning-gym task: its answer form, its options, its draws, its rewards, its extra.

The pure pieces (`answers`, `settings`) and the missing-extra path are tested without
reasoning-gym; the rest needs it (`pip install 'mathrl[reasoning-gym]'`, which CI's
nox sessions install) and skips without it, saying so. tests/bench/survey_reasoning_gym.py
runs every dataset; this file checks five that pass and learn.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import gc
import importlib.metadata
import inspect
import json
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from conftest import checks_passed, examples, import_extra
from mathrl.adapter import OptionError, Response, Unavailable
from mathrl.resolved import as_task
from mathrl.tasks import BUILT_IN
from mathrl.tasks.reasoning_gym import ReasoningGym, answers, task
from mathrl.tasks.reasoning_gym import scoring as scoring_module
from mathrl.tasks.reasoning_gym.answers import FORMAT, final_answer, in_asked_form
from mathrl.tasks.reasoning_gym.scoring import ScoringProcesses
from mathrl.tasks.reasoning_gym.settings import (
    NOT_REPEATABLE,
    RUNS_THE_ANSWER,
    check_dataset,
    convert_settings,
)
from mathrl.tasks.reasoning_gym.task import DrawError, Item, is_heldout
from mathrl.testing import check_adapter
from mathrl_fakes import ByteTokenizer
from observing import moves_toward_its_references

LEARNED = ("basic_arithmetic", "chain_sum", "leg_counting", "word_sorting", "gsm_symbolic")
"""Five datasets the issue names: each passes check_adapter and learns on the fake."""


def library() -> ModuleType:
    """reasoning_gym, or a skip saying it is not installed."""
    return import_extra("reasoning_gym", "reasoning-gym")


# -- the answer form (pure) ------------------------------------------------------------


@given(strategies.tagged_text, strategies.tagless_text, strategies.tagless_text)
def test_the_last_tagged_answer_counts(before: str, answer: str, after: str) -> None:
    # Whatever came before (tags, half tags, unclosed ones), the last closed pair wins.
    assert final_answer(before + in_asked_form(answer) + after) == answer.strip()


@given(strategies.tagged_text)
def test_finding_the_answer_never_raises(text: str) -> None:
    found = final_answer(text)
    assert found is None or (answers.CLOSE in text and answers.OPEN in text)


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("<answer> 42 </answer>", "42"),
        ("I think <answer>1</answer>, no: <answer>2</answer>", "2"),
        ("<answer>a\nb</answer>\n", "a\nb"),  # a grid spans lines
        ("<answer>7", None),  # cut off before the closing tag
        ("</answer>7<answer>", None),  # the tags the wrong way round
        ("no tags at all", None),
    ],
)
def test_final_answer_examples(completion: str, answer: str | None) -> None:
    assert final_answer(completion) == answer


@given(strategies.tagless_text)
def test_near_misses_are_not_the_answer(answer: str) -> None:
    tagged, bare = answers.near_misses(answer)
    assert final_answer(tagged) != answer.strip() or not answer.strip()
    assert final_answer(bare) is None


def test_near_miss_examples() -> None:
    assert answers.near_misses("41") == ["<answer>42</answer>", "41"]  # 41 + 1
    assert answers.near_misses("-3") == ["<answer>-2</answer>", "-3"]  # -3 + 1
    assert answers.near_misses("on") == ["<answer>o</answer>", "on"]  # the last letter dropped
    assert answers.near_misses("x") == ["<answer>xx</answer>", "x"]


def test_lookalike_digits_are_found() -> None:
    assert answers.has_lookalike_digits("\uff14\uff12")  # full-width 42
    assert answers.has_lookalike_digits("\u00b2")  # superscript two
    assert not answers.has_lookalike_digits("42, -3.5 and a \u2212 sign")


def test_a_tenth_of_questions_is_held_out_by_text() -> None:
    held = sum(is_heldout(f"question {i}") for i in range(10_000))
    assert 900 <= held <= 1100  # one in HELDOUT_EVERY = 10, by hash
    assert is_heldout("a") == is_heldout("a")
    assert is_heldout("\ud800") in (True, False)  # a lone surrogate hashes too


@given(strategies.seeds, strategies.steps, st.integers(0, 1000))
def test_window_seeds_are_small_and_stable(seed: int, step: int, window: int) -> None:
    first = task.window_seed("chain_sum", "train", seed, step, window)
    assert 0 <= first < task.SEEDS
    assert first == task.window_seed("chain_sum", "train", seed, step, window)
    assert first != task.window_seed("chain_sum", "heldout", seed, step, window) or first == 0


# -- settings (pure: a config dataclass of our own) ----------------------------------


class Style(enum.Enum):
    PLAIN = "plain"
    FANCY = "fancy"


@dataclasses.dataclass
class Config:
    """A config like reasoning-gym's: a field of every kind its datasets use."""

    min_terms: int = 2
    ratio: float = 0.5
    allow_negation: bool = True
    delimiter: str = "."
    static_word: str | None = None
    format_style: Literal["simple", "natural"] = "simple"
    style: Style = Style.PLAIN
    operators: tuple[str, ...] = ("+", "-")
    weights: list[float] = dataclasses.field(default_factory=lambda: [0.5, 0.5])
    plain: tuple = ("a",)  # type: ignore[type-arg]  # reasoning-gym writes bare `tuple` too
    start: date = date(2000, 1, 1)
    pair: tuple[int, int] = (1, 2)
    seed: int | None = None
    size: int = 500


@pytest.mark.parametrize(
    ("given_", "kwargs", "recorded"),
    [
        ({}, {}, {}),
        ({"min_terms": "3"}, {"min_terms": 3}, {"min_terms": 3}),
        ({"min_terms": 3}, {"min_terms": 3}, {"min_terms": 3}),  # "3" and 3 record alike
        ({"ratio": "0.25", "allow_negation": "False"}, {"ratio": 0.25, "allow_negation": False},
         {"ratio": 0.25, "allow_negation": False}),
        ({"ratio": 1}, {"ratio": 1.0}, {"ratio": 1.0}),
        ({"static_word": "cat", "delimiter": ","}, {"static_word": "cat", "delimiter": ","},
         {"static_word": "cat", "delimiter": ","}),
        ({"format_style": "natural"}, {"format_style": "natural"}, {"format_style": "natural"}),
        ({"style": "fancy"}, {"style": Style.FANCY}, {"style": "fancy"}),
        ({"operators": "+, *"}, {"operators": ("+", "*")}, {"operators": "+,*"}),
        ({"weights": "1,2"}, {"weights": [1.0, 2.0]}, {"weights": "1.0,2.0"}),
        ({"plain": "x,y"}, {"plain": ("x", "y")}, {"plain": "x,y"}),
        ({"operators": ""}, {"operators": ()}, {"operators": ""}),
    ],
)  # fmt: skip
def test_settings_convert_by_field_type(
    given_: dict[str, Any], kwargs: dict[str, Any], recorded: dict[str, Any]
) -> None:
    assert convert_settings("toy", Config, given_) == (kwargs, recorded)


@pytest.mark.parametrize(
    ("given_", "option", "message"),
    [
        ({"min_terms": "three"}, "min_terms", "min_terms of toy must be an integer (got 'three')"),
        ({"min_terms": True}, "min_terms", "must be an integer (got True)"),
        ({"ratio": "nan"}, "ratio", "ratio of toy must be a number (got 'nan')"),
        ({"ratio": False}, "ratio", "must be a number (got False)"),
        ({"ratio": "\uff11"}, "ratio", "must be a number"),  # a full-width one
        ({"allow_negation": "yes"}, "allow_negation", "must be true or false (got 'yes')"),
        ({"delimiter": 3}, "delimiter", "delimiter of toy must be text (got 3)"),
        ({"format_style": "fancy"}, "format_style", "must be one of simple, natural (got 'fancy')"),
        ({"style": "odd"}, "style", "must be one of plain, fancy (got 'odd')"),
        ({"operators": 3}, "operators", "must be comma-separated values in one string (got 3)"),
        ({"weights": "1,x"}, "weights", "comma-separated values, each a number (got '1,x')"),
        ({"start": "2001-01-01"}, "start", "must be a date, which task options cannot give"),
        ({"pair": "1,2"}, "pair", "must be comma-separated values"),
        ({"seed": 3}, "seed", "seed is chosen by the task for each draw, not a setting"),
        ({"size": 3}, "size", "size is chosen by the task"),
        ({"min_term": 3}, "min_term", "min_term is not a setting of reasoning-gym's toy (its "
         "settings: allow_negation, delimiter, format_style, min_terms, operators, pair, plain, "
         "ratio, start, static_word, style, weights) (got 3)"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line_naming_the_setting(
    given_: dict[str, Any], option: str, message: str
) -> None:
    with pytest.raises(OptionError, match=r"^[^\n]*$") as raised:
        convert_settings("toy", Config, given_)
    assert raised.value.option == option
    assert message in str(raised.value)


@dataclasses.dataclass
class Unresolved:
    """A config whose annotation names what does not exist (reasoning-gym's resolve)."""

    flag: bool = False
    odd: NoSuchType | None = None  # type: ignore[name-defined]  # noqa: F821  (on purpose)


def test_settings_of_a_config_whose_annotations_do_not_resolve() -> None:
    # Read as written: `bool` is a type, the other a string that names no type.
    assert convert_settings("toy", Unresolved, {"flag": True}) == ({"flag": True}, {"flag": True})
    with pytest.raises(OptionError, match=r"odd of toy must be a NoSuchType \| None, which"):
        convert_settings("toy", Unresolved, {"odd": "x"})


def test_a_dataset_must_be_known_and_not_refused() -> None:
    known = {"chain_sum", "leg_counting", "countdown"}
    check_dataset("chain_sum", known)
    with pytest.raises(OptionError, match=r"did you mean chain_sum\) \(got 'chain-sum'\)$"):
        check_dataset("chain-sum", known)
    with pytest.raises(OptionError, match=r"datasets \(e\.g\. basic_arithmetic, .*\(got 'x'\)$"):
        check_dataset("x", known)
    with pytest.raises(OptionError, match="runs the model's answer as Python") as raised:
        check_dataset("countdown", known)
    assert raised.value.option == "dataset"


# -- without the extra -----------------------------------------------------------------


@pytest.fixture
def without_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if reasoning-gym were not installed: importing it fails."""
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)


@pytest.mark.usefixtures("without_library")
def test_without_the_extra_the_task_is_built_and_preflight_says_how_to_install() -> None:
    rg = ReasoningGym(dataset="chain_sum", min_terms="3")
    assert rg.options == {"dataset": "chain_sum", "min_terms": "3"}  # as given: unchecked
    assert as_task(rg).name == "reasoning-gym.chain_sum"
    with pytest.raises(Unavailable, match=r"not installed: pip install 'mathrl\[reasoning-gym\]'$"):
        rg.preflight()
    with pytest.raises(Unavailable):  # check_adapter lets it through: nothing stands in
        check_adapter(rg)
    with pytest.raises(Unavailable):
        rg.build_dataset(0, 1, 2)


@pytest.mark.usefixtures("without_library")
def test_without_the_extra_the_command_line_exits_2_with_the_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mathrl.cli.commands import main
    from mathrl.cli.extras import install_command

    assert main(["--backend", "fake", "--adapter", "reasoning-gym", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # Said for the way mathrl was installed here (`mathrl.cli.extras.as_installed`).
    assert err[-1].endswith(f"not installed: {install_command('reasoning-gym')}")


def test_importing_and_listing_tasks_does_not_import_the_library() -> None:
    code = (
        "import sys, mathrl, mathrl.tasks.reasoning_gym\n"
        "from mathrl.tasks import BUILT_IN\n"
        "assert 'reasoning-gym' in BUILT_IN\n"
        "print('reasoning_gym' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "False"
    assert BUILT_IN["reasoning-gym"][0] == "mathrl.tasks.reasoning_gym:ReasoningGym"


# -- with the library ------------------------------------------------------------------


QUICK = "chain_sum"
"""The one of LEARNED whose short run is in the fast suite, for the five learning runs."""


@pytest.mark.slow  # 20-step learning runs; the fast suite's representatives are below
@pytest.mark.parametrize("name", LEARNED)
def test_five_datasets_pass_the_contract_and_learn_on_the_fake(name: str) -> None:
    library()
    # Raises on any violation, the 20-step learning run's included; the summary names the
    # task, its identity and its preflight line.
    checks_passed(ReasoningGym(dataset=name), learns=True)


@pytest.mark.parametrize(
    "name",
    [n if n in ("basic_arithmetic", "word_sorting") else pytest.param(n, marks=pytest.mark.slow)
     for n in LEARNED],
)  # fmt: skip
def test_the_five_pass_the_contract(name: str) -> None:
    # Two in the fast suite, a sum and a word task; all five, and their learning runs, in
    # the slow one.
    library()
    # Within this process: test_new_interpreter draws a dataset in another.
    check_adapter(ReasoningGym(dataset=name), across_processes=False)


def test_a_short_run_of_one_moves_toward_its_references(tmp_path: Path) -> None:
    library()
    moves_toward_its_references(ReasoningGym(dataset=QUICK), tmp_path)


def test_default_options_are_none_and_given_ones_are_recorded() -> None:
    library()
    assert ReasoningGym().options == {}
    assert ReasoningGym(dataset="basic_arithmetic").options == {}  # the default, given
    rg = ReasoningGym(dataset="chain_sum", min_terms="4", max_terms=4)
    assert rg.options == {"dataset": "chain_sum", "min_terms": 4, "max_terms": 4}
    assert as_task(rg).options == rg.options
    # The settings reach the generator: four terms, so three operators, in every question.
    for item in rg.build_dataset(0, 1, 5):
        assert sum(item.question.count(op) for op in (" + ", " - ")) == 3


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"dataset": "chain-sum"}, "dataset", "did you mean chain_sum"),
        ({"dataset": "countdown"}, "dataset", "runs the model's answer as Python"),
        ({"dataset": "ransom_note"}, "dataset", "changes from one process to the next"),
        ({"dataset": "chain_sum", "min_term": "2"}, "min_term", "not a setting of"),
        ({"dataset": "chain_sum", "min_terms": "two"}, "min_terms", "must be an integer"),
        ({"dataset": "chain_sum", "min_terms": "0"}, "min_terms",
         "reasoning-gym's chain_sum cannot make problems with min_terms=0: AssertionError"),
        ({"dataset": "chain_sum", "seed": "1"}, "seed", "chosen by the task"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line(options: dict[str, Any], option: str, message: str) -> None:
    library()
    with pytest.raises(OptionError, match=r"^[^\n]*$") as raised:
        ReasoningGym(**options)
    assert raised.value.option == option
    assert message in str(raised.value)


def test_a_dataset_that_cannot_make_problems_is_refused_when_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(name: str, **kwargs: Any) -> Any:
        raise ValueError("the word list is missing")

    monkeypatch.setattr(library(), "create_dataset", broken)
    with pytest.raises(OptionError, match=r"with its default settings: ValueError: the word") as e:
        ReasoningGym(dataset="leg_counting")
    assert e.value.option == "dataset"


def test_preflight_names_the_library_and_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    library()
    task = ReasoningGym(dataset="leg_counting")
    assert task.preflight().startswith("reasoning-gym 0.")
    # Imported from a checkout on the path, with no installed distribution: no version known.
    monkeypatch.setattr(importlib.metadata, "version", _no_distribution)
    assert task.preflight() == "reasoning-gym unknown, dataset leg_counting"


def _no_distribution(name: str) -> str:
    raise importlib.metadata.PackageNotFoundError(name)


@given(strategies.seeds, st.integers(1, 50))
def test_held_out_questions_are_never_training_questions(seed: int, step: int) -> None:
    library()
    rg = ReasoningGym(dataset="chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=1)
    # A space of about 400 questions: the generator repeats itself, the split still holds.
    assert not any(is_heldout(p.question) for p in rg.build_dataset(seed, step, 16))
    assert all(is_heldout(p.question) for p in rg.heldout_dataset(seed, 4))


def test_draws_are_prefixes_and_differ_by_seed_and_step() -> None:
    library()
    rg = ReasoningGym(dataset="leg_counting")
    eight = rg.build_dataset(3, 7, 8)
    assert rg.build_dataset(3, 7, 3) == eight[:3]
    assert rg.build_dataset(3, 8, 8) != eight
    assert rg.build_dataset(4, 7, 8) != eight
    assert rg.build_dataset(3, 7, 0) == []


def draws(name: str) -> list[list[str | None]]:
    """Questions and answers of two training draws and a held-out one of dataset `name`."""
    rg = ReasoningGym(dataset=name)
    drawn = [*rg.build_dataset(5, 2, 4), *rg.build_dataset(6, 1, 4), *rg.heldout_dataset(5, 4)]
    return [[i.question, i.answer] for i in drawn]


ACROSS = ("word_sorting", "family_relationships")
"""Datasets drawn in two processes: the test's, and one whose strings hash otherwise."""
CHILD = "import json, test_reasoning_gym as t; print(json.dumps([t.draws(n) for n in t.ACROSS]))"


@pytest.mark.slow
def test_the_same_problems_in_every_process() -> None:
    library()
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        # This process's hash seed is random (pytest sets none); the child's is fixed.
        env={"PYTHONHASHSEED": "0", "PYTHONPATH": str(Path(__file__).parent), "PATH": ""},
    )
    assert json.loads(done.stdout) == [draws(name) for name in ACROSS]


@settings(max_examples=examples(25, 100))  # each scores in a child process
@given(
    st.one_of(strategies.tagged_text, st.integers(-50, 500).map(str).map(in_asked_form)),
    st.sampled_from(["stop", "end_of_turn", "length"]),
)
def test_the_score_is_the_datasets_own_score_of_the_answer_given(text: str, ended: Any) -> None:
    # reasoning-gym's own score_answer, asked here in this process, is the reward's score,
    # clipped to [0, 1]; an answer not given (no closed tags, or cut off) scores 0 and no
    # format, one given any way earns the format's 0.1.
    lib = library()
    rg = _chain_sum()
    problem = rg.build_dataset(0, 1, 1)[0]
    reward = rg.compute_reward(Response(text, ended), problem)
    answer = None if ended == "length" else final_answer(text)
    assert problem.answer is not None
    if answer is None or len(answer) > answers.answer_limit(problem.answer):
        assert reward == {"score": 0.0, "format": 0.0}
        return
    scorer = lib.create_dataset("chain_sum", seed=0, size=1)
    own = scorer.score_answer(answer=answer, entry=problem.entry)
    clipped = min(max(float(own), 0.0), 1.0) if own is not None else 0.0
    if answers.has_lookalike_digits(answer):  # digits of another script: not an answer
        clipped = 0.0
    assert reward == {"score": clipped, "format": FORMAT}


def test_rewards_worked_examples() -> None:
    library()
    rg = _chain_sum()
    problem = rg.build_dataset(0, 1, 1)[0]
    assert problem.answer is not None
    wrong = str(int(problem.answer) + 1)
    right = {"score": 1.0, "format": FORMAT}
    assert rg.compute_reward(in_asked_form(problem.answer), problem) == right
    assert rg.compute_reward(in_asked_form(wrong), problem) == {"score": 0.0, "format": FORMAT}
    assert rg.compute_reward(problem.answer, problem) == {"score": 0.0, "format": 0.0}  # no tags
    too_long = in_asked_form(problem.answer + "0" * answers.answer_limit(problem.answer))
    assert rg.compute_reward(too_long, problem) == {"score": 0.0, "format": 0.0}
    # 1.0 + 0.1 is correct; 0.1 (tags, wrong answer) and 0.0 are not.
    assert rg.evaluate([1.0 + FORMAT, FORMAT, 0.0, 1.0 + FORMAT]) == 0.5
    assert rg.evaluate([]) == 0.0


@pytest.mark.parametrize(
    ("value", "score"),
    [(0.5, 0.5), (1, 1.0), (2.0, 1.0), (-1.0, 0.0), (math.nan, 0.0), (None, 0.0)],
)
def test_a_score_out_of_range_is_clipped_and_none_is_zero(value: Any, score: float) -> None:
    library()
    rg = _chain_sum()
    problem = rg.build_dataset(0, 1, 1)[0]
    rg._scoring = lambda answer, entry: value  # type: ignore[assignment]  # a stand-in scorer
    assert rg.compute_reward(in_asked_form("3"), problem) == {"score": score, "format": FORMAT}


def misbehaving(answer: str, entry: Mapping[str, Any]) -> object:
    """A scorer that does what its answer says: sleep, crash, raise, or return a value."""
    if answer == "sleep":
        time.sleep(600)
    if answer == "crash":
        os._exit(3)
    if answer == "raise":
        raise RecursionError("too deep")
    if answer == "print":
        print("a scorer's chatter")
    return entry["value"]


@pytest.mark.parametrize(
    ("answer", "entry", "score"),
    [
        ("value", {"value": 0.5}, 0.5),
        ("value", {"value": "0.25"}, 0.25),  # float() reads it
        ("value", {"value": None}, None),  # float() refuses it
        ("value", {"value": lambda: 1}, None),  # the entry does not pickle
        ("raise", {}, None),
        ("crash", {}, None),
        ("sleep", {}, None),  # past `seconds`: the child is killed
        ("print", {"value": 1}, 1.0),
    ],
)
def test_scoring_processes_give_a_number_or_none(
    answer: str, entry: dict[str, Any], score: float | None, capfd: pytest.CaptureFixture[str]
) -> None:
    scoring = ScoringProcesses(misbehaving, seconds=0.5)
    assert scoring(answer, entry) == score
    assert scoring("value", {"value": 1}) == 1.0  # and the next call is scored, by a new child
    assert capfd.readouterr().out == ""  # what a scorer prints goes nowhere


def test_the_childs_loop_scores_each_answer_until_its_pipe_closes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The loop a forked child runs (`_serve`), run here on a thread so that coverage sees it:
    # a number, a value float() refuses, a raising scorer, a printing one; then the pipe
    # closes and it returns. The ends it inherited are closed first. Signal handling is the
    # process's, so here it is recorded rather than changed.
    handled: list[object] = []
    monkeypatch.setattr(signal, "set_wakeup_fd", handled.append)
    monkeypatch.setattr(signal, "signal", lambda *how: handled.append(how))
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # put back after the child's devnull
    ours, theirs = multiprocessing.Pipe()
    inherited, _ = multiprocessing.Pipe()
    served = threading.Thread(target=scoring_module._serve, args=(misbehaving, theirs, [inherited]))
    served.start()
    asked = [("value", {"value": 2}), ("value", {"value": None}), ("raise", {}),
             ("print", {"value": "3"})]  # fmt: skip
    got = []
    for question in asked:
        ours.send(question)
        got.append(ours.recv())
    ours.close()
    served.join(30)
    assert not served.is_alive()  # the pipe closed: it returned
    assert got == [2.0, None, None, 3.0]
    assert inherited.closed
    assert handled == [-1, (signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, signal.SIG_DFL)]
    sys.stdout.close()  # the child's devnull, where the chatter went
    assert "chatter" not in capsys.readouterr().out
    theirs.close()


@pytest.mark.slow
def test_each_thread_scores_in_a_child_of_its_own_and_they_end_with_the_scorer() -> None:
    scoring = ScoringProcesses(misbehaving, seconds=30)
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(scoring, ["value"] * 12, [{"value": i} for i in range(12)]))
        children = list(scoring._children)  # while the pool's threads live
    assert got == [float(i) for i in range(12)]
    assert 1 <= len(children) <= 3
    scoring("value", {"value": 1})  # and one for this thread
    children += scoring._children
    del scoring
    gc.collect()
    assert not any(child.process.is_alive() for child in children)


def test_a_thread_that_ends_takes_its_child_with_it() -> None:
    # The worker pool replaces a thread whose call ran too long: its child must not linger.
    scoring = ScoringProcesses(misbehaving, seconds=30)
    thread = threading.Thread(target=scoring, args=("value", {"value": 1}))
    thread.start()
    thread.join()
    gc.collect()
    assert scoring._children == []
    assert scoring("value", {"value": 2}) == 2.0  # this thread's own child
    assert len(scoring._children) == 1


def test_scoring_children_end_when_their_pipe_closes(capfd: pytest.CaptureFixture[str]) -> None:
    # Each child closes its copies of the other children's pipes (forked from another
    # thread, it holds them too), so closing a pipe here ends its child, unkilled.
    scoring = ScoringProcesses(misbehaving, seconds=30)
    assert scoring("value", {"value": 1}) == 1.0
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(scoring, "value", {"value": 2}).result() == 2.0
        children = list(scoring._children)
    del scoring
    gc.collect()
    # Ended, not killed (a child forked from a thread other than the main one may end with
    # 1: Python's own shutdown of such a fork, after its last answer).
    assert all(child.process.exitcode in (0, 1) for child in children)
    assert capfd.readouterr().err == ""


def test_a_fork_never_stops_scoring_children_it_did_not_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fork of the trainer inherits its threads' seats, whose finalizers may fire there.
    scoring = ScoringProcesses(misbehaving, seconds=30)
    assert scoring("value", {"value": 1}) == 1.0
    [child] = scoring._children
    touched: list[str] = []
    monkeypatch.setattr(child.process, "join", lambda *_: touched.append("join"))
    monkeypatch.setattr(child.process, "kill", lambda: touched.append("kill"))
    child.owner += 1  # as a fork of this process sees it
    scoring_module._stop(child, wait=0.0)
    # Neither joined nor killed: only its pipe closed (which ends the child soon after, so
    # whether it is still alive here is a race, not the rule).
    assert (touched, child.connection.closed) == ([], True)
    monkeypatch.undo()
    child.owner -= 1
    scoring_module._stop(child, wait=5.0)
    assert child.process.exitcode == 0  # its pipe closed here: it ended


class SlowToClose:
    """A child's pipe end whose `close`, as `os.close` does, lets other threads run midway:
    the first call waits there until `go` is set. Like a `Connection`, a closed end closes
    no more; a second close that comes in before the first has finished is counted (a
    `Connection`'s would close the descriptor twice: EBADF, or another file's)."""

    def __init__(self) -> None:
        self.closes = 0
        self.open = True
        self.closing, self.go = threading.Event(), threading.Event()

    def close(self) -> None:
        if not self.open:
            return
        self.closes += 1
        if self.closes == 1:
            self.closing.set()
            self.go.wait(60)
        self.open = False


class Ended:
    """A child process that has ended: joins at once."""

    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return False

    def kill(self) -> None:
        raise AssertionError("an ended child is not killed")


@pytest.mark.parametrize("first", ["its thread's seat", "the scorer"])
def test_a_child_is_stopped_once_when_its_seat_and_the_scorer_stop_it_at_once(first: str) -> None:
    # At exit the pool's threads end, each seat's finalizer stopping its child, while the
    # interpreter runs the scorer's finalizer: the scoring child's exit traceback (EBADF).
    pipe = SlowToClose()
    child = scoring_module._Child(cast(Any, Ended()), cast(Any, pipe), os.getpid())
    children = [child]
    box: list[scoring_module._Child | None] = [child]
    seat = partial(scoring_module._release, box, children)
    scorer = partial(scoring_module._stop_all, children)
    first_call, second_call = (seat, scorer) if first == "its thread's seat" else (scorer, seat)
    closing = threading.Thread(target=first_call)
    closing.start()
    assert pipe.closing.wait(60)  # the first is inside close(), the descriptor not yet None
    second_call()
    pipe.go.set()
    closing.join(60)
    assert pipe.closes == 1
    assert children == []
    assert box == [None]


def test_a_scorer_that_would_hang_the_trainer_scores_zero_in_time() -> None:
    library()
    rg = ReasoningGym(dataset="coin_flip")
    problem = rg.build_dataset(0, 1, 1)[0]
    rg._scoring.seconds = 1.0  # coin_flip reads 1e999999999 as a Fraction: 10**999999999
    assert rg.compute_reward(in_asked_form("1e999999999"), problem) == {"score": 0.0, "format": 0.1}
    assert rg.compute_reward(rg.reference_completion(problem), problem)["score"] == 1.0


class Generator:
    """A stand-in for a dataset: `question(index)` at each index, which may raise."""

    def __init__(self, question: Any) -> None:
        self.question = question

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"question": self.question(index), "answer": index, "metadata": {}}


def test_a_problem_the_generator_fails_to_make_is_skipped() -> None:
    library()
    rg = _chain_sum()

    def question(index: int) -> str:
        if index % 2:
            raise ValueError("no such puzzle")
        return f"q{index}"

    rg._create = lambda seed, size: Generator(question)
    drawn = rg.build_dataset(0, 1, 5)
    assert len(drawn) == 5
    assert all(int(p.question[1:]) % 2 == 0 for p in drawn)
    assert drawn[0].answer == drawn[0].question[1:]  # answers are text, whatever their type


def test_a_dataset_of_too_few_questions_cannot_be_split() -> None:
    library()
    rg = _chain_sum()
    training_only = next(f"q{i}" for i in range(100) if not is_heldout(f"q{i}"))
    rg._create = lambda seed, size: Generator(lambda index: training_only)
    assert len(rg.build_dataset(0, 1, 3)) == 3
    with pytest.raises(DrawError, match=r"gave 0 held-out problems of 2 in 12800 tries: with"):
        rg.heldout_dataset(0, 2)


def test_a_generator_that_always_fails_is_named() -> None:
    library()
    rg = _chain_sum()

    def question(index: int) -> str:
        raise ValueError("no such puzzle")

    rg._create = lambda seed, size: Generator(question)
    with pytest.raises(DrawError, match=r"its generator failed on 12800 of them$"):
        rg.build_dataset(0, 1, 1)


def test_items_compare_by_question_and_answer() -> None:
    assert Item("q", "a", {"x": 1}) == Item("q", "a", {"x": 2})


def _chain_sum() -> ReasoningGym:
    return ReasoningGym(dataset="chain_sum")


# -- the refused datasets, against the installed library's source --------------------

HASH_ORDERED = """
import json, sys, reasoning_gym
made = reasoning_gym.create_dataset(sys.argv[1], seed=1, size=20)
print(json.dumps([made[i]["question"] for i in range(20)]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["isomorphic_strings", "ransom_note"])
def test_the_datasets_refused_for_hash_order_do_change_with_it(name: str) -> None:
    library()
    assert "PYTHONHASHSEED" in NOT_REPEATABLE[name]
    drawn = [
        subprocess.run(
            [sys.executable, "-c", HASH_ORDERED, name],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    ]
    assert drawn[0] != drawn[1]


RUNS_TEXT = frozenset({"eval", "exec", "parse_expr", "sympify"})
"""Calls that run a string as Python (sympy's parsers evaluate what they parse)."""


def _runs_text(function: Any, owner: type, seen: set[Any]) -> bool:
    """True if `function`, or a reasoning-gym function or method it calls, calls RUNS_TEXT."""
    if function in seen or not inspect.isfunction(function):
        return False
    seen.add(function)
    if not function.__module__.startswith("reasoning_gym"):
        return False
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        call = node.func
        name = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
        if name in RUNS_TEXT:
            return True
        if isinstance(call, ast.Attribute) and getattr(call.value, "id", "") in ("self", "cls"):
            callee = inspect.getattr_static(owner, name, None)
            callee = getattr(callee, "__func__", callee)
        else:
            callee = function.__globals__.get(name)
        if _runs_text(callee, owner, seen):
            return True
    return False


RUNS_ITS_OWN_TEXT = {
    "bitwise_arithmetic": "verify_solution evals the generated problem; the answer goes to int()",
    "number_sorting": "evals the reference answer when json.loads cannot read it",
}
"""Scorers that run text as Python, read and found to run only the dataset's own text."""


def test_the_refused_datasets_are_those_whose_scorer_runs_the_answer() -> None:
    # A scorer newly running text (a new reasoning-gym release) fails this until it is read.
    datasets = library().factory.DATASETS
    running = {
        name for name, (cls, _) in datasets.items() if _runs_text(cls.score_answer, cls, set())
    }
    assert running == set(RUNS_THE_ANSWER) | set(RUNS_ITS_OWN_TEXT)


def test_the_task_names_each_completions_answer_for_maj_at_k() -> None:
    library()
    task = ReasoningGym()
    assert task.final_answer(Response("so <answer> 42 </answer>", "end_of_turn")) == "42"
    assert task.final_answer(Response("no tags", "end_of_turn")) is None
    assert task.final_answer(Response("<answer>42</answer>", "length")) is None  # cut off
    problem = task.build_dataset(0, 1, 1)[0]
    cut = Response(task.reference_completion(problem), "length")
    assert task.compute_reward(cut, problem) == {"score": 0.0, "format": 0.0}


def test_prepare_checks_the_first_problems_against_the_token_budget() -> None:
    library()
    task = ReasoningGym("chain_sum")
    line = task.prepare(ByteTokenizer(), 2048)
    assert line.startswith("reasoning-gym chain_sum: the first 128 problems checked (held-out")
    assert re.search(r"the longest reference takes \d+ of 2048 tokens$", line)
    with pytest.raises(OptionError) as refused:
        task.prepare(ByteTokenizer(), 8)
    assert refused.value.option == "max_tokens"
    assert "more than max_tokens=8 (the answer to ..." in str(refused.value)
