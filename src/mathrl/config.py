"""Run configuration: frozen dataclasses, each value checked once, where it is built.

`TrainConfig` is what the GRPO loop uses, and all it takes. `Config` is one
run of the command line: the training settings plus the task, the backend,
its connection deadlines and retries, and where the run folder goes.

Every field has a default and a rule (`RULES`): what it must be, with an
upper limit, so a typo cannot eat the machine. A config built by hand with a
value outside its rule raises `ConfigError` naming the field. How each
setting is spelled on the command line and in the environment is the command
line's business (`mathrl.cli.settings`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from mathrl.grpo import SCALES
from mathrl.losses import DEFAULT_LOSS, LOSSES, PARAMETERS, Loss, LossName, losses_taking
from mathrl.passk import MAX_SAMPLES
from mathrl.tasks import BUILT_IN
from mathrl.text import listed, shown, shown_end

DEFAULT_BASE_URL = "https://mint.macaron.xin"
"""mint 0.2.0's endpoint when none is given (mint's `_MINT_DEFAULT_BASE_URL`)."""
DEFAULT_ADAPTER = "mathrl.tasks.addition:MathAdapter"
MAX_COMPLETIONS_PER_STEP = 65_536
"""Upper limit of batch x group."""
MAX_SEED = 2**31 - 1
_DAY = 86_400.0


class ConfigError(ValueError):
    """A setting's value is unusable. The message is meant for the user."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What one setting must be: a phrase for messages, and the check itself. The phrase may
    be a function, for a list read when the message is made (the losses')."""

    phrase: str | Callable[[], str]
    check: Callable[[Any], bool]
    quote: Callable[[str], str] = shown
    """How a message quotes a value given as text that the rule refuses."""

    @property
    def requirement(self) -> str:
        return self.phrase if isinstance(self.phrase, str) else self.phrase()


def int_in(low: int, high: int) -> Rule:
    """An integer from `low` to `high`, both included."""
    return Rule(f"an integer from {low} to {high:,}", lambda n: low <= n <= high)


def number_in(low: float, high: float, low_open: bool = False) -> Rule:
    """A finite number from `low` (excluded if `low_open`) to `high`."""

    def check(x: float) -> bool:
        return math.isfinite(x) and (x > low if low_open else x >= low) and x <= high

    return Rule(f"a number {'>' if low_open else '>='} {low:g} and <= {high:g}", check)


def adapter_spec_shown(spec: str) -> str:
    """A task spec quoted where it is wrong (the end of a long path, say), and what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not spec.strip() or spec in BUILT_IN or (module_name and attr and ":" not in attr):
        return shown(spec, 60)
    if not sep:
        return f"{shown_end(spec, 60)}, with no ':Class' after the module or file"
    if not module_name:
        return f"{shown(spec, 60)}, with no module or file before the ':'"
    if not attr:
        return f"{shown_end(spec, 60)}, with nothing after the ':'"
    return f"{shown_end(spec, 60)}, with a second ':' in the class part {shown_end(attr, 30)}"


RULES: dict[str, Rule] = {
    "steps": int_in(1, 1_000_000),
    "batch": int_in(1, MAX_COMPLETIONS_PER_STEP // 2),
    "group": int_in(2, MAX_COMPLETIONS_PER_STEP),
    "lr": number_in(0, 1, low_open=True),
    "max_tokens": int_in(1, 32_768),
    "temperature": number_in(0, 100),
    "seed": int_in(0, MAX_SEED),
    "max_steps_off_policy": int_in(0, 1),
    "eval_every": int_in(0, 1_000_000),
    "eval_problems": int_in(1, 10_000),
    "eval_k": Rule(
        f"comma-separated integers from 1 to {MAX_SAMPLES}, e.g. 1,4,16",
        lambda ks: (
            isinstance(ks, tuple) and all(type(k) is int and 1 <= k <= MAX_SAMPLES for k in ks)
        ),
    ),
    "save_every": int_in(1, 1_000_000),
    "mask_truncated": Rule("true or false", lambda v: isinstance(v, bool)),
    "loss": Rule(
        lambda: f"one of {', '.join(LOSSES)}", lambda s: isinstance(s, str) and s in LOSSES
    ),
    **{p.field: number_in(p.low, p.high) for p in PARAMETERS},
    "scale_rewards": Rule(f"one of {', '.join(SCALES)}", lambda s: s in SCALES),
    "substeps": int_in(1, 64),
    "fill_batch": Rule("true or false", lambda v: isinstance(v, bool)),
    "kl_coef": number_in(0, 10),
    "adapter": Rule(
        f"{', '.join(BUILT_IN)} or module:Class, e.g. mymod:MyTask",
        lambda s: s in BUILT_IN or (0 < len(s) <= 500 and s.count(":") == 1),
        adapter_spec_shown,
    ),
    "base_model": Rule(
        "a model name (printable, at most 200 characters)",
        lambda s: 0 < len(s) <= 200 and s.isprintable(),
    ),
    "lora_rank": int_in(1, 1024),
    "connect_timeout": number_in(0, _DAY, low_open=True),
    "setup_timeout": number_in(0, _DAY, low_open=True),
    "call_timeout": number_in(0, _DAY, low_open=True),
    "retries": int_in(0, 100),
    "retry_delay": number_in(0, 3600),
    "retry_window": number_in(0, 7 * _DAY, low_open=True),
    "reward_workers": int_in(1, 1024),
    "reward_timeout": number_in(0, _DAY, low_open=True),
    "log_dir": Rule("a folder path", lambda s: 0 < len(s) <= 4096 and "\0" not in s),
    "log_samples": int_in(0, 10_000),
    "wandb_project": Rule(
        "a W&B project name: 1 to 128 characters, none of / \\ # ? % : and no spaces",
        lambda s: 0 < len(s) <= 128 and s.isprintable() and not set(s) & set("/\\#?%: "),
    ),
}
"""The rule of every checked field of `TrainConfig` and `Config`."""


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Everything the GRPO loop reads; nothing it does not."""

    steps: int = 5
    batch: int = 10
    group: int = 4
    lr: float = 1e-4
    max_tokens: int | None = None
    """Tokens per completion; None: the task's own default."""
    temperature: float = 1.0
    seed: int = 0
    max_steps_off_policy: int = 0
    eval_every: int = 0
    """Evaluate greedily on held-out problems before training, every this many
    steps and after the last; 0: never."""
    eval_problems: int = 100
    eval_k: tuple[int, ...] = ()
    """With evaluations, also draw max(eval_k) samples of each held-out problem at
    `temperature`, and report pass@k (and maj@k, where the task names answers) for
    each k; (): greedy accuracy only. It changes no training."""
    save_every: int = 5
    """Save the full training state (weights and optimizer) every this many steps."""
    mask_truncated: bool = False
    """Train on no completion that ran into the token limit (its reward still counts)."""
    loss: LossName = DEFAULT_LOSS
    """The policy-gradient loss, by its name in `mathrl.losses.LOSSES`."""
    clip_low: float | None = None
    """The loss setting `mathrl.losses.CLIP_LOW`; None: the loss's default."""
    clip_high: float | None = None
    """The loss setting `mathrl.losses.CLIP_HIGH`; None: the loss's default."""
    dro_beta: float | None = None
    """The loss setting `mathrl.losses.DRO_BETA`; None: the loss's default."""
    scale_rewards: str = "none"
    """Advantages: reward minus group mean, divided by the group's reward std ("group", as
    GRPO), the step's ("batch"), or not at all ("none", as Dr. GRPO: the default)."""
    substeps: int = 1
    """Minibatches each step's datums are split into, each its own forward_backward and
    optim_step."""
    fill_batch: bool = False
    """Draw more problems until `batch` groups have unequal rewards (DAPO's dynamic
    sampling), up to `mathrl.rollout.FILL_BATCH_CAP` x `batch` problems a step."""
    kl_coef: float = 0.0
    """The weight of the KL penalty against the base model (`mathrl.grpo.kl_penalized`); with
    it, every group is trained on, constant ones too."""

    def __post_init__(self) -> None:
        if isinstance(self.eval_k, list | tuple) and all(type(k) is int for k in self.eval_k):
            # Sorted, once each, a tuple: as a run's config.json gives it back (a list) too.
            object.__setattr__(self, "eval_k", tuple(sorted(set(self.eval_k))))
        _check_fields(self, "TrainConfig")
        check_step_size(self.batch, self.group, "TrainConfig.batch", "TrainConfig.group")
        check_eval_k(self.eval_k, self.eval_problems, lambda f: f"TrainConfig.{f}")
        check_loss({f: getattr(self, f) for f in LOSS_FIELDS}, lambda name: f"TrainConfig.{name}")

    @property
    def loss_fn(self) -> Loss:
        """The loss and its settings, as the backends take them."""
        return Loss(self.loss, **{p.field: getattr(self, p.field) for p in PARAMETERS})


@dataclass(frozen=True, slots=True)
class Config:
    """One run of `python -m mathrl`: training settings plus everything around them."""

    train: TrainConfig = field(default_factory=TrainConfig)
    adapter: str = DEFAULT_ADAPTER
    backend: str = "mint"
    base_model: str = "Qwen/Qwen3-0.6B"
    lora_rank: int = 16
    connect_timeout: float = 60.0
    setup_timeout: float = 600.0
    call_timeout: float = 600.0
    retries: int | None = None
    """At most this many retries of one call; None: no count, only the retry window."""
    retry_delay: float = 1.0
    retry_window: float = 600.0
    """Seconds from a call's first failure within which it is retried."""
    reward_workers: int | None = None
    """Threads that run the task's rewards and environment steps; None: one per core."""
    reward_timeout: float = 300.0
    """Seconds one reward or environment step may take before the run fails."""
    log_dir: str | None = None
    log_samples: int = 2
    """Groups of each step recorded in the run folder's samples.jsonl (0: none)."""
    wandb_project: str | None = None
    """Mirror the metrics to this Weights & Biases project (needs `mathrl[wandb]`)."""

    def __post_init__(self) -> None:
        _check_fields(self, "Config")
        if self.backend not in ("mint", "fake"):
            raise ConfigError(f"Config.backend must be 'mint' or 'fake' (got {self.backend!r})")


TRAIN_FIELDS = frozenset(f.name for f in fields(TrainConfig))
DEFAULTS: dict[str, Any] = {
    **{f.name: f.default for f in fields(TrainConfig)},
    **{f.name: f.default for f in fields(Config) if f.name != "train"},
}
"""Every field's built-in default (None: decided elsewhere, e.g. by the task)."""


def _check_fields(obj: Any, owner: str) -> None:
    # The command line has already named the variable or flag; this catches a
    # config built by hand, e.g. TrainConfig(group=1) passed to run_grpo.
    for f in fields(obj):
        rule = RULES.get(f.name)
        value = getattr(obj, f.name)
        if rule is not None and value is not None and not rule.check(value):
            raise ConfigError(f"{owner}.{f.name} must be {rule.requirement} (got {value!r})")


LOSS_FIELDS = ("loss", *(p.field for p in PARAMETERS))


def check_loss(values: Mapping[str, Any], source: Callable[[str], str]) -> None:
    """Refuse loss settings (`LOSS_FIELDS`, by name) that do not apply to the loss chosen,
    naming both sources."""
    loss = values.get("loss", DEFAULT_LOSS)
    for parameter in PARAMETERS:
        takers = losses_taking(parameter)
        if values.get(parameter.field) is not None and loss not in takers:
            raise ConfigError(
                f"{source(parameter.field)} applies to the {listed(takers, 'or')} loss only "
                f"(got {source('loss')} {loss})"
            )


def check_step_size(batch: int, group: int, batch_source: str, group_source: str) -> None:
    """Refuse more than MAX_COMPLETIONS_PER_STEP completions a step, naming both sources."""
    if batch * group > MAX_COMPLETIONS_PER_STEP:
        raise ConfigError(
            f"{batch_source} x {group_source} must be at most {MAX_COMPLETIONS_PER_STEP:,} "
            f"completions a step (got {batch:,} x {group:,} = {batch * group:,})"
        )


def check_eval_k(eval_k: tuple[int, ...], eval_problems: int, source: Callable[[str], str]) -> None:
    """Refuse more samples an evaluation than a step may draw, naming each setting by
    `source(field)`."""
    samples = eval_problems * max(eval_k, default=0)
    if samples > MAX_COMPLETIONS_PER_STEP:
        raise ConfigError(
            f"{source('eval_problems')} x the largest of {source('eval_k')} must be at most "
            f"{MAX_COMPLETIONS_PER_STEP:,} samples an evaluation (got {eval_problems:,} x "
            f"{max(eval_k)} = {samples:,})"
        )
