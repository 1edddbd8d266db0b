"""The reference GRPO loop: the algorithm as the seed writes it, every call awaited in turn.

Nothing is overlapped, pipelined or cached here; nothing resumes, evaluates or
retries. It is the yardstick the tests hold `mathrl.loop.grpo_step` and
`mathrl.loop.run_grpo` to: on the same fake backend and seed, both must train
on exactly its datums, step by step.
"""

from __future__ import annotations

from typing import Any

from mathrl.adapter import Adapter, Response
from mathrl.backend import Backend
from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.grpo import Datum, build_datum, group_advantages
from mathrl.resolved import as_task
from mathrl.rollout import request_seed, sample_params, step_problems


async def reference_run(
    backend: Backend, adapter: Adapter[Any], config: TrainConfig
) -> list[list[Datum]]:
    """Train `config.steps` steps serially; return each step's datums (empty: nothing trained).

    The algorithm choices, written as plainly: `fill_batch` goes on through the step's
    problems one at a time until `batch` groups have unequal rewards; `scale_rewards`
    "group" divides by the group's sample std (plus 1e-4); the loss goes to the backend;
    `substeps` trains on consecutive slices of the datums.
    """
    assert config.scale_rewards in ("none", "group"), "the reference scales group by group"
    task = as_task(adapter)
    tok = backend.tokenizer
    datums_by_step: list[list[Datum]] = []
    path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
    for step in range(1, config.steps + 1):
        sampler = await backend.create_sampler(path)
        datums: list[Datum] = []
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
            if all(r == rewards[0] for r in rewards):
                continue  # a constant group: every advantage is 0
            informative += 1
            advantages = group_advantages(rewards)
            if config.scale_rewards == "group":
                mean = sum(rewards) / len(rewards)
                std = (sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) ** 0.5
                advantages = [a / (std + 1e-4) for a in advantages]
            for c, advantage in zip(completions, advantages, strict=True):
                datum = build_datum(prompt, c.tokens, c.logprobs, advantage)
                if datum is not None:
                    datums.append(datum)
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
