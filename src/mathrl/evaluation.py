"""Held-out evaluation: which problems, and how the weights answer them.

For: the loop's evaluations (`TrainConfig.eval_every`), and the `sample`
and `eval` commands. The held-out problems are the task's
(`heldout_dataset`, or its step 0), minus any this run trains on. Each gets
one greedy completion (its accuracy), and, when asked, n samples at the
sampling temperature, whose correct ones give pass@k and whose named answers
give maj@k (`mathrl.passk`). All of them are in flight at once: one round of
requests, one per problem for the samples and one for the greedy answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mathrl.adapter import EVAL_STEP, Response
from mathrl.backend import Sampler, Tokenizer
from mathrl.config import TrainConfig
from mathrl.episodes import Episode, Player, all_or_none
from mathrl.passk import majority_at_k, pass_at_k
from mathrl.problem_keys import problem_key
from mathrl.report import Advice, EvalMetrics
from mathrl.resolved import Task
from mathrl.rewards import BrokenContract, TaskError, response_key, task_call
from mathrl.rollout import (
    drawn_per_step,
    metric_means,
    part_means,
    play_groups,
    prompt_tokens,
)
from mathrl.text import shown
from mathrl.workers import Workers, borrowed, in_process

P = TypeVar("P")
GUARDED_PROBLEMS = 100_000
"""How many training problems a default held-out set is compared with, at most."""


@dataclass(frozen=True, slots=True)
class Samples:
    """n samples of each held-out problem at the sampling temperature: pass@k, maj@k."""

    n: int
    rewards_P_G: list[list[float]]
    correct_P_G: list[list[bool]]
    """Whether each sample is correct: the task's `evaluate` of its reward alone."""
    answers_P_G: list[list[str | None]] | None = None
    """The answer each sample names (`final_answer`); None: the task names no answers."""

    def pass_at(self, k: int) -> float:
        """pass@k, the mean over problems of its estimate from the problem's n samples."""
        return _mean([pass_at_k(self.n, sum(correct_G), k) for correct_G in self.correct_P_G])

    def majority_at(self, k: int) -> float | None:
        """maj@k, the mean over problems; None when the task names no answers."""
        if self.answers_P_G is None:
            return None
        pairs = zip(self.answers_P_G, self.correct_P_G, strict=True)
        return _mean([majority_at_k(answers_G, correct_G, k) for answers_G, correct_G in pairs])

    @property
    def mean_reward(self) -> float:
        return _mean([r for rewards_G in self.rewards_P_G for r in rewards_G])


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Greedy completions of the held-out problems, what they earned, and any samples."""

    responses_P: list[Response]
    rewards_P: list[float]
    parts_P: list[dict[str, float]]
    accuracy: float
    samples: Samples | None = None
    metrics_P: list[dict[str, float]] = field(default_factory=list)
    """What the task reported beside each greedy completion's reward (none by default)."""
    episodes_P: Sequence[Episode] = ()
    """Each greedy episode whole: every turn and the environment's reply to it (`sample`
    prints them for a task that plays episodes)."""

    @property
    def texts_P(self) -> list[str]:
        return [str(r) for r in self.responses_P]

    def metrics(
        self, step: int, sampler_path: str, seconds: float, ks: Sequence[int] = ()
    ) -> EvalMetrics:
        """This evaluation, as the run reports it after step `step`, with pass@k (and maj@k,
        where the task names answers) for each of `ks` if it drew samples."""
        n = len(self.rewards_P)
        mean = sum(self.rewards_P) / n if n else 0.0
        correct = round(self.accuracy * n)
        parts = part_means(self.parts_P)
        greedy = (step, self.accuracy, correct, n, mean, sampler_path, seconds, parts)
        reported = metric_means(self.metrics_P)
        if self.samples is None or not ks:
            return EvalMetrics(*greedy, metrics=reported)
        drawn = self.samples
        majority = {k: drawn.majority_at(k) for k in ks}
        return EvalMetrics(
            *greedy,
            samples=drawn.n,
            pass_at_k={k: drawn.pass_at(k) for k in ks},
            majority_at_k={k: m for k, m in majority.items() if m is not None},
            sampled_mean_reward=drawn.mean_reward,
            metrics=reported,
        )


async def evaluate(
    tokenizer: Tokenizer,
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    problems: Sequence[P],
    *,
    greedy: bool = True,
    workers: Workers | None = None,
    samples: int = 0,
) -> Evaluation:
    """One episode per held-out problem (greedy unless told not), and `samples` more at
    `config.temperature` (none by default): all in flight at once."""
    prompts_P = [task.adapter.make_prompt(p) for p in problems]
    prompts_P_T = [prompt_tokens(tokenizer, task, prompt) for prompt in prompts_P]
    with borrowed(workers) as pool:
        player = Player(tokenizer, sampler, task, pool)
        given = (player, config, EVAL_STEP, problems, prompts_P, prompts_P_T)
        rounds = [play_groups(*given, size=1, greedy=greedy)]
        if samples:  # their request seeds follow the greedy ones'
            rounds.append(play_groups(*given, size=samples, first=len(problems)))
        played, *sampled = await all_or_none(rounds)
        drawn = await _samples(task, samples, sampled[0], pool) if sampled else None
    episodes_P = [e for (e,) in played]
    rewards_P = [e.reward for e in episodes_P]
    return Evaluation(
        [e.final for e in episodes_P],
        rewards_P,
        [e.parts for e in episodes_P],
        task.adapter.evaluate(rewards_P),
        drawn,
        [e.metrics for e in episodes_P],
        episodes_P,
    )


