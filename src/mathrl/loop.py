"""The GRPO loop: orchestrates the pure core over a `Backend`.

Shape suffixes name the axes of nested data:
    _P  a problem in the step's batch
    _G  a member of a problem's group of samples
    _T  a token
    _D  a datum (one per non-empty completion in a non-constant group)
so `rewards_P_G[p][g]` is the reward of sample g of problem p.

One on-policy step: a sampler for the current weights -> every problem's group
sampled concurrently -> rewards -> advantages, constant groups dropped ->
datums -> forward_backward and optim_step submitted back to back, with the
save for the next step's sampler right behind them. With
`max_steps_off_policy=1`, step k+1 is sampled from the weights before step
k's update while step k trains; each datum carries the logprobs of the
sampler that drew it, so the importance-sampling loss corrects for the lag.

This module does no printing; it reports each step to a callback.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mathrl.adapter import Adapter
from mathrl.backend import Backend, Completion, SampleParams, Sampler, TrainResult
from mathrl.config import Config
from mathrl.grpo import Datum, build_datum, group_advantages, is_constant_group

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """What one step did."""

    step: int
    accuracy: float
    """The adapter's accuracy over this step's training samples."""
    datums: int
    groups: int
    constant_groups: int
    sampled_tokens: int
    loss: float | None
    """The importance-sampling loss, or None when nothing was trained."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """Per-step metrics, and the path of the final weights."""

    steps: list[StepMetrics]
    saved_path: str


@dataclass(frozen=True, slots=True)
class Rollout:
    """One step's samples, scored and turned into datums."""

    completions_P_G: list[list[Completion]]
    rewards_P_G: list[list[float]]
    datums_D: list[Datum]
    accuracy: float
    constant_groups: int


def sample_params(config: Config, seed: int | None = None) -> SampleParams:
    """The sampling parameters a run's config asks for."""
    stop = ("\n",) if config.stop_at_newline else ()
    return SampleParams(config.max_tokens, config.temperature, stop, seed)


def request_seed(run_seed: int, step: int, problem: int) -> int:
    """The sampling seed of one problem's request: stable across processes."""
    digest = hashlib.blake2b(f"{run_seed}/{step}/{problem}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF


def score(
    adapter: Adapter[P],
    decode: Callable[[Sequence[int]], str],
    problems_P: Sequence[P],
    prompts_P_T: Sequence[Sequence[int]],
    completions_P_G: list[list[Completion]],
) -> Rollout:
    """Rewards, advantages and datums for one step's samples (pure)."""
    rewards_P_G = [
        [adapter.compute_reward(decode(c.tokens), problem) for c in completions_G]
        for problem, completions_G in zip(problems_P, completions_P_G, strict=True)
    ]
    datums_D: list[Datum] = []
    constant_groups = 0
    for prompt_T, completions_G, rewards_G in zip(
        prompts_P_T, completions_P_G, rewards_P_G, strict=True
    ):
        if is_constant_group(rewards_G):
            constant_groups += 1
            continue
        for completion, advantage in zip(completions_G, group_advantages(rewards_G), strict=True):
            datum = build_datum(prompt_T, completion.tokens, completion.logprobs, advantage)
            if datum is not None:
                datums_D.append(datum)
    accuracy = adapter.evaluate([r for rewards_G in rewards_P_G for r in rewards_G])
    return Rollout(completions_P_G, rewards_P_G, datums_D, accuracy, constant_groups)


async def rollout(
    backend: Backend, sampler: Sampler, adapter: Adapter[P], config: Config, step: int
) -> Rollout:
    """Sample every problem's group of one step concurrently, then score them."""
    problems_P = adapter.build_dataset(config.seed, step, config.batch)
    prompts_P_T = [backend.tokenizer.encode(adapter.make_prompt(p)) for p in problems_P]
    completions_P_G = list(
        await asyncio.gather(
            *(
                sampler.sample(
                    prompt_T,
                    config.group,
                    sample_params(config, request_seed(config.seed, step, i)),
                )
                for i, prompt_T in enumerate(prompts_P_T)
            )
        )
    )
    return score(adapter, backend.tokenizer.decode, problems_P, prompts_P_T, completions_P_G)


def checkpoint_name(config: Config, step: int) -> str:
    """The name a step's weights are saved under (step 0: before training).

    The same training settings give the same names, so a rerun prints the same
    `Saved:` line; runs that would train differently never share a name.
    """
    return f"mathrl-seed{config.seed}-{run_fingerprint(config)}-step{step:04d}"


def run_fingerprint(config: Config) -> str:
    """8 hex digits that change with every setting that changes the weights."""
    settings = (
        config.base_model, config.lora_rank, config.batch, config.group, config.lr,
        config.max_tokens, config.temperature, config.seed, config.stop_at_newline,
        config.max_steps_off_policy,
    )  # fmt: skip
    return hashlib.blake2b(repr(settings).encode(), digest_size=4).hexdigest()


async def run_grpo_async(
    backend: Backend,
    adapter: Adapter[P],
    config: Config,
    on_step: Callable[[StepMetrics], None] | None = None,
) -> RunResult:
    """Run `config.steps` GRPO steps; return their metrics and the final path."""
    path = await (await backend.submit_save_for_sampler(checkpoint_name(config, 0)))
    sampler = await backend.create_sampler(path)
    off_policy = config.max_steps_off_policy > 0
    pending = asyncio.create_task(rollout(backend, sampler, adapter, config, 1))
    metrics: list[StepMetrics] = []
    try:
        for step in range(1, config.steps + 1):
            batch = await pending
            last = step == config.steps
            training: Awaitable[TrainResult] | None = None
            saving: Awaitable[str] | None = None
            if batch.datums_D:
                # Back to back: the save lands after the update, in one round trip.
                training = await backend.submit_train_step(batch.datums_D, config.lr)
                saving = await backend.submit_save_for_sampler(checkpoint_name(config, step))
            if off_policy and not last:
                # Sample the next step now, from the weights before this update.
                pending = asyncio.create_task(rollout(backend, sampler, adapter, config, step + 1))
            result = await training if training is not None else None
            if saving is not None:
                path = await saving
                if not last:
                    sampler = await backend.create_sampler(path)
            if not off_policy and not last:
                pending = asyncio.create_task(rollout(backend, sampler, adapter, config, step + 1))
            metrics.append(
                StepMetrics(
                    step=step,
                    accuracy=batch.accuracy,
                    datums=len(batch.datums_D),
                    groups=len(batch.rewards_P_G),
                    constant_groups=batch.constant_groups,
                    sampled_tokens=sum(len(c.tokens) for cs in batch.completions_P_G for c in cs),
                    loss=result.loss if result is not None else None,
                )
            )
            if on_step is not None:
                on_step(metrics[-1])
    finally:
        # A failure mid-run must not leave the next step's sampling running.
        pending.cancel()
    return RunResult(metrics, path)


def run_grpo(
    backend: Backend,
    adapter: Adapter[P],
    config: Config,
    on_step: Callable[[StepMetrics], None] | None = None,
) -> RunResult:
    """Synchronous entry point: `asyncio.run(run_grpo_async(...))`."""
    return asyncio.run(run_grpo_async(backend, adapter, config, on_step))
