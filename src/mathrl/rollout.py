"""Sampling and scoring: the pieces of a step before training.

Shape suffixes name the axes of nested data:
    _P  a problem in the step's batch
    _G  a member of a problem's group of samples
    _T  a token
    _D  a datum (one per episode trained on: `trained`)
so `rewards_P_G[p][g]` is the reward of episode g of problem p. An episode
is one completion for a one-turn task (`mathrl.episodes`).

`trained` and `datums_of` are pure; `play_groups` and `play_step` keep
every request of a step in flight at once on one sampler, with the task's
work in a worker pool beside them. `mathrl.step.sample_and_score` puts them
in order; `step_metrics` and `logged_groups` say what a step did.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from mathrl.adapter import Adapter, Prompt, Response
from mathrl.backend import Datum, SampleParams, Tokenizer, TrainResult
from mathrl.config import FILL_BATCH_CAP, TrainConfig
from mathrl.episodes import Episode, Player, all_or_none
from mathrl.grpo import approx_kl, is_constant_group, sampler_entropy
from mathrl.problem_keys import problem_key
from mathrl.report import Sample, SampleGroup, StepMetrics
from mathrl.resolved import Task, as_task
from mathrl.rewards import BrokenContract, TaskError

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Rollout:
    """One step's episodes, scored and turned into datums (`mathrl.step.sample_and_score`)."""

    prompts_P: list[Prompt]
    episodes_P_G: list[list[Episode]]
    rewards_P_G: list[list[float]]
    advantages_P_G: list[list[float]]
    trained_P_G: list[list[bool]]
    datums_D: list[Datum]
    accuracy: float
    constant_groups: int
    sampler_path: str = ""
    seconds: float = 0.0

    @property
    def responses_P_G(self) -> list[list[Response]]:
        """Each episode's last response: what its end reward scored."""
        return [[e.final for e in episodes_G] for episodes_G in self.episodes_P_G]


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


def trained(
    task: Task[P],
    config: TrainConfig,
    rewards_P_G: Sequence[Sequence[float]],
    responses_P_G: Sequence[Sequence[Response]],
) -> list[list[bool]]:
    """Which episodes are trained on: those of groups whose rewards differ, or with a KL
    penalty (kl_coef > 0) every group's, since the penalty alone gives a constant group's
    tokens an advantage; less, when masking, those whose last turn hit the token limit."""
    mask = task.mask_truncated or config.mask_truncated
    teaches_P = [config.kl_coef > 0 or not is_constant_group(r_G) for r_G in rewards_P_G]
    return [
        [teaches and not (mask and r.ended == "length") for r in responses_G]
        for teaches, responses_G in zip(teaches_P, responses_P_G, strict=True)
    ]


def datums_of(
    prompts_P_T: Sequence[Sequence[int]],
    episodes_P_G: Sequence[Sequence[Episode]],
    advantages_P_G: Sequence[Sequence[float]],
    trained_P_G: Sequence[Sequence[bool]],
) -> list[Datum]:
    """A datum per episode trained on (`trained`) in which the model wrote something."""
    datums_D: list[Datum] = []
    for prompt_T, episodes_G, advantages_G, trained_G in zip(
        prompts_P_T, episodes_P_G, advantages_P_G, trained_P_G, strict=True
    ):
        for episode, advantage, kept in zip(episodes_G, advantages_G, trained_G, strict=True):
            if kept and (datum := episode.datum(prompt_T, advantage)) is not None:
                datums_D.append(datum)
    return datums_D


