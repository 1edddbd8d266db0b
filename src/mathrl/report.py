"""What a run reports, and the Observer that receives it.

The loop does no printing and no file I/O: it hands each finished step,
evaluation and checkpoint to an `Observer`. The CLI's observers print the
seed's lines, write the run folder and draw the progress bar; a test can
subclass `Observer` and keep what it needs. Every method is a no-op here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mathrl.losses import Loss
from mathrl.tools import ToolCall


class Advice(str):
    """A warning that names the run settings which would change it, by `TrainConfig` field
    (`settings`); the command line adds their flags and variables, as for a `BackendError`."""

    settings: tuple[str, ...]

    def __new__(cls, message: str, settings: tuple[str, ...] = ()) -> Advice:
        self = super().__new__(cls, message)
        self.settings = settings
        return self


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """What one training step did."""

    step: int
    accuracy: float
    """The task's `evaluate` over this step's training samples (temperature as configured)."""
    mean_reward: float
    datums: int
    """Completions trained on: the non-empty ones of groups whose rewards differ (with a KL
    penalty, of every group)."""
    groups: int
    group_size: int
    constant_groups: int
    """Groups whose rewards were all equal (no reward signal): not trained on, unless a KL
    penalty trains every group."""
    sampled_tokens: int
    loss: float | None
    """The importance-sampling loss, or None when nothing was trained."""
    backend_metrics: Mapping[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    """Wall time since the previous step ended (the step's period)."""
    sampling_seconds: float = 0.0
    training_seconds: float = 0.0
    sampler_path: str = ""
    """The checkpoint this step's samples were drawn from."""
    reward_parts: Mapping[str, float] = field(default_factory=dict)
    """Each named reward part's mean over the step's completions (none: rewards are numbers)."""
    truncated: int = 0
    """Completions that ran into the token limit."""
    mean_abs_advantage: float = 0.0
    """The mean |advantage| of the episodes trained on (0.0 when none was)."""
    kl: float | None = None
    """With a KL penalty: the mean over the model's tokens of every datum trained on (every
    group's) of sampler logprob minus base logprob, an estimate of KL(policy || base); None
    otherwise."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Each metric the task reports beside its reward (`Adapter`'s `metrics`): its mean over
    the step's completions that report it (none: the task reports none)."""
    approx_kl: float | None = None
    """How far the learner's logprobs of the model's tokens trained on were from the
    sampler's (`mathrl.grpo.approx_kl`, as CleanRL's): 0 on-policy at temperature 1; None
    when nothing trained, or the backend gave no learner logprobs."""
    entropy: float | None = None
    """The sampler's entropy per token, estimated from every token the step sampled
    (`mathrl.grpo.sampler_entropy`); None when it sampled none."""

    @property
    def groups_kept(self) -> int:
        return self.groups - self.constant_groups

    @property
    def mean_completion_tokens(self) -> float:
        completions = self.groups * self.group_size
        return self.sampled_tokens / completions if completions else 0.0


@dataclass(frozen=True, slots=True)
class EvalMetrics:
    """One evaluation on the held-out problems (step 0: before training): greedy, and with
    `samples` per problem, pass@k (and maj@k) too."""

    step: int
    accuracy: float
    """The share of greedy completions that are correct."""
    correct: int
    """round(accuracy * problems): the count the accuracy stands for."""
    problems: int
    mean_reward: float
    """The greedy completions' mean reward."""
    sampler_path: str
    seconds: float = 0.0
    reward_parts: Mapping[str, float] = field(default_factory=dict)
    samples: int = 0
    """Samples drawn per problem at the sampling temperature (0: greedy only)."""
    pass_at_k: Mapping[int, float] = field(default_factory=dict)
    """k -> pass@k over the problems (`mathrl.passk.pass_at_k`); none without samples."""
    majority_at_k: Mapping[int, float] = field(default_factory=dict)
    """k -> maj@k, for a task that names its answers (`mathrl.passk.majority_at_k`)."""
    sampled_mean_reward: float | None = None
    """The samples' mean reward; None without samples."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Each metric the task reports: its mean over the greedy completions that report it."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One completed save: a sampler's weights, or the full training state."""

    step: int
    """The last step whose update the checkpoint holds (0: before training)."""
    kind: str
    """"sampler" (weights to sample from) or "state" (weights and optimizer, to resume)."""
    path: str


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run did, and where its final weights are."""

    steps: list[StepMetrics]
    saved_path: str
    """The latest sampler checkpoint: the weights after the last completed step."""
    state_path: str
    """The latest full training state: what a resumed run continues from."""
    last_step: int
    """The last step completed (less than `config.steps` if the run was stopped)."""
    stopped: bool = False
    evaluations: list[EvalMetrics] = field(default_factory=list)
    """Each held-out evaluation, in order (none without `eval_every`)."""


@dataclass(frozen=True, slots=True)
class TemperedRatio:
    """A loss that clips trained on samples drawn at a temperature other than 1.

    The sampler's logprob `q` of a token is the tempered distribution's, the
    learner's `lp` is at temperature 1, so the importance ratio exp(lp - q) is
    not 1 even on-policy, and the clip acts on tokens the policy itself just
    sampled. Reported once a run, at its first step that trained.
    """

    step: int
    loss: Loss
    temperature: float
    clipped: float | None
    """The share of the step's model tokens whose ratio the clip bound (`clipped:frac`);
    None if the backend did not say."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One completion as the run saw it: its text, how it ended, what it earned."""

    text: str
    ended: str
    """"stop", "end_of_turn", "end_of_sequence" or "length" (see `mathrl.adapter.Ending`)."""
    stop: str | None
    reward: float
    parts: Mapping[str, float]
    advantage: float
    trained: bool
    """False when its group was constant (without a KL penalty), or it was masked (cut off at
    the token limit)."""
    earlier: tuple[tuple[str, str], ...] = ()
    """An episode's turns before the last: the model's text and the environment's reply."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """What the task reported beside the reward (`Adapter`'s `metrics`); none by default."""
    calls: tuple[tuple[ToolCall, ...], ...] = ()
    """The tool calls of each of `earlier`'s turns, and their results (a task with tools)."""


@dataclass(frozen=True, slots=True)
class SampleGroup:
    """One problem's group of completions in one step."""

    step: int
    problem: int
    """Its place in the step's batch."""
    prompt: str | Sequence[Mapping[str, str]]
    samples: tuple[Sample, ...]


class Observer:
    """Receives a run's events as they happen. Override what you need."""

    def on_step(self, metrics: StepMetrics) -> None:
        """A step has finished training (or had nothing to train on)."""

    def on_eval(self, metrics: EvalMetrics) -> None:
        """A held-out evaluation has finished."""

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        """A save has completed and its path is known."""

    def on_phase(self, step: int, phase: str) -> None:
        """Step `step` entered a phase: "sampling", "training" or "evaluating"."""

    def on_sampled(self, step: int, done: int, total: int) -> None:
        """`done` of step `step`'s `total` completions have come back."""

    def on_warning(self, message: str) -> None:
        """Something the user should know that does not stop the run."""

    def on_tempered_ratio(self, note: TemperedRatio) -> None:
        """A loss that clips trains at a sampling temperature other than 1 (once a run)."""

    def on_samples(self, groups: Sequence[SampleGroup]) -> None:
        """A step's groups, every completion in them, after its `on_step`."""


class Observers(Observer):
    """Several observers, each told every event in turn."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def on_step(self, metrics: StepMetrics) -> None:
        for o in self.observers:
            o.on_step(metrics)

    def on_eval(self, metrics: EvalMetrics) -> None:
        for o in self.observers:
            o.on_eval(metrics)

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        for o in self.observers:
            o.on_checkpoint(checkpoint)

    def on_phase(self, step: int, phase: str) -> None:
        for o in self.observers:
            o.on_phase(step, phase)

    def on_sampled(self, step: int, done: int, total: int) -> None:
        for o in self.observers:
            o.on_sampled(step, done, total)

    def on_warning(self, message: str) -> None:
        for o in self.observers:
            o.on_warning(message)

    def on_tempered_ratio(self, note: TemperedRatio) -> None:
        for o in self.observers:
            o.on_tempered_ratio(note)

    def on_samples(self, groups: Sequence[SampleGroup]) -> None:
        for o in self.observers:
            o.on_samples(groups)
