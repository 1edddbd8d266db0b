"""GRPO in one file, top to bottom: `python -m mathrl.plain --backend fake`.

Read this first. It trains any one-turn task through the `Backend` protocol,
on the fake or on MinT, and prints the seed demo's lines. The lines marked
`# ALGO LOGIC` are the algorithm; the rest is plumbing. It takes every
algorithm choice of `TrainConfig` (the loss, scaled advantages, --fill-batch,
the KL penalty, substeps, masking), each a pure function it calls, and
`run_grpo` (`mathrl.loop`) is held to it datum for datum, minibatch for
minibatch (tests/test_plain.py). What the full loop adds, and where:

- every step's sampling in flight while the last one trains, and the
  off-policy lag (`mathrl.loop`);
- episodes of several turns, environments and chat templates' turns
  (`mathrl.episodes`), tools (`mathrl.tools`), group rewards
  (`mathrl.rewards`), rewards and environments in a pool of workers or
  processes (`mathrl.workers`);
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

from mathrl.backend import Backend, Datum, Sampler
from mathrl.checkpoints import checkpoint_name
from mathrl.config import Config, TrainConfig
from mathrl.grpo import (
    anchored,
    build_datum,
    is_constant_group,
    kl_penalized,
    minibatches,
    step_advantages,
)
from mathrl.resolved import Task
from mathrl.rewards import response_of, reward_total
from mathrl.rollout import prompt_tokens, request_seed, run_problems, sample_params, step_problems


async def train(backend: Backend, task: Task[Any], config: TrainConfig) -> list[list[Datum]]:
    """Train `config.steps` steps of GRPO on `task`; return each step's datums."""
    if task.plays_episodes or task.rewards_groups:
        raise ValueError("the one-file GRPO plays one-turn tasks; run_grpo plays the rest")
    tokenizer, adapter = backend.tokenizer, task.adapter
    task.prepare(tokenizer, config.max_tokens or task.max_tokens)  # (a data task's rows, checked)
    # The base model's weights, saved for the first step's sampler (and the KL penalty's base).
    path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
    base = sampler = await backend.create_sampler(path)
    datums_by_step: list[list[Datum]] = []
    for step in range(1, config.steps + 1):
        # ALGO LOGIC: draw the step's problems (a private RNG seeded by seed and step): `batch`,
        # or with fill_batch (DAPO) more, in rounds, until `batch` groups' rewards differ.
        drawn_P = step_problems(task, config, step)
        prompts_P_T: list[list[int]] = []
        completions_P_G: list[Any] = []
        rewards_P_G: list[list[float]] = []
        ended_P_G: list[list[str]] = []
        informative = 0
        while round_P := drawn_P[len(prompts_P_T) : len(prompts_P_T) + config.batch - informative]:
            first = len(prompts_P_T)
            prompts = [adapter.make_prompt(problem) for problem in round_P]
            prompts_P_T += [prompt_tokens(tokenizer, task, prompt) for prompt in prompts]
            # ALGO LOGIC: sample a group of `group` completions per problem, every request at once.
            params_P = [
                sample_params(task, config, prompt, request_seed(config.seed, step, first + p))
                for p, prompt in enumerate(prompts)
            ]
            completions_P_G += await asyncio.gather(
                *(
                    sampler.sample(prompt_T, config.group, params)
                    for prompt_T, params in zip(prompts_P_T[first:], params_P, strict=True)
                )
            )
            # ALGO LOGIC: reward each completion, as the task sees it (its text, how it ended).
            for problem, params, completions_G in zip(
                round_P, params_P, completions_P_G[first:], strict=True
            ):
                responses_G = [
                    response_of(tokenizer, c.tokens, params.stop, params.end_of_turn)
                    for c in completions_G
                ]
                rewards_P_G.append([total(adapter.compute_reward(r, problem)) for r in responses_G])
                ended_P_G.append([r.ended for r in responses_G])
            informative = sum(not is_constant_group(rewards_G) for rewards_G in rewards_P_G)
            if not config.fill_batch:
                break
        # ALGO LOGIC: group-relative advantages: each reward minus its group's mean (divided by
        # a standard deviation with scale_rewards "group" or "batch").
        advantages_P_G = step_advantages(rewards_P_G, config.scale_rewards)
        # ALGO LOGIC: a constant group teaches nothing (unless a KL penalty shapes it); every
        # other completion is a datum (less, if asked, those cut off at the token limit).
        masking = task.mask_truncated or config.mask_truncated
        datums_D = []
        for prompt_T, completions_G, rewards_G, advantages_G, ended_G in zip(
            prompts_P_T, completions_P_G, rewards_P_G, advantages_P_G, ended_P_G, strict=True
        ):
            if is_constant_group(rewards_G) and not config.kl_coef:
                continue
            for c, advantage, ended in zip(completions_G, advantages_G, ended_G, strict=True):
                datum = build_datum(prompt_T, c.tokens, c.logprobs, advantage)
                if datum is not None and not (masking and ended == "length"):
                    datums_D.append(datum)  # (an empty completion has nothing to train)
        trained = len(datums_D)
        # ALGO LOGIC: with kl_coef, each model token's advantage moves by the KL penalty
        # against the base model; with DRO, the prompt's `q` becomes the policy's own logprob.
        if datums_D and config.kl_coef:
            datums_D, _ = kl_penalized(datums_D, await logprobs(base, datums_D), config.kl_coef)
        if datums_D and config.loss_fn.every_position:
            datums_D = anchored(datums_D, await logprobs(sampler, datums_D))
        datums_by_step.append(datums_D)
        # ALGO LOGIC: forward_backward + optim_step per minibatch, and the save for the next
        # step's sampler, submitted back to back: one round trip.
        if datums_D:
            training = [
                await backend.submit_train_step(minibatch, config.lr, config.loss_fn)
                for minibatch in minibatches(datums_D, config.substeps)
            ]
            saving = await backend.submit_save_for_sampler(checkpoint_name(task, config, step))
            for minibatch_result in training:
                await minibatch_result
            path = await saving
            sampler = await backend.create_sampler(path)
        rewards = [r for rewards_G in rewards_P_G for r in rewards_G]
        print(f"Step {step}: accuracy={adapter.evaluate(rewards):.1%}, datums={trained}")
    print(f"Saved: {path}")
    return datums_by_step


def total(reward: object) -> float:
    """A reward's total: the number, or the sum of its named parts; it must be finite."""
    summed = reward_total(reward)
    if summed is None or not math.isfinite(summed[0]):
        raise ValueError(f"a reward must be a finite number or named finite parts: {reward!r}")
    return summed[0]


async def logprobs(sampler: Sampler, datums_D: Sequence[Datum]) -> list[list[float]]:
    """`sampler`'s logprob of each datum's target tokens, every request at once."""
    return await asyncio.gather(
        *(sampler.logprobs([*d.model_input, d.target_tokens[-1]]) for d in datums_D)
    )


async def main(argv: Sequence[str] | None = None) -> None:
    """The command: a task (by name) on a backend, at TrainConfig's defaults but `--steps`."""
    from mathrl.cli.loader import load_task  # (the command line resolves task names)
    from mathrl.cli.train import model_line

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