async def _samples(
    task: Task[P], n: int, played: Sequence[Sequence[Episode]], pool: Workers
) -> Samples:
    """The samples' rewards, which are correct, and (if the task names them) their answers."""
    rewards_P_G = [[e.reward for e in episodes_G] for episodes_G in played]
    judge = task.adapter.evaluate
    correct_P_G = [[judge([r]) == 1.0 for r in rewards_G] for rewards_G in rewards_P_G]
    answers_P_G = None
    if task.final_answer is not None:
        answers_P_G = await all_or_none(
            [_answers(task, [e.final for e in episodes_G], pool) for episodes_G in played]
        )
    return Samples(n, rewards_P_G, correct_P_G, answers_P_G)


async def _answers(task: Task[P], responses_G: list[Response], pool: Workers) -> list[str | None]:
    """Each response's `final_answer`, once per distinct response, in one call to the pool;
    TaskError if it raises, is late, or returns what is not a str or None."""

    def name_all() -> list[str | None]:
        seen: dict[tuple[object, ...], str | None] = {}
        for response in responses_G:
            key = response_key(response)
            if key not in seen:
                answer = task_call(task, "final_answer", response, response)
                if not (answer is None or isinstance(answer, str)):
                    problem = BrokenContract(f"it must return a str or None (got {shown(answer)})")
                    raise TaskError(task, "final_answer", problem, response)
                seen[key] = answer
        return [seen[response_key(r)] for r in responses_G]

    calls = len({response_key(r) for r in responses_G})
    fn: Callable[[], list[str | None]] = name_all
    if task.work_in_processes and pool.size:
        fn = in_process(fn, pool.timeout, calls)
    try:
        return await pool.run(fn, calls)
    except TaskError:
        raise
    except Exception as exc:  # past the timeout, or its process died or could not answer
        raise TaskError(task, "final_answer", exc, responses_G) from None


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def distinct(task: Task[P], problems: Sequence[P]) -> tuple[list[P], str | None]:
    """`problems`, each once (the first time it comes), and a note saying how many repeats were
    left out, if any: an evaluation that counts a problem twice overstates what it measured."""
    seen: set[str] = set()
    kept = []
    for problem in problems:
        key = problem_key(task.adapter, problem)
        if key not in seen:
            seen.add(key)
            kept.append(problem)
    if len(kept) == len(problems):
        return list(problems), None
    note = (
        f"the {len(problems)} held-out problems asked for of task {task.name!r} hold only "
        f"{len(kept)} distinct ones: evaluating each of those once ({len(kept)}), not "
        f"counting {len(problems) - len(kept)} repeats"
    )
    return kept, Advice(note, ("eval_problems",))


def evaluation_set(
    task: Task[P], config: TrainConfig, repeats: bool = True
) -> tuple[list[P], list[str]]:
    """The run's held-out problems, and warnings about them for the user.

    A task that declares `heldout_dataset` keeps it apart from training
    itself (`mathrl.testing` checks that). For one that does not, problems
    this run trains on (`mathrl.problem_keys`: the same problem, not just the
    same prompt, which problems of a game may share) are left out here, so evaluation stays
    honest, and a warning says how many. Only the first GUARDED_PROBLEMS
    training problems are drawn to compare: a run longer than that is
    checked over its first steps only. A set that repeats problems (a small
    problem space) is kept, with a warning (unless `repeats` is False: the
    caller keeps each problem once, `distinct`): its accuracy counts repeats.
    """
    problems = task.heldout(config.seed, config.eval_problems)
    warnings = []
    if not task.declares_heldout:
        # Every problem a step may draw (with fill_batch, more than `batch`), not only the first.
        drawn = drawn_per_step(config)
        steps = min(config.steps, max(1, GUARDED_PROBLEMS // drawn))
        training = task.training_problems(config.seed, steps, drawn)
        kept = [p for p in problems if problem_key(task.adapter, p) not in training]
        if len(kept) < len(problems):
            warnings.append(
                f"{len(problems) - len(kept)} of {len(problems)} held-out problems of task "
                f"{task.name!r} are also training problems of this run and were left out "
                "of evaluation; declare heldout_dataset on the task to avoid this"
            )
        problems = kept
    distinct = len({problem_key(task.adapter, p) for p in problems})
    if repeats and distinct < len(problems):
        advice = (
            f"the {len(problems)} held-out problems of task {task.name!r} hold only {distinct} "
            f"distinct ones ({len(problems) - distinct} repeats), so each evaluation counts "
            f"some problems several times; set eval_problems to {distinct} or fewer, or draw "
            f"them without replacement (rng.sample) from at least {len(problems)} problems"
        )
        warnings.append(Advice(advice, ("eval_problems",)))
    return problems, warnings
