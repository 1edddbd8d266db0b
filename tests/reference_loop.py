"""A naive GRPO loop for differential tests: not the spec, and not the code that runs.

The spec is `mathrl.step.grpo_step`, and `mathrl.loop.run_grpo` runs its two
halves. This file restates the algorithm a second time on purpose, written
as plainly as the seed writes it and apart from mathrl's own pieces (it calls
`group_advantages` and `build_datum`, never `sample_and_score` or `datums_of`):
every call awaited in turn, nothing overlapped, pipelined or cached, nothing
resumed, evaluated or retried. On the same fake backend and seed, `grpo_step`
and `run_grpo` must train on exactly its datums, step by step
(tests/test_loop.py), so a slip in any of those pieces shows as a difference.
"""

from __future__ import annotations

import math
from typing import Any

from mathrl.adapter import Adapter, Response
from mathrl.backend import Backend, Datum, Sampler
from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.grpo import build_datum, group_advantages
from mathrl.resolved import as_task
from mathrl.rollout import request_seed, sample_params, step_problems


async def reference_run(
    backend: Backend, adapter: Adapter[Any], config: TrainConfig
) -> list[list[Datum]]:
    """Train `config.steps` steps serially; return each step's datums (empty: nothing trained).

    The algorithm choices, written as plainly: `fill_batch` goes on through the step's
    problems one at a time until `batch` groups have unequal rewards; `scale_rewards`
    "group" divides by the group's sample std (plus 1e-4); the loss goes to the backend;
    `substeps` trains on consecutive slices of the datums; with `kl_coef`, every group is
    trained on, constant ones too, and each of the model's tokens (known here by where the
    completion starts) gains `kl_coef` times the step's mean of `q - b` minus its own,
    against the base model's logprobs `b` (the step-0 weights); with DRO, the prompt's
    positions get the current weights' own logprobs as their `q`.
    """
    assert config.scale_rewards in ("none", "group"), "the reference scales group by group"
    task = as_task(adapter)
    tok = backend.tokenizer
    datums_by_step: list[list[Datum]] = []
    path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
    base = await backend.create_sampler(path)
    for step in range(1, config.steps + 1):
        sampler = await backend.create_sampler(path)
        datums: list[Datum] = []
        completion_starts: list[int] = []
        informative = 0
        for i, problem in enumerate(step_problems(task, config, step)):
            if informative == config.batch:
                break
            text = adapter.make_prompt(problem)
            assert isinstance(text, str), "the reference loop runs text prompts"
            prompt = tok.encode(text)
            params = sample_params(task, config, text, request_seed(config.seed, step, i))
            completions = await sampler.sample(prompt, config.group, params)
            rewards = [
                float(adapter.compute_reward(Response(tok.decode(c.tokens)), problem))  # type: ignore[arg-type]
                for c in completions
            ]
            constant = all(r == rewards[0] for r in rewards)  # every advantage is 0
            if constant and not config.kl_coef:
                continue  # nothing to teach
            informative += not constant
            advantages = group_advantages(rewards)
            if config.scale_rewards == "group":
                mean = sum(rewards) / len(rewards)
                std = (sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) ** 0.5
                advantages = [a / (std + 1e-4) for a in advantages]
            for c, advantage in zip(completions, advantages, strict=True):
                datum = build_datum(prompt, c.tokens, c.logprobs, advantage)
                if datum is not None:
                    datums.append(datum)
                    completion_starts.append(len(prompt) - 1)
        if datums and config.kl_coef:
            datums = await kl_shaped(base, datums, completion_starts, config.kl_coef)
        if datums and config.loss_fn.name == "dro":
            datums = await prompt_at_policy(sampler, datums, completion_starts)
        datums_by_step.append(datums)
        if datums:
            k = min(config.substeps, len(datums))
            for j in range(k):  # slices of near-equal size, the longer ones first
                start = j * (len(datums) // k) + min(j, len(datums) % k)
                end = start + len(datums) // k + (j < len(datums) % k)
                await (
                    await backend.submit_train_step(datums[start:end], config.lr, config.loss_fn)
                )
            path = await (
                await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
            )
    return datums_by_step


async def kl_shaped(
    base: Sampler, datums: list[Datum], completion_starts: list[int], coef: float
) -> list[Datum]:
    """The datums with the KL penalty against `base` in their completions' advantages."""
    diffs = []
    for datum, start in zip(datums, completion_starts, strict=True):
        b = await base.logprobs([*datum.model_input, datum.target_tokens[-1]])
        diffs.append([q - b_i for q, b_i in zip(datum.logprobs[start:], b[start:], strict=True)])
    every = [d for diffs_T in diffs for d in diffs_T]
    mean = math.fsum(every) / len(every)  # the exact sum, as mathrl.grpo takes it
    return [
        Datum(
            datum.model_input,
            datum.target_tokens,
            datum.logprobs,
            datum.advantages[:start]
            + tuple(
                a + coef * (mean - d)
                for a, d in zip(datum.advantages[start:], diffs_T, strict=True)
            ),
            datum.mask,
        )
        for datum, start, diffs_T in zip(datums, completion_starts, diffs, strict=True)
    ]


async def prompt_at_policy(
    policy: Sampler, datums: list[Datum], completion_starts: list[int]
) -> list[Datum]:
    """The datums with the prompt's `q` set to `policy`'s own logprobs there."""
    out = []
    for datum, start in zip(datums, completion_starts, strict=True):
        own = await policy.logprobs([*datum.model_input, datum.target_tokens[-1]])
        logprobs = (*own[:start], *datum.logprobs[start:])
        out.append(Datum(datum.model_input, datum.target_tokens, logprobs, datum.advantages,
                         datum.mask))  # fmt: skip
    return out