async def play_groups(
    player: Player[P],
    config: TrainConfig,
    step: int,
    problems_P: Sequence[P],
    prompts_P: Sequence[Prompt],
    prompts_P_T: Sequence[Sequence[int]],
    *,
    size: int | None = None,
    greedy: bool = False,
    first: int = 0,
) -> list[list[Episode]]:
    """A group of `size` (`config.group`) episodes per problem of step `step`, all at once.

    Each problem's first request has its own seed (`request_seed`, by its index in the
    step: `first` is the first one's), and each later turn its own (`turn_seed`), so a
    retried or resumed request draws the same samples.
    """
    task = player.task
    return await all_or_none(
        [
            player.group(
                problem, prompt, prompt_T, size or config.group,
                sample_params(task, config, prompt, request_seed(config.seed, step, first + p),
                              greedy=greedy),
            )
            for p, (problem, prompt, prompt_T) in enumerate(
                zip(problems_P, prompts_P, prompts_P_T, strict=True)
            )
        ]
    )  # fmt: skip


def drawn_per_step(config: TrainConfig) -> int:
    """How many problems a step draws: `batch`, or with `fill_batch` FILL_BATCH_CAP x `batch`
    (of which it takes only as many as it needs)."""
    return config.batch * (FILL_BATCH_CAP if config.fill_batch else 1)


def step_problems(task: Task[P], config: TrainConfig, step: int) -> list[P]:
    """The problems step `step` may draw, in order (`drawn_per_step` of them)."""
    return task.adapter.build_dataset(config.seed, step, drawn_per_step(config))


@dataclass(frozen=True, slots=True)
class RunProblems(Generic[P]):
    """The problems a run of `config` draws: its held-out set, and each training step's.

    For a backend that must be told them, such as `mathrl_fakes.FakeBackend.for_run`,
    which learns their references: the loop draws them itself, through the task's
    `build_dataset` and `heldout_dataset`, and this says exactly what it will draw.
    """

    task: Task[P]
    config: TrainConfig
    first_step: int = 1
    """The first step the run trains (k + 1 for a run resumed after step k)."""

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def last_step(self) -> int:
        return self.config.steps

    @property
    def batch(self) -> int:
        """The problems a step draws at least, each one sample request at least."""
        return self.config.batch

    def heldout(self) -> list[P]:
        """The held-out problems evaluation may ask (before training leaves any out)."""
        return self.task.heldout(self.config.seed, self.config.eval_problems)

    def step(self, step: int) -> list[P]:
        """The problems training step `step` may draw (`step_problems`); TaskError naming
        `build_dataset` if two draws differ: the run would draw other problems again."""
        problems = step_problems(self.task, self.config, step)
        again = step_problems(self.task, self.config, step)
        adapter = self.task.adapter
        if [problem_key(adapter, p) for p in problems] != [problem_key(adapter, p) for p in again]:
            problem = BrokenContract(
                "two calls gave different problems: it is not deterministic (draw from a "
                "random.Random seeded by (seed, step), never from the global random module)"
            )
            given = f"seed={self.config.seed}, step={step}"
            raise TaskError(self.task, "build_dataset", problem, given)
        return problems


def run_problems(
    adapter: Adapter[P] | Task[P], config: TrainConfig, first_step: int = 1
) -> RunProblems[P]:
    """The problems a run of `config` draws, from step `first_step` on (`RunProblems`)."""
    return RunProblems(as_task(adapter), config, first_step)


async def play_step(
    player: Player[P], config: TrainConfig, step: int
) -> tuple[list[Prompt], list[list[int]], list[list[Episode]]]:
    """Step `step`'s prompts, their tokens and a group of episodes for each.

    `batch` problems; with `fill_batch` (DAPO's dynamic sampling), more in rounds, each
    of as many new problems as groups are missing, until `batch` groups have rewards that
    are not all equal, or the step's FILL_BATCH_CAP x `batch` problems are spent.
    """
    task = player.task
    pool = step_problems(task, config, step)
    prompts_P: list[Prompt] = []
    prompts_P_T: list[list[int]] = []
    episodes_P_G: list[list[Episode]] = []
    informative = 0
    while round_P := pool[len(prompts_P) : len(prompts_P) + config.batch - informative]:
        prompts = [task.adapter.make_prompt(problem) for problem in round_P]
        tokens = [prompt_tokens(player.tokenizer, task, prompt) for prompt in prompts]
        first = len(prompts_P)
        episodes = await play_groups(player, config, step, round_P, prompts, tokens, first=first)
        prompts_P += prompts
        prompts_P_T += tokens
        episodes_P_G += episodes
        informative += sum(not is_constant_group([e.reward for e in g]) for g in episodes)
        if not config.fill_batch:
            break
    return prompts_P, prompts_P_T, episodes_P_G


