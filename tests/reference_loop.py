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
from mathrl.rollout import request_seed, sample_params


async def reference_run(
    backend: Backend, adapter: Adapter[Any], config: TrainConfig
) -> list[list[Datum]]:
    """Train `config.steps` steps serially; return each step's datums (empty: nothing trained)."""
    task = as_task(adapter)
    tok = backend.tokenizer
    datums_by_step: list[list[Datum]] = []
    path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
    for step in range(1, config.steps + 1):
        sampler = await backend.create_sampler(path)
        datums: list[Datum] = []
        for i, problem in enumerate(adapter.build_dataset(config.seed, step, config.batch)):
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
            for c, advantage in zip(completions, group_advantages(rewards), strict=True):
                datum = build_datum(prompt, c.tokens, c.logprobs, advantage)
                if datum is not None:
                    datums.append(datum)
        datums_by_step.append(datums)
        if datums:
            await (await backend.submit_train_step(datums, config.lr))
            path = await (
                await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
            )
    return datums_by_step
