"""The GRPO step: `grpo_step` is the algorithm, one on-policy step, top to bottom.

problems -> prompts -> a group of episodes per problem -> rewards ->
advantages -> datums -> train -> save. Every piece is a small function of
`mathrl.rollout` and `mathrl.grpo`; this module only puts them in order.
`mathrl.loop.run_grpo` runs the very same step, pipelined, and adds the
off-policy lag, evaluation, the save cadence, stopping and resuming around
it; the tests hold both to the serial reference loop in
`tests/reference_loop.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mathrl.backend import Backend, Sampler, TrainResult
from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.episodes import Player
from mathrl.grpo import Datum, kl_penalized, minibatches, step_advantages
from mathrl.resolved import Task
from mathrl.rollout import datums_of, play_step, trained
from mathrl.workers import Workers, borrowed

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What `grpo_step` did: the datums it trained on, what training said, the new weights."""

    rewards_P_G: list[list[float]]
    datums_D: list[Datum]
    result: TrainResult | None
    """None when every group was constant: nothing was trained."""
    sampler_path: str | None
    """The saved weights after the update (None when nothing was trained)."""


async def grpo_step(
    backend: Backend,
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    step: int,
    workers: Workers | None = None,
    base: Sampler | None = None,
) -> StepOutcome:
    """One on-policy GRPO step from `sampler`'s weights. This function is the algorithm.

    Shape suffixes: _P a problem, _G a member of its group, _T a token, _D a datum.
    `workers` runs the task's rewards and environment (a pool of one per core by default).
    `base` samples the base model's weights (the step-0 sampler): needed with kl_coef > 0.
    """
    if config.kl_coef and base is None:
        raise ValueError("kl_coef > 0 needs the base model's sampler (base=)")
    tokenizer = backend.tokenizer
    # 1. This step's problems, and their prompts: text, or a conversation the chat
    #    template renders. 2. A group of `config.group` episodes per problem, every request
    #    in flight at once. A group's first turns come from one request; as each turn comes
    #    back, its reward (seeing how it ended) and, for a task with an environment, the
    #    reply and the next turn follow. With `fill_batch`, more problems in rounds until
    #    `batch` groups' rewards differ (`play_step`).
    with borrowed(workers) as pool:
        player = Player(tokenizer, sampler, task, pool)
        _, prompts_P_T, episodes_P_G = await play_step(player, tokenizer, config, step)
    # 3. Each episode's advantage: its reward minus its group's mean (divided by a standard
    #    deviation with --scale-rewards group or batch).
    rewards_P_G = [[e.reward for e in episodes_G] for episodes_G in episodes_P_G]
    advantages_P_G = step_advantages(rewards_P_G, config.scale_rewards)
    # 4. A datum per episode (prompt and environment tokens weigh 0), dropping groups of equal
    #    rewards (and, if asked, episodes whose last turn was cut off at the token limit).
    trained_P_G = trained(task, config, [[e.final for e in g] for g in episodes_P_G])
    datums_D = datums_of(prompts_P_T, episodes_P_G, rewards_P_G, advantages_P_G, trained_P_G)
    if not datums_D:
        return StepOutcome(rewards_P_G, datums_D, None, None)
    # 5. With kl_coef > 0, each of the model's tokens' advantage moves by the KL penalty against
    #    the base model (whose logprobs of the sampled tokens cost one round trip).
    if base is not None and config.kl_coef:
        datums_D, _ = await kl_penalty(base, datums_D, config.kl_coef)
    # 6. forward_backward (with the configured loss) + optim_step, once per minibatch, then
    #    save the new weights for the next step's sampler: submitted back to back, awaited
    #    together.
    training = await submit_update(backend, datums_D, config)
    saving = await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
    return StepOutcome(rewards_P_G, datums_D, await training, await saving)


async def kl_penalty(
    base: Sampler, datums_D: Sequence[Datum], coef: float
) -> tuple[list[Datum], float]:
    """`datums_D` with the KL penalty against `base` (`mathrl.grpo.kl_penalized`), and the
    mean KL; every datum's base logprobs asked at once, so one round trip."""
    base_D = await asyncio.gather(
        *(base.logprobs([*d.model_input, d.target_tokens[-1]]) for d in datums_D)
    )
    return kl_penalized(datums_D, base_D, coef)


async def submit_update(
    backend: Backend, datums_D: Sequence[Datum], config: TrainConfig
) -> Awaitable[TrainResult]:
    """Submit forward_backward + optim_step with `config.loss_fn` for each of
    `config.substeps` minibatches, back to back; one awaitable of their combined result."""
    submitted = [
        await backend.submit_train_step(minibatch, config.lr, config.loss_fn)
        for minibatch in minibatches(datums_D, config.substeps)
    ]
    if len(submitted) == 1:
        return submitted[0]

    async def all_of() -> TrainResult:
        # Every minibatch's outcome is awaited, so a failure of one leaves none unobserved.
        outcomes = await asyncio.gather(*submitted, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return combined([o for o in outcomes if isinstance(o, TrainResult)])

    return asyncio.ensure_future(all_of())


def combined(results: Sequence[TrainResult]) -> TrainResult:
    """Several minibatches' results as one: losses (and `loss:sum`) add up, other metrics
    are averaged over the minibatches that report them."""
    metrics: dict[str, float] = {}
    for key in {key for result in results for key in result.metrics}:
        values = [result.metrics[key] for result in results if key in result.metrics]
        metrics[key] = sum(values) if key == "loss:sum" else sum(values) / len(values)
    return TrainResult(loss=sum(result.loss for result in results), metrics=metrics)
