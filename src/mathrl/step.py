"""The GRPO step: `grpo_step` is the algorithm, and its two halves are the code that runs.

    grpo_step = sample_and_score, then train_and_save

- `sample_and_score`: the step's problems, a group of episodes per problem
  (every sample request in flight at once, the task's rewards beside them),
  each episode's advantage, and a datum per episode trained on.
- `train_and_save`: the KL penalty against the base model (with `kl_coef`),
  DRO's anchor off the model's tokens (with the dro loss), forward_backward +
  optim_step per minibatch, and the save for the next step's sampler,
  submitted back to back and returned unawaited, so a caller can overlap
  them with other work.

`mathrl.loop.run_grpo` calls these same two halves, pipelined, and adds the
off-policy lag, evaluation, the save cadence, stopping and resuming around
them; nothing else composes a step. The pieces each half uses are small
functions of `mathrl.rollout` (sampling and datums), `mathrl.episodes`
(playing a group), `mathrl.rewards` (the task's reward) and `mathrl.grpo`
(the arithmetic).

Shape suffixes: _P a problem, _G a member of its group, _T a token, _D a
datum (the legend is `mathrl.rollout`'s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mathrl.backend import Backend, Datum, Sampler, Tokenizer, TrainResult
from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.episodes import Player
from mathrl.grpo import anchored, is_constant_group, kl_penalized, minibatches, step_advantages
from mathrl.resolved import Task
from mathrl.rollout import Rollout, datums_of, play_step, trained
from mathrl.workers import Workers, borrowed

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What `grpo_step` did: the datums it trained on, what training said, the new weights."""

    rewards_P_G: list[list[float]]
    datums_D: list[Datum]
    result: TrainResult | None
    """None when nothing was trained (without a KL penalty, every group was constant)."""
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
    """One on-policy GRPO step from `sampler`'s weights, the ones `backend` trains. This
    function is the algorithm.

    `workers` runs the task's rewards and environment (a pool of one per core by default).
    `base` samples the base model's weights (the step-0 sampler): needed with kl_coef > 0.
    """
    if config.kl_coef and base is None:
        raise ValueError("kl_coef > 0 needs the base model's sampler (base=)")
    batch = await sample_and_score(backend.tokenizer, sampler, task, config, step, workers)
    update = await train_and_save(backend, task, config, step, batch.datums_D, base, sampler)
    result = await update.training if update.training is not None else None
    saved = await update.saving if update.saving is not None else None
    return StepOutcome(batch.rewards_P_G, update.datums_D, result, saved)


async def sample_and_score(
    tokenizer: Tokenizer,
    sampler: Sampler,
    task: Task[P],
    config: TrainConfig,
    step: int,
    workers: Workers | None = None,
    on_sampled: Callable[[int], None] | None = None,
) -> Rollout:
    """The first half of step `step`: its episodes sampled from `sampler`, scored, and
    turned into datums. `on_sampled(n)` hears of each group's first turns as they arrive."""
    # 1. This step's problems and their prompts (text, or a conversation the chat template
    #    renders), and a group of `config.group` episodes per problem, every request in flight
    #    at once. As each turn comes back, its reward (seeing how it ended) and, for a task
    #    with an environment, the reply and the next turn follow. With `fill_batch`, more
    #    problems in rounds until `batch` groups' rewards differ.
    with borrowed(workers) as pool:
        player = Player(tokenizer, sampler, task, pool, on_sampled)
        prompts_P, prompts_P_T, episodes_P_G = await play_step(player, config, step)
    # 2. Each episode's advantage: its reward minus its group's mean (divided by a standard
    #    deviation with scale_rewards "group" or "batch").
    rewards_P_G = [[e.reward for e in episodes_G] for episodes_G in episodes_P_G]
    advantages_P_G = step_advantages(rewards_P_G, config.scale_rewards)
    # 3. A datum per episode trained on, its mask on the model's tokens: the episodes of groups
    #    whose rewards differ (with kl_coef > 0, of every group), less, if asked, those whose
    #    last turn was cut off at the token limit.
    trained_P_G = trained(task, config, rewards_P_G, [[e.final for e in g] for g in episodes_P_G])
    datums_D = datums_of(prompts_P_T, episodes_P_G, advantages_P_G, trained_P_G)
    return Rollout(
        prompts_P,
        episodes_P_G,
        rewards_P_G,
        advantages_P_G,
        trained_P_G,
        datums_D,
        accuracy=task.adapter.evaluate([r for rewards_G in rewards_P_G for r in rewards_G]),
        constant_groups=sum(map(is_constant_group, rewards_P_G)),
    )


