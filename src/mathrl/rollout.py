"""Sampling and scoring: the pieces of a step before training.

Shape suffixes name the axes of nested data:
    _P  a problem in the step's batch
    _G  a member of a problem's group of samples
    _T  a token
    _D  a datum (one per non-empty completion in a non-constant group)
so `rewards_P_G[p][g]` is the reward of sample g of problem p.

`responses_of`, `trained` and `datums_of` are pure; `sample_groups`,
`rollout` and `evaluate` keep every request of a step in flight at once on
one sampler. `mathrl.step.grpo_step` shows how they make one step.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mathrl.adapter import Prompt, Response
from mathrl.backend import Completion, SampleParams, Sampler, Tokenizer, TrainResult
from mathrl.config import TrainConfig
from mathrl.grpo import Datum, build_datum, group_advantages, is_constant_group
from mathrl.report import Sample, SampleGroup, StepMetrics
from mathrl.resolved import Task
from mathrl.rewards import response_of, rewards_of

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Rollout:
    """One step's samples, scored and turned into datums."""

    prompts_P: list[Prompt]
    completions_P_G: list[list[Completion]]
    responses_P_G: list[list[Response]]
    rewards_P_G: list[list[float]]
    parts_P_G: list[list[dict[str, float]]]
    advantages_P_G: list[list[float]]
    trained_P_G: list[list[bool]]
    datums_D: list[Datum]
    accuracy: float
    constant_groups: int
    sampler_path: str = ""
    seconds: float = 0.0


def sample_params(
    task: Task[P],
    config: TrainConfig,
    prompt: Prompt,
    seed: int | None = None,
    *,
    greedy: bool = False,
) -> SampleParams:
    """The sampling parameters a run asks for: the stops, the budget, the temperature."""
    max_tokens = config.max_tokens if config.max_tokens is not None else task.max_tokens
    temperature = 0.0 if greedy else config.temperature
    chat = not isinstance(prompt, str)
    return SampleParams(max_tokens, temperature, task.stop_for(prompt), seed, chat)


