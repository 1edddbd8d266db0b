"""Sampling and scoring: the pieces of a step before training, and held-out evaluation.

Shape suffixes name the axes of nested data:
    _P  a problem in the step's batch
    _G  a member of a problem's group of samples
    _T  a token
    _D  a datum (one per non-empty completion in a non-constant group)
so `rewards_P_G[p][g]` is the reward of sample g of problem p.

`rewards_of` and `datums_of` are pure; `sample_groups`, `rollout` and
`evaluate` keep every request of a step in flight at once on one sampler.
`mathrl.loop.grpo_step` shows how they make one step.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mathrl.adapter import EVAL_STEP, Task
from mathrl.backend import Completion, SampleParams, Sampler, Tokenizer, TrainResult
from mathrl.config import TrainConfig
from mathrl.grpo import Datum, build_datum, group_advantages, is_constant_group
from mathrl.report import EvalMetrics, StepMetrics

P = TypeVar("P")
GUARDED_PROBLEMS = 100_000
"""How many training problems a default held-out set is compared with, at most."""


@dataclass(frozen=True, slots=True)
class Rollout:
    """One step's samples, scored and turned into datums."""

    completions_P_G: list[list[Completion]]
    rewards_P_G: list[list[float]]
    datums_D: list[Datum]
    accuracy: float
    constant_groups: int
    sampler_path: str = ""
    seconds: float = 0.0


def sample_params(
    task: Task[P], config: TrainConfig, seed: int | None = None, *, greedy: bool = False
) -> SampleParams:
    """The sampling parameters a run asks for: the task's stop, the budget, the temperature."""
    max_tokens = config.max_tokens if config.max_tokens is not None else task.max_tokens
    temperature = 0.0 if greedy else config.temperature
    return SampleParams(max_tokens, temperature, task.stop, seed)


