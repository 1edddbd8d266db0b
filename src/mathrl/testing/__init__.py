"""`check_adapter`: the Adapter contract, checked from the outside, in one call; and
`check_backend`, the Backend contract (`backend_checks.py`).

Plain functions with no test-framework import, so pytest, unittest or a
script can call them (as trio's `check_*` suites are called). On success
`check_adapter` returns a one-line summary; on failure it raises
`AssertionError` listing every violation, one sentence each, naming the
method and the input. `python -m mathrl check-adapter module:Class` runs it.

What it checks (each distinct violation is listed once, with how many times
it happened, and names a problem by what tells its prompt apart from the
others': `...'Q: What is 12 + 30?'...`, not a few-shot header they share):

- the task's data, if it has any (`prepare` on the tokenizer in use, at the
  task's `max_tokens`): a row it cannot use is a violation naming the row,
  and its set-up line ends the summary's first line;

- problems (`checker.py`): determinism whatever the global random state
  (`build_dataset` and `heldout_dataset` both), and in a new interpreter with
  another hash seed (`new_interpreter.py`), exact sizes, different problems
  across seeds and steps, prompts that are text or well-formed conversations,
  held-out problems disjoint from the first training steps' (problems, told
  apart by value: `mathrl.problem_keys`, since problems may share a prompt),
  and a warning when problems share a prompt but not its reference (a model
  cannot see what the prompt hides);
- rewards (`reward_checks.py`; every completion it makes up is a `Response`
  that says how it ended and its `tokens` on the tokenizer in use): the
  reference, ended as the task asks, earns the maximum, and fits `max_tokens`
  on the tokenizer in use (by default the fake's, which counts UTF-8 bytes,
  more than real tokenizers do) for every problem of at least BUDGET_PROBLEMS
  (200) drawn, and the held-out ones; wrong
  answers (the task's `wrong_completions` too) earn less, as does the
  reference in full-width look-alike digits; rewards are finite numbers or
  named parts and never raise on hostile completions (`inputs.py`: empty,
  whitespace, 10,000 characters, a 5,000-digit number, U+2212 minus, control
  characters, lone surrogates, random Unicode), ended either way; a warning
  (not a violation) when the reference cut off at the token limit earns as
  much as the finished one (unless the task says why it pays it:
  `cut_off_graded`); group rewards (`group_checks.py`) have the right
  length, also for a group with repeated completions, are deterministic, equal
  for equal completions and shuffle with the group, and the reference alone in
  its group counts as correct; `evaluate` (`evaluate_checks.py`) stays in
  [0, 1], counts the reference correct and agrees with the rewards every
  ending earned (0 or 1 for one reward, the mean of those for several);
- episodes, for a task with `feedback` (`episode_checks.py`): the reference's
  episode, a recovery (a wrong first turn, then the reference's), each of the
  task's `wrong_completions` at every turn and as a first turn recovered from,
  and every hostile text at every turn; `feedback` returns a `Feedback` with a
  finite reward, the same twice for the same history, and never raises; the
  reference episode ends (a reply of None) within `max_turns`, earns the most
  and counts as correct, and `wrong_completions` earn less; each reference
  turn fits `max_tokens`, and the episodes that end in the reference's turns
  `episode_tokens`; a warning when the reference episode cut off at the token
  limit at every turn earns as much;
- tools, for a task with tools (`tool_checks.py`; its episodes are played
  through them): every schema (JSON, described, rendered by the chat
  template), malformed calls (no such tool, an argument it does not take, one
  missing, one of the wrong type) each answered with an error, each tool
  called with hostile arguments of its types answering text or JSON within
  its time limit (raising is answered with an error), the reference
  episode's calls naming only the task's tools and none answered with an
  error, and the same answers when it is played again after all of these:
  no state kept across episodes;
- `final_answer`, if the task names its answers (`answer_checks.py`): the
  reference, ended as asked, names a str, the same each time; hostile
  completions name a str or None and never make it raise;
- `metrics`, if the task reports metrics beside its reward
  (`metric_checks.py`): on the reference, wrong and hostile completions,
  ended either way, a mapping of names to finite numbers, never raising, the
  same twice for the reference; an environment's `Feedback.metrics` too;
- `preflight()`, if the task has one: None or one printable line, or
  `Unavailable`, which passes through (no check stands in for what is missing);
- a task without references (`NoReference`): what needs none (determinism,
  held-out problems, hostile completions, metrics, evaluate), and a warning
  line saying which checks it could not make;
- with `learns`: 20 steps raise accuracy by at least 10 points, or, when
  accuracy starts above 90% (too high to rise so far), the mean reward by a
  tenth of the range from the lowest reward seen to the reference's; the
  summary says which was judged.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from mathrl.adapter import Adapter, AdapterError, Unavailable
from mathrl.backend import Backend, Tokenizer
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.problem_keys import problem_key
from mathrl.resolved import Task, as_task
from mathrl.rollout import RunProblems, run_problems
from mathrl.testing.answer_checks import check_final_answer
from mathrl.testing.backend_checks import BrokenRule, check_backend
from mathrl.testing.checker import Checker
from mathrl.testing.episode_checks import EpisodeChecks
from mathrl.testing.evaluate_checks import check_evaluate
from mathrl.testing.group_checks import check_group_laws
from mathrl.testing.inputs import ADVERSARIAL, WRONG, random_texts
from mathrl.testing.metric_checks import check_metrics
from mathrl.testing.new_interpreter import check_across_processes
from mathrl.testing.reward_checks import RewardChecks
from mathrl.text import one_line, shown

__all__ = [
    "ADVERSARIAL",
    "WRONG",
    "BrokenRule",
    "LearnsOn",
    "check_adapter",
    "check_backend",
    "random_texts",
]

RISE = 0.10
"""How much 20 steps must raise accuracy (or, accuracy saturated, the mean reward as a share
of the rewards' range) for `check_adapter(learns=...)`."""
LearnsOn = Callable[[RunProblems[Any]], Backend]
"""Makes the backend `check_adapter(learns=...)` trains on, told the problems its run draws."""


def check_adapter(
    adapter: Adapter[Any] | Task[Any],
    *,
    seeds: Sequence[int] = (0, 1),
    steps: Sequence[int] = (1, 2, 3),
    size: int = 8,
    heldout_size: int = 32,
    guard_steps: int = 10,
    learns: bool | LearnsOn = False,
    tokenizer: Tokenizer | None = None,
    across_processes: bool = True,
) -> str:
    """Check `adapter` against the contract; return a summary line or raise AssertionError.

    Args:
        seeds, steps, size: the (seed, step) pairs and batch size of the
            `build_dataset` checks.
        heldout_size: how many held-out problems to draw.
        guard_steps: held-out problems must avoid training steps 1..guard_steps
            (drawn at `size` problems a step).
        learns: also train 20 steps and require accuracy (steps 16-20 against
            steps 1-5) to rise by at least 10 points, or, if it starts above 90%,
            the mean reward by a tenth of the rewards' range: on the backend
            this makes, told the problems the run draws, or with True on the
            fake backend (`mathrl_fakes.FakeBackend`). The summary then has a
            line saying which was judged.
        tokenizer: the tokenizer the task's `max_tokens` is checked against
            (default: the fake backend's, which counts UTF-8 bytes, more than
            most real tokenizers do).
        across_processes: also draw the problems again in a new interpreter,
            with another hash seed, and compare (`new_interpreter`; it takes
            the time to import the task's module once more).
    """
    from mathrl_fakes import ByteTokenizer

    try:
        task = as_task(adapter)
    except AdapterError as exc:
        raise AssertionError(f"1 violation of the Adapter contract:\n- {exc}") from None
    checker = Checker(task)
    ready = _preflight(checker)
    tokenizer = tokenizer or ByteTokenizer()
    data = _prepare(checker, tokenizer)
    train = checker.dataset(seeds, steps, size)
    held = checker.heldout(seeds[0], heldout_size, guard_steps, size) if train else []
    if across_processes and checker.draws:
        check_across_processes(checker)
    checker.shared_prompts()
    rewards = RewardChecks(checker, tokenizer)
    if train:
        _budget(checker, rewards, seeds[0], size, held)
    for problem in [*train[:2], *held[:1]]:
        scored = rewards.one(problem, [*train, *held])
        if scored is not None and task.rewards_groups:
            check_group_laws(rewards, problem, scored[0], scored[2])
    check_final_answer(checker, [*train[:2], *held[:1]], tokenizer)
    check_metrics(checker, [*train[:2], *held[:1]], tokenizer)
    if task.plays_episodes:
        EpisodeChecks(checker, rewards, tokenizer).run([*train[:2], *held[:1]])
    check_evaluate(checker)  # on every reward seen, episodes' too
    learned = None
    if learns is not False and not checker.violations and checker.no_reference is None:
        learned = _learning(checker, None if learns is True else learns)
    if checker.no_reference is not None:
        learning = ", nor whether it learns on the fake" if learns is not False else ""
        checker.warnings.insert(
            0,
            f"no reference: {checker.no_reference}; so it was not checked that the reference "
            "earns the most and fits max_tokens, that wrong answers earn less, nor how "
            f"evaluate counts the reference{learning}",
        )
    warnings = "".join(f"\nwarning: {w}" for w in checker.warnings)
    if checker.violations:
        n = len(checker.violations)
        lines = "\n".join(f"- {v}" for v in checker.report())
        raise AssertionError(
            f"{n} violation{'s' * (n != 1)} of the Adapter contract by task "
            f"{task.name!r} ({task.identity}):\n{lines}{warnings}"
        )
    summary = f"task {task.name!r} ({task.identity}) passed {checker.checks} checks"
    learning = f"\n{learned}" if learned else ""
    lines = "".join(f"; {line}" for line in (ready, data) if line)
    return summary + lines + learning + warnings


def _preflight(checker: Checker) -> str | None:
    """`preflight()` returns None or one line; `Unavailable` (this machine cannot run the
    task) passes through, since no check can stand in for what is missing."""
    try:
        line = checker.task.preflight()
    except Unavailable:
        raise
    except Exception as exc:
        checker.expect(
            False,
            f"preflight() must not raise (it raised {type(exc).__name__}: "
            f"{one_line(str(exc), 200)}) except Unavailable",
            "preflight",
        )
        return None
    one = isinstance(line, str) and line.isprintable() and 0 < len(line) <= 500
    checker.expect(
        line is None or one,
        f"preflight() must return None or one printable line "
        f"of at most 500 characters (got {shown(line)})",
        "preflight",
    )
    return line if one else None


def _prepare(checker: Checker, tokenizer: Tokenizer) -> str | None:
    """`prepare(tokenizer, max_tokens)` on the tokenizer checked with: None or one line, or
    `OptionError` (data the task cannot use: a violation naming the row)."""
    task = checker.task
    what = f"prepare(tokenizer, max_tokens={task.max_tokens})"
    ok, line = checker.call(what, partial(task.prepare, tokenizer, task.max_tokens))
    if not ok or line is None:
        return None
    one = isinstance(line, str) and line.isprintable() and 0 < len(line) <= 1000
    checker.expect(one, f"{what} must return None or one printable line (got {shown(line)})")
    return line if one else None


BUDGET_PROBLEMS = 200
"""How many problems, at least, `check_adapter` checks the reference's token budget on (all of
them, for a task with fewer)."""


def _budget(checker: Checker, rewards: RewardChecks, seed: int, size: int, held: list[Any]) -> None:
    """Every reference of at least BUDGET_PROBLEMS distinct training problems (drawn step by
    step until that many, or until 10 steps bring none new), and of the held-out ones, fits
    max_tokens on the tokenizer in use."""
    drawn: dict[str, Any] = {}
    idle, step = 0, 1
    while len(drawn) < BUDGET_PROBLEMS and idle < 10 and step <= 10 * BUDGET_PROBLEMS:
        ok, problems = checker.call(
            f"build_dataset(seed={seed}, step={step}, size={size})",
            partial(checker.adapter.build_dataset, seed, step, size),
            key="build_dataset",
        )
        if not ok or not isinstance(problems, list):
            return
        before = len(drawn)
        drawn.update((problem_key(checker.adapter, p), p) for p in problems)
        idle = idle + 1 if len(drawn) == before else 0
        step += 1
    for _, prompt, ref in checker.with_references([*drawn.values(), *held]):
        rewards.fits(ref, checker.task.stop_for(prompt), checker.name(prompt))


def _learning(checker: Checker, learns_on: LearnsOn | None) -> str | None:
    """20 steps on the backend `learns_on` makes (default: the fake) raise accuracy (steps
    16-20 against steps 1-5) by at least 10 points; or, if accuracy starts too high to rise
    so far, the mean reward by a tenth of the rewards' range (the lowest seen to the
    reference's). Returns the line that says which was judged, if it passed."""
    config = TrainConfig(steps=20, batch=8, group=4)
    run = run_problems(checker.task, config)
    with tempfile.TemporaryDirectory(prefix="mathrl-check-") as folder:
        if learns_on is None:
            from mathrl_fakes import FakeBackend

            backend: Backend = FakeBackend.for_run(checker.task, run, checkpoint_dir=Path(folder))
        else:
            backend = learns_on(run)
        result = run_grpo(backend, checker.task, config)
    where = "the fake backend" if learns_on is None else "the backend given"
    start, end = _first_and_last([m.accuracy for m in result.steps])
    went = f"went from {start:.1%} (steps 1-5) to {end:.1%} (steps 16-20)"
    if start + RISE <= 1.0:
        learned = checker.expect(
            end >= start + RISE,
            f"a 20-step run on {where} did not learn: accuracy {went}; it must rise by at "
            "least 10 points",
        )
        return f"learning on {where}: accuracy {went}" if learned else None
    low, high = min(checker.seen, default=0.0), max(checker.references, default=1.0)
    need = RISE * (high - low) if high > low else RISE
    first, last = _first_and_last([m.mean_reward for m in result.steps])
    rose = f"went from {first:.3g} (steps 1-5) to {last:.3g} (steps 16-20)"
    saturated = (
        f"accuracy started at {start:.1%}, too high to rise 10 points, so the mean reward was "
        "judged"
    )
    learned = checker.expect(
        last >= first + need,
        f"a 20-step run on {where} did not learn: {saturated}: it {rose}; it must rise by at "
        f"least {need:.3g} (a tenth of the range from the lowest reward seen, {low:.3g}, to "
        f"the reference's, {high:.3g})",
    )
    return f"learning on {where}: {saturated}: it {rose}" if learned else None


def _first_and_last(values: Sequence[float]) -> tuple[float, float]:
    """The means of the first five and the last five of `values`."""
    return math.fsum(values[:5]) / 5, math.fsum(values[-5:]) / 5