def request_seed(run_seed: int, step: int, problem: int) -> int:
    """The sampling seed of one problem's request: stable across processes."""
    digest = hashlib.blake2b(f"{run_seed}/{step}/{problem}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF


def prompt_tokens(tokenizer: Tokenizer, task: Task[P], prompt: Prompt) -> list[int]:
    """A prompt's tokens: its text encoded, or its conversation in the chat template."""
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    return tokenizer.render_chat(prompt, task.chat_template_options)


def responses_of(
    tokenizer: Tokenizer,
    task: Task[P],
    prompts_P: Sequence[Prompt],
    completions_P_G: Sequence[Sequence[Completion]],
) -> list[list[Response]]:
    """Each completion as its reward sees it: its text, and how sampling ended it."""
    return [
        [
            response_of(tokenizer, c.tokens, task.stop_for(prompt), not isinstance(prompt, str))
            for c in completions_G
        ]
        for prompt, completions_G in zip(prompts_P, completions_P_G, strict=True)
    ]


def trained(
    task: Task[P], config: TrainConfig, responses_P_G: Sequence[Sequence[Response]]
) -> list[list[bool]]:
    """Which completions are trained on: all, or (masking) those not cut off at the limit."""
    mask = task.mask_truncated or config.mask_truncated
    return [
        [not (mask and r.ended == "length") for r in responses_G] for responses_G in responses_P_G
    ]


def datums_of(
    prompts_P_T: Sequence[Sequence[int]],
    completions_P_G: Sequence[Sequence[Completion]],
    rewards_P_G: Sequence[Sequence[float]],
    advantages_P_G: Sequence[Sequence[float]],
    trained_P_G: Sequence[Sequence[bool]] | None = None,
) -> list[Datum]:
    """A datum per non-empty completion trained on, except in groups whose rewards are all equal.

    A constant group's advantages are all zero: it would train nothing.
    """
    datums_D: list[Datum] = []
    for p, (prompt_T, completions_G, rewards_G, advantages_G) in enumerate(
        zip(prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G, strict=True)
    ):
        if is_constant_group(rewards_G):
            continue
        for g, (completion, advantage) in enumerate(zip(completions_G, advantages_G, strict=True)):
            if trained_P_G is not None and not trained_P_G[p][g]:
                continue
            datum = build_datum(prompt_T, completion.tokens, completion.logprobs, advantage)
            if datum is not None:
                datums_D.append(datum)
    return datums_D


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
    prompts_P: Sequence[Prompt],
    prompts_P_T: Sequence[Sequence[int]],
    on_done: Callable[[int], None] | None = None,
) -> list[list[Completion]]:
    """`config.group` completions of each prompt of step `step`, every request at once.

    Each problem's request has its own seed (`request_seed`), so a retried or
    resumed request draws the same samples.
    """
    params_P = [
        sample_params(task, config, prompt, request_seed(config.seed, step, p))
        for p, prompt in enumerate(prompts_P)
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
    prompts_P = [task.adapter.make_prompt(p) for p in problems_P]
    prompts_P_T = [prompt_tokens(tokenizer, task, prompt) for prompt in prompts_P]
    completions_P_G = await sample_groups(
        sampler, task, config, step, prompts_P, prompts_P_T, on_done
    )
    return await score(tokenizer, task, config, problems_P, prompts_P, prompts_P_T, completions_P_G)


async def score(
    tokenizer: Tokenizer,
    task: Task[P],
    config: TrainConfig,
    problems_P: Sequence[P],
    prompts_P: Sequence[Prompt],
    prompts_P_T: Sequence[Sequence[int]],
    completions_P_G: Sequence[Sequence[Completion]],
) -> Rollout:
    """Rewards, advantages and datums for one step's samples: `grpo_step`'s steps 3 and 4."""
    responses_P_G = responses_of(tokenizer, task, prompts_P, completions_P_G)
    scores = await rewards_of(task, problems_P, responses_P_G)
    rewards_P_G = scores.rewards_P_G
    advantages_P_G = [group_advantages(rewards_G) for rewards_G in rewards_P_G]
    trained_P_G = trained(task, config, responses_P_G)
    datums_D = datums_of(prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G, trained_P_G)
    return Rollout(
        list(prompts_P),
        [list(completions_G) for completions_G in completions_P_G],
        responses_P_G,
        rewards_P_G,
        scores.parts_P_G,
        advantages_P_G,
        trained_P_G,
        datums_D,
        accuracy=task.adapter.evaluate([r for rewards_G in rewards_P_G for r in rewards_G]),
        constant_groups=sum(map(is_constant_group, rewards_P_G)),
    )


def logged_groups(step: int, batch: Rollout) -> list[SampleGroup]:
    """The step's groups as the run reports them: each completion, its reward and advantage."""
    groups = []
    for p, prompt in enumerate(batch.prompts_P):
        constant = is_constant_group(batch.rewards_P_G[p])
        samples = tuple(
            Sample(str(r), r.ended, r.stop, reward, parts, advantage, not constant and kept)
            for r, reward, parts, advantage, kept in zip(
                batch.responses_P_G[p],
                batch.rewards_P_G[p],
                batch.parts_P_G[p],
                batch.advantages_P_G[p],
                batch.trained_P_G[p],
                strict=True,
            )
        )
        groups.append(SampleGroup(step, p, prompt, samples))
    return groups


def part_means(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each reward part's mean over the completions (a completion without it counts 0)."""
    names = sorted({name for p in parts for name in p})
    return {name: math.fsum(p.get(name, 0.0) for p in parts) / len(parts) for name in names}


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
        reward_parts=part_means([p for parts_G in batch.parts_P_G for p in parts_G]),
        truncated=sum(
            r.ended == "length" for responses_G in batch.responses_P_G for r in responses_G
        ),
    )