def logged_groups(step: int, batch: Rollout) -> list[SampleGroup]:
    """The step's groups as the run reports them: each completion, its reward and advantage."""
    groups = []
    for p, prompt in enumerate(batch.prompts_P):
        samples = tuple(
            Sample(
                str(e.final), e.final.ended, e.final.stop, e.reward, e.parts, advantage, kept,
                tuple((str(t.response), t.reply or "") for t in e.turns[:-1]), e.metrics,
                tuple(t.calls for t in e.turns[:-1]),
            )
            for e, advantage, kept in zip(
                batch.episodes_P_G[p], batch.advantages_P_G[p], batch.trained_P_G[p], strict=True
            )
        )  # fmt: skip
        groups.append(SampleGroup(step, p, prompt, samples))
    return groups


def part_means(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each reward part's mean over the completions (a completion without it counts 0)."""
    names = sorted({name for p in parts for name in p})
    return {name: math.fsum(p.get(name, 0.0) for p in parts) / len(parts) for name in names}


def metric_means(metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric's mean over the completions that report it.

    Unlike a reward part, a metric a completion leaves out is not a 0: it was
    not measured (the turn a game was won on, for a game not won).
    """
    reported: dict[str, list[float]] = {}
    for named in metrics:
        for name, value in named.items():
            reported.setdefault(name, []).append(value)
    return {name: _mean(values) for name, values in sorted(reported.items())}


def _mean(values: Sequence[float]) -> float:
    """The mean of finite `values`, finite and between their least and greatest, however
    large they are."""
    n = len(values)
    try:
        mean = math.fsum(values) / n
    except OverflowError:  # finite values whose sum is not: halve them before adding up
        mean = math.fsum(v / (2 * n) for v in values) * 2
    return min(max(mean, min(values)), max(values))


def step_metrics(
    config: TrainConfig,
    step: int,
    batch: Rollout,
    result: TrainResult | None,
    training: float,
    kl: float | None = None,
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
        sampled_tokens=sum(
            e.sampled_tokens for episodes_G in batch.episodes_P_G for e in episodes_G
        ),
        loss=result.loss if result is not None else None,
        backend_metrics=dict(result.metrics) if result is not None else {},
        sampling_seconds=batch.seconds,
        training_seconds=training if result is not None else 0.0,
        sampler_path=batch.sampler_path,
        reward_parts=part_means([e.parts for episodes_G in batch.episodes_P_G for e in episodes_G]),
        truncated=sum(
            r.ended == "length" for responses_G in batch.responses_P_G for r in responses_G
        ),
        mean_abs_advantage=mean_abs_advantage(batch),
        kl=kl,
        metrics=metric_means([e.metrics for episodes_G in batch.episodes_P_G for e in episodes_G]),
        approx_kl=(
            approx_kl(batch.datums_D, result.learner_logprobs_D)
            if result is not None and result.learner_logprobs_D is not None
            else None
        ),
        entropy=sampler_entropy(
            [
                q
                for episodes_G in batch.episodes_P_G
                for e in episodes_G
                for turn in e.turns
                for q in turn.completion.logprobs
            ]
        ),
    )


def mean_abs_advantage(batch: Rollout) -> float:
    """The mean |advantage| (the reward's, before any KL penalty) of the episodes trained on."""
    kept = [
        abs(a)
        for advantages_G, trained_G in zip(batch.advantages_P_G, batch.trained_P_G, strict=True)
        for a, t in zip(advantages_G, trained_G, strict=True)
        if t
    ]
    return math.fsum(kept) / len(kept) if kept else 0.0