def request_seed(run_seed: int, step: int, problem: int) -> int:
    """The sampling seed of one problem's request: stable across processes."""
    digest = hashlib.blake2b(f"{run_seed}/{step}/{problem}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF


def rewards_of(
    task: Task[P],
    decode: Callable[[Sequence[int]], str],
    problems_P: Sequence[P],
    completions_P_G: Sequence[Sequence[Completion]],
) -> list[list[float]]:
    """Each completion's reward; identical texts for one problem are scored once.

    Rewards are pure (the Adapter contract), so the cache changes nothing but
    the cost, which matters for rewards that run code.
    """
    rewards_P_G = []
    for problem, completions_G in zip(problems_P, completions_P_G, strict=True):
        seen: dict[str, float] = {}
        rewards_G = []
        for c in completions_G:
            text = decode(c.tokens)
            if text not in seen:
                seen[text] = float(task.adapter.compute_reward(text, problem))
            rewards_G.append(seen[text])
        rewards_P_G.append(rewards_G)
    return rewards_P_G


def datums_of(
    prompts_P_T: Sequence[Sequence[int]],
    completions_P_G: Sequence[Sequence[Completion]],
    rewards_P_G: Sequence[Sequence[float]],
    advantages_P_G: Sequence[Sequence[float]],
) -> list[Datum]:
    """A datum per non-empty completion, except in groups whose rewards are all equal.

    A constant group's advantages are all zero: it would train nothing.
    """
    datums_D: list[Datum] = []
    for prompt_T, completions_G, rewards_G, advantages_G in zip(
        prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G, strict=True
    ):
        if is_constant_group(rewards_G):
            continue
        for completion, advantage in zip(completions_G, advantages_G, strict=True):
            datum = build_datum(prompt_T, completion.tokens, completion.logprobs, advantage)
            if datum is not None:
                datums_D.append(datum)
    return datums_D


def score(
    task: Task[P],
    decode: Callable[[Sequence[int]], str],
    problems_P: Sequence[P],
    prompts_P_T: Sequence[Sequence[int]],
    completions_P_G: list[list[Completion]],
) -> Rollout:
    """Rewards, advantages and datums for one step's samples (pure)."""
    rewards_P_G = rewards_of(task, decode, problems_P, completions_P_G)
    advantages_P_G = [group_advantages(rewards_G) for rewards_G in rewards_P_G]
    datums_D = datums_of(prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G)
    constant_groups = sum(map(is_constant_group, rewards_P_G))
    accuracy = task.adapter.evaluate([r for rewards_G in rewards_P_G for r in rewards_G])
    return Rollout(completions_P_G, rewards_P_G, datums_D, accuracy, constant_groups)


async def sample_all(
    sampler: Sampler,
    prompts_P_T: Sequence[Sequence[int]],
    num_samples: int,
    params_P: Sequence[SampleParams],
    on_done: Callable[[int], None] | None = None,
) -> list[list[Completion]]:
    """Every prompt's request in flight at once; `on_done(n)` as each returns n completions."""

    async def one(prompt_T: Sequence[int], params: SampleParams) -> list[Completion]:
        completions_G = await sampler.sample(prompt_T, num_samples, params)
        if on_done is not None:
            on_done(len(completions_G))
        return completions_G

    return list(
        await asyncio.gather(
            *(one(prompt_T, p) for prompt_T, p in zip(prompts_P_T, params_P, strict=True))
        )
    )


async def sample_groups(
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    step: int,
    prompts_P_T: Sequence[Sequence[int]],
    on_done: Callable[[int], None] | None = None,
) -> list[list[Completion]]:
    """`config.group` completions of each prompt of step `step`, every request at once.

    Each problem's request has its own seed (`request_seed`), so a retried or
    resumed request draws the same samples.
    """
    params_P = [
        sample_params(task, config, request_seed(config.seed, step, p))
        for p in range(len(prompts_P_T))
    ]
    return await sample_all(sampler, prompts_P_T, config.group, params_P, on_done)


async def rollout(
    tokenizer: Tokenizer,
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    step: int,
    on_done: Callable[[int], None] | None = None,
) -> Rollout:
    """Everything of step `step` before training: `grpo_step` up to its datums."""
    problems_P = task.adapter.build_dataset(config.seed, step, config.batch)
    prompts_P_T = [tokenizer.encode(task.adapter.make_prompt(p)) for p in problems_P]
    completions_P_G = await sample_groups(sampler, task, config, step, prompts_P_T, on_done)
    return score(task, tokenizer.decode, problems_P, prompts_P_T, completions_P_G)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Greedy completions of the held-out problems, and what they earned."""

    texts_P: list[str]
    rewards_P: list[float]
    accuracy: float

    def metrics(self, step: int, sampler_path: str, seconds: float) -> EvalMetrics:
        """This evaluation, as the run reports it after step `step`."""
        n = len(self.rewards_P)
        mean = sum(self.rewards_P) / n if n else 0.0
        correct = round(self.accuracy * n)
        return EvalMetrics(step, self.accuracy, correct, n, mean, sampler_path, seconds)


async def evaluate(
    tokenizer: Tokenizer,
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    problems: Sequence[P],
    *,
    greedy: bool = True,
) -> Evaluation:
    """One completion per held-out problem (greedy unless told not), all in flight at once."""
    prompts_P_T = [tokenizer.encode(task.adapter.make_prompt(p)) for p in problems]
    params_P = [
        sample_params(task, config, request_seed(config.seed, EVAL_STEP, i), greedy=greedy)
        for i in range(len(problems))
    ]
    completions_P_G = await sample_all(sampler, prompts_P_T, 1, params_P)
    rewards_P = [r for (r,) in rewards_of(task, tokenizer.decode, problems, completions_P_G)]
    texts_P = [tokenizer.decode(c.tokens) for (c,) in completions_P_G]
    return Evaluation(texts_P, rewards_P, task.adapter.evaluate(rewards_P))


def evaluation_set(task: Task[P], config: TrainConfig) -> tuple[list[P], int]:
    """The run's held-out problems, and how many of the task's held-out problems it left out.

    A task that declares `heldout_dataset` keeps it apart from training
    itself (`mathrl.testing` checks that). For one that does not, problems
    whose prompt this run trains on are left out here, so evaluation stays
    honest; the count says how many. Only the first GUARDED_PROBLEMS
    training problems are drawn to compare: a run longer than that is
    checked over its first steps only.
    """
    problems = task.heldout(config.seed, config.eval_problems)
    if task.declares_heldout:
        return problems, 0
    steps = min(config.steps, max(1, GUARDED_PROBLEMS // config.batch))
    training = task.training_prompts(config.seed, steps, config.batch)
    kept = [p for p in problems if task.adapter.make_prompt(p) not in training]
    return kept, len(problems) - len(kept)


def step_metrics(
    config: TrainConfig, step: int, batch: Rollout, result: TrainResult | None, training: float
) -> StepMetrics:
    """What step `step` did: its rollout's figures and what training reported."""
    rewards = [r for rewards_G in batch.rewards_P_G for r in rewards_G]
    return StepMetrics(
        step=step,
        accuracy=batch.accuracy,
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        datums=len(batch.datums_D),
        groups=len(batch.rewards_P_G),
        group_size=config.group,
        constant_groups=batch.constant_groups,
        sampled_tokens=sum(len(c.tokens) for cs in batch.completions_P_G for c in cs),
        loss=result.loss if result is not None else None,
        backend_metrics=dict(result.metrics) if result is not None else {},
        sampling_seconds=batch.seconds,
        training_seconds=training if result is not None else 0.0,
        sampler_path=batch.sampler_path,
    )
