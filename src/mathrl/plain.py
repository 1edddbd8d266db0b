"""GRPO in one file, top to bottom: `python -m mathrl.plain --backend fake`.

Read this first. It trains any one-turn task through the `Backend` protocol,
on the fake or on MinT, at `TrainConfig`'s defaults, and prints the seed
demo's lines. `run_grpo` (`mathrl.loop`) is held to it datum for datum
(tests/test_plain.py). The lines marked `# ALGO LOGIC` are the algorithm;
the rest is plumbing. What the full loop adds, and where:

- every step's sampling in flight while the last one trains, and the
  off-policy lag (`mathrl.loop`);
- episodes of several turns, environments and chat templates' turns
  (`mathrl.episodes`), group rewards (`mathrl.rewards`), rewards and
  environments in a pool of workers or processes (`mathrl.workers`);
- the other losses (`mathrl.losses`), scaled advantages, --fill-batch,
  the KL penalty, minibatches (`mathrl.grpo`, `mathrl.rollout`);
- held-out evaluation and pass@k (`mathrl.evaluation`, `mathrl.passk`),
  state saves, stopping and resuming (`mathrl.loop`), retries and
  deadlines (`mathrl.service`), the run folder and progress (`mathrl.cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
from collections.abc import Sequence
from typing import Any

from mathrl.backend import Backend, Datum
from mathrl.checkpoints import checkpoint_name
from mathrl.cli.loader import load_task
from mathrl.cli.train import model_line
from mathrl.config import Config, TrainConfig
from mathrl.grpo import build_datum, group_advantages, is_constant_group
from mathrl.resolved import Task
from mathrl.rewards import response_of, reward_total
from mathrl.rollout import prompt_tokens, request_seed, run_problems, sample_params


async def train(backend: Backend, task: Task[Any], config: TrainConfig) -> list[list[Datum]]:
    """Train `config.steps` steps of GRPO on `task`; return each step's datums."""
    if task.plays_episodes or task.rewards_groups:
        raise ValueError("the one-file GRPO plays one-turn tasks; run_grpo plays the rest")
    tokenizer, adapter = backend.tokenizer, task.adapter
    task.prepare(tokenizer, config.max_tokens or task.max_tokens)  # (a data task's rows, checked)
    # The base model's weights, saved for the first step's sampler.
    path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
    sampler = await backend.create_sampler(path)
    datums_by_step: list[list[Datum]] = []
    for step in range(1, config.steps + 1):
        # ALGO LOGIC: draw the step's problems (a private RNG seeded by seed and step).
        problems_P = adapter.build_dataset(config.seed, step, config.batch)
        prompts_P = [adapter.make_prompt(problem) for problem in problems_P]
        prompts_P_T = [prompt_tokens(tokenizer, task, prompt) for prompt in prompts_P]
        # ALGO LOGIC: sample a group of `group` completions per problem, every request at once.
        params_P = [
            sample_params(task, config, prompt, request_seed(config.seed, step, p))
            for p, prompt in enumerate(prompts_P)
        ]
        completions_P_G = await asyncio.gather(
            *(
                sampler.sample(prompt_T, config.group, params)
                for prompt_T, params in zip(prompts_P_T, params_P, strict=True)
            )
        )
        # ALGO LOGIC: reward each completion, as the task sees it (its text, how it ended).
        rewards_P_G = []
        for problem, params, completions_G in zip(
            problems_P, params_P, completions_P_G, strict=True
        ):
            responses_G = [
                response_of(tokenizer, c.tokens, params.stop, params.end_of_turn)
                for c in completions_G
            ]
            rewards_P_G.append(
                [total(adapter.compute_reward(response, problem)) for response in responses_G]
            )
        # ALGO LOGIC: group-relative advantages: each reward minus its group's mean.
        advantages_P_G = [group_advantages(rewards_G) for rewards_G in rewards_P_G]
        # ALGO LOGIC: a constant group teaches nothing; every other completion is a datum.
        datums_D = []
        for prompt_T, completions_G, rewards_G, advantages_G in zip(
            prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G, strict=True
        ):
            if is_constant_group(rewards_G):
                continue
            for completion, advantage in zip(completions_G, advantages_G, strict=True):
                datum = build_datum(prompt_T, completion.tokens, completion.logprobs, advantage)
                if datum is not None:  # (an empty completion has nothing to train)
                    datums_D.append(datum)
        datums_by_step.append(datums_D)
        # ALGO LOGIC: forward_backward + optim_step, and the save for the next step's
        # sampler, submitted back to back: one round trip.
        if datums_D:
            training = await backend.submit_train_step(datums_D, config.lr, config.loss_fn)
            saving = await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
            await training
            path = await saving
            sampler = await backend.create_sampler(path)
        rewards = [r for rewards_G in rewards_P_G for r in rewards_G]
        print(f"Step {step}: accuracy={adapter.evaluate(rewards):.1%}, datums={len(datums_D)}")
    print(f"Saved: {path}")
    return datums_by_step


def total(reward: object) -> float:
    """A reward's total: the number, or the sum of its named parts; it must be finite."""
    summed = reward_total(reward)
    if summed is None or not math.isfinite(summed[0]):
        raise ValueError(f"a reward must be a finite number or named finite parts: {reward!r}")
    return summed[0]


async def main(argv: Sequence[str] | None = None) -> None:
    """The command: a task (by name) on a backend, at TrainConfig's defaults but `--steps`."""
    parser = argparse.ArgumentParser(prog="python -m mathrl.plain", description=__doc__)
    parser.add_argument("--backend", choices=("fake", "mint"), default="fake")
    parser.add_argument("--adapter", default="addition", metavar="NAME")
    parser.add_argument("--steps", type=int, default=TrainConfig().steps, metavar="N")
    args = parser.parse_args(argv)
    settings = Config(train=TrainConfig(steps=args.steps), backend=args.backend)
    task = load_task(args.adapter)  # a built-in task's name, or module:Class
    backend: Backend
    if args.backend == "fake":
        from mathrl_fakes import FakeBackend  # (the fake is told the problems the run draws)

        backend = FakeBackend.for_run(task, run_problems(task, settings.train))
    else:
        from mathrl.service.mint_backend import Endpoint, open_backend

        if not os.environ.get("MINT_API_KEY"):
            raise SystemExit("MINT_API_KEY must be set to a MinT API key (got nothing)")
        endpoint = Endpoint(os.environ["MINT_API_KEY"], os.environ.get("MINT_BASE_URL", ""))
        backend = await open_backend(settings, endpoint)
    print(model_line(settings, backend.tokenizer.vocab_size))
    await train(backend, task, settings.train)


if __name__ == "__main__":
    asyncio.run(main())