@dataclass(frozen=True, slots=True)
class Update:
    """What `train_and_save` submitted, not yet awaited (None: nothing to train on)."""

    datums_D: list[Datum]
    """The datums trained on: the step's, with the KL penalty folded in (with kl_coef > 0)."""
    training: Awaitable[TrainResult] | None
    saving: Awaitable[str] | None
    """The path of the weights saved for the next sampler."""
    kl: float | None
    """The mean KL against the base model of the datums (with kl_coef > 0)."""
    submitted: float
    """The event loop's clock when the training calls were submitted."""


async def train_and_save(
    backend: Backend,
    task: Task[P],
    config: TrainConfig,
    step: int,
    datums_D: Sequence[Datum],
    base: Sampler | None = None,
    policy: Sampler | None = None,
) -> Update:
    """The second half of step `step`: train on `datums_D` and save the weights for the
    next sampler, every call submitted back to back; the caller awaits them together.

    `base` samples the base model (with kl_coef > 0), `policy` the weights being trained
    (with a loss that acts on every position, DRO).
    """
    if config.loss_fn.every_position and policy is None:
        raise ValueError(f"the {config.loss_fn.name} loss needs the trained weights' sampler")
    clock = asyncio.get_running_loop().time
    if not datums_D:
        return Update([], None, None, None, clock())
    # 4. The logprobs of the sampled tokens the step needs besides the sampler's, in one round
    #    trip: the base model's with kl_coef > 0, the trained weights' own with DRO.
    base_D, policy_D = await asyncio.gather(
        logprobs_of(base if config.kl_coef else None, datums_D),
        logprobs_of(policy if config.loss_fn.every_position else None, datums_D),
    )
    # 5. With kl_coef > 0, each of the model's tokens' advantage moves by the KL penalty
    #    against the base model.
    kl = None
    if base_D is not None:
        datums_D, kl = kl_penalized(datums_D, base_D, config.kl_coef)
    # 6. DRO's penalty acts on every position: off the mask, q becomes the trained policy's
    #    own logprob, so the prompt's and environment's tokens stay as they are.
    if policy_D is not None:
        datums_D = anchored(datums_D, policy_D)
    # 7. forward_backward (with the configured loss) + optim_step, once per minibatch, then
    # 8. the save of the new weights for the next step's sampler: one round trip for all.
    submitted = clock()
    training = await submit_update(backend, datums_D, config)
    saving = await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
    return Update(list(datums_D), training, saving, kl, submitted)


async def submit_update(
    backend: Backend, datums_D: Sequence[Datum], config: TrainConfig
) -> Awaitable[TrainResult]:
    """Submit forward_backward + optim_step with `config.loss_fn` for each of
    `config.substeps` minibatches, back to back; one awaitable of their combined result."""
    minibatches_M = minibatches(datums_D, config.substeps)
    submitted = [
        await backend.submit_train_step(minibatch, config.lr, config.loss_fn)
        for minibatch in minibatches_M
    ]
    if len(submitted) == 1:
        return submitted[0]

    async def all_of() -> TrainResult:
        # Every minibatch's outcome is awaited, so a failure of one leaves none unobserved.
        outcomes = await asyncio.gather(*submitted, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        results = [o for o in outcomes if isinstance(o, TrainResult)]
        return combined(results, [sum(d.model_tokens for d in m) for m in minibatches_M])

    return asyncio.ensure_future(all_of())


async def logprobs_of(
    sampler: Sampler | None, datums_D: Sequence[Datum]
) -> list[list[float]] | None:
    """`sampler`'s logprob of each datum's target tokens, at temperature 1 (None without a
    sampler): one round trip."""
    if sampler is None:
        return None
    return await asyncio.gather(
        *(sampler.logprobs([*d.model_input, d.target_tokens[-1]]) for d in datums_D)
    )


def combined(results: Sequence[TrainResult], model_tokens_M: Sequence[int]) -> TrainResult:
    """Several minibatches' results as one: losses (and `loss:sum`) add up; `clipped:frac`,
    a share of a minibatch's model tokens (`model_tokens_M`), is their share of all of them;
    other metrics are averaged over the minibatches that report them; the learner's logprobs
    follow one another, minibatch by minibatch (None unless every one has them)."""
    metrics: dict[str, float] = {}
    for key in {key for result in results for key in result.metrics}:
        pairs = [
            (result.metrics[key], tokens)
            for result, tokens in zip(results, model_tokens_M, strict=True)
            if key in result.metrics
        ]
        tokens = sum(t for _, t in pairs)
        if key == "loss:sum":
            metrics[key] = sum(v for v, _ in pairs)
        elif key == "clipped:frac" and tokens > 0:
            metrics[key] = sum(v * t for v, t in pairs) / tokens
        else:
            metrics[key] = sum(v for v, _ in pairs) / len(pairs)
    learner_M = [result.learner_logprobs_D for result in results]
    learner_D = None
    if all(learner is not None for learner in learner_M):
        learner_D = tuple(lp_T for learner in learner_M for lp_T in learner or ())
    return TrainResult(sum(result.loss for result in results), metrics, learner_D)
