"""Held-out evaluation: which problems, and how the weights answer them, greedily.

For: the loop's evaluations (`TrainConfig.eval_every`) and the `sample` command. The
held-out problems are the task's (`heldout_dataset`, or its step 0), minus
any this run trains on; each gets one completion, all in flight at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from mathrl.adapter import EVAL_STEP, Response
from mathrl.backend import Sampler, Tokenizer
from mathrl.config import TrainConfig
from mathrl.episodes import Player
from mathrl.report import EvalMetrics
from mathrl.resolved import Task, prompt_key
from mathrl.rollout import part_means, play_groups, prompt_tokens
from mathrl.workers import Workers, borrowed

P = TypeVar("P")
GUARDED_PROBLEMS = 100_000
"""How many training problems a default held-out set is compared with, at most."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Greedy completions of the held-out problems, and what they earned."""

    responses_P: list[Response]
    rewards_P: list[float]
    parts_P: list[dict[str, float]]
    accuracy: float

    @property
    def texts_P(self) -> list[str]:
        return [str(r) for r in self.responses_P]

    def metrics(self, step: int, sampler_path: str, seconds: float) -> EvalMetrics:
        """This evaluation, as the run reports it after step `step`."""
        n = len(self.rewards_P)
        mean = sum(self.rewards_P) / n if n else 0.0
        correct = round(self.accuracy * n)
        parts = part_means(self.parts_P)
        return EvalMetrics(step, self.accuracy, correct, n, mean, sampler_path, seconds, parts)


async def evaluate(
    tokenizer: Tokenizer,
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    problems: Sequence[P],
    *,
    greedy: bool = True,
    workers: Workers | None = None,
) -> Evaluation:
    """One episode per held-out problem (greedy unless told not), all in flight at once."""
    prompts_P = [task.adapter.make_prompt(p) for p in problems]
    prompts_P_T = [prompt_tokens(tokenizer, task, prompt) for prompt in prompts_P]
    with borrowed(workers) as pool:
        player = Player(tokenizer, sampler, task, pool)
        played = await play_groups(
            player, config, EVAL_STEP, problems, prompts_P, prompts_P_T, size=1, greedy=greedy
        )
    episodes_P = [e for (e,) in played]
    rewards_P = [e.reward for e in episodes_P]
    return Evaluation(
        [e.final for e in episodes_P],
        rewards_P,
        [e.parts for e in episodes_P],
        task.adapter.evaluate(rewards_P),
    )


def evaluation_set(task: Task[P], config: TrainConfig) -> tuple[list[P], list[str]]:
    """The run's held-out problems, and warnings about them for the user.

    A task that declares `heldout_dataset` keeps it apart from training
    itself (`mathrl.testing` checks that). For one that does not, problems
    whose prompt this run trains on are left out here, so evaluation stays
    honest, and a warning says how many. Only the first GUARDED_PROBLEMS
    training problems are drawn to compare: a run longer than that is
    checked over its first steps only. A set that repeats problems (a small
    problem space) is kept, with a warning: its accuracy counts repeats.
    """
    problems = task.heldout(config.seed, config.eval_problems)
    warnings = []
    if not task.declares_heldout:
        steps = min(config.steps, max(1, GUARDED_PROBLEMS // config.batch))
        training = task.training_prompts(config.seed, steps, config.batch)
        kept = [p for p in problems if prompt_key(task.adapter.make_prompt(p)) not in training]
        if len(kept) < len(problems):
            warnings.append(
                f"{len(problems) - len(kept)} of {len(problems)} held-out problems of task "
                f"{task.name!r} are also training problems of this run and were left out "
                "of evaluation; declare heldout_dataset on the task to avoid this"
            )
        problems = kept
    distinct = len({prompt_key(task.adapter.make_prompt(p)) for p in problems})
    if distinct < len(problems):
        warnings.append(
            f"the {len(problems)} held-out problems of task {task.name!r} hold only {distinct} "
            f"distinct ones ({len(problems) - distinct} repeats), so each evaluation counts "
            f"some problems several times; lower the number of held-out problems to {distinct} "
            "or widen the task's problem space"
        )
    return problems, warnings
