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
from mathrl.losses import (
    CLIP_HIGH,
    CLIP_LOW,
    DEFAULT_LOSS,
    DRO_BETA,
    LOSSES,
    PARAMETERS,
    Loss,
    LossName,
    Parameter,
    losses_taking,
)
from mathrl.passk import MAX_SAMPLES
from mathrl.text import listed, shown
from mathrl.workers import DEFAULT_TIMEOUT

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
        "a task: module:Class, e.g. mymod:MyTask, or a name the command line knows",
        lambda s: 0 < len(s) <= 500 and s.count(":") <= 1 and s.isprintable(),
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


def setting(default: Any, description: str | Callable[[], str], unset: str | None = None) -> Any:
    """A config field with its one description: `--help` says it (`mathrl.cli.settings`),
    and the class's docstring lists it (`described`). `unset` says what the default None
    stands for; a description read from a table is a function (the loss settings')."""
    return field(default=default, metadata={"description": description, "unset": unset})


def description(owner: type, name: str) -> str:
    """The description of field `name` of the dataclass `owner`."""
    text = {f.name: f for f in fields(owner)}[name].metadata["description"]
    return text if isinstance(text, str) else text()


def unset_meaning(owner: type, name: str) -> str | None:
    """What the default None of field `name` of `owner` stands for (None: it is no None)."""
    meaning: str | None = {f.name: f for f in fields(owner)}[name].metadata.get("unset")
    return meaning


def described(owner: type) -> str:
    """`owner`'s docstring, then each field of it with its default and description."""
    lines = [(owner.__doc__ or "").rstrip(), "", "Fields (the command line's flags say the same):"]
    for f in fields(owner):
        if "description" in f.metadata:
            default = unset_meaning(owner, f.name) or repr(f.default)
            lines.append(f"    {f.name} ({default}): {description(owner, f.name)}")
    return "\n".join(lines) + "\n"


def _loss_setting(parameter: Parameter) -> Any:
    """A loss setting's field: None, the loss's default; described by the losses taking it."""
    return setting(
        None,
        lambda: f"{listed(losses_taking(parameter), 'and')}: {parameter.meaning}",
        "the loss's",
    )


FILL_BATCH_CAP = 4
"""With `fill_batch`, a step draws at most this many times `batch` problems."""
CALL_TIMEOUT = 600.0
"""Seconds one sample, training or save call may take by default (`mathrl.service.retry`)."""
RETRY_DELAY = 1.0
"""Seconds before a failing call's first retry, by default."""
RETRY_WINDOW = 600.0
"""Seconds from a call's first failure within which it is retried, by default."""


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Everything the GRPO loop reads; nothing it does not."""

    steps: int = setting(5, "GRPO steps")
    batch: int = setting(10, "problems per step")
    group: int = setting(4, "completions sampled per problem")
    lr: float = setting(1e-4, "Adam learning rate")
    max_tokens: int | None = setting(None, "most tokens per completion", "the task's")
    temperature: float = setting(1.0, "sampling temperature")
    seed: int = setting(0, "seed for problems and sampling")
    max_steps_off_policy: int = setting(0, "0: on-policy; 1: sample step k+1 while step k trains")
    eval_every: int = setting(
        0, "greedy held-out evaluation before training, every K steps and at the end; 0: off"
    )
    eval_problems: int = setting(100, "held-out problems per evaluation")
    eval_k: tuple[int, ...] = setting(
        (),
        "with evaluations, also sample each held-out problem K times (the largest K) and "
        "report pass@K (and maj@K where the task names answers) for each K, e.g. 1,4,16; it "
        "changes no training",
        "none: greedy accuracy only",
    )
    save_every: int = setting(
        5, "save the full training state (weights and optimizer) every K steps (and at the end)"
    )
    mask_truncated: bool = setting(
        False, "train on no completion cut off at the token limit (its reward still counts)"
    )
    loss: LossName = setting(  # noqa: RUF009 (a dataclasses.field, as each one here)
        DEFAULT_LOSS, lambda: f"the policy-gradient loss: {listed(LOSSES, 'or')}"
    )
    clip_low: float | None = _loss_setting(CLIP_LOW)
    clip_high: float | None = _loss_setting(CLIP_HIGH)
    dro_beta: float | None = _loss_setting(DRO_BETA)
    scale_rewards: str = setting(
        "none",
        "divide advantages (reward minus the group's mean) by the reward std of each group "
        "(GRPO), of the batch, or none (Dr. GRPO)",
    )
    substeps: int = setting(1, "minibatches per step, each its own forward_backward and optim_step")
    fill_batch: bool = setting(
        False,
        "draw more problems until batch groups have unequal rewards (DAPO's dynamic sampling; "
        f"at most {FILL_BATCH_CAP} x batch)",
    )
    kl_coef: float = setting(
        0.0,
        "weight of the KL penalty against the base model (0: none); with it, every group "
        "trains, constant ones too",
    )

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
    adapter: str = setting(
        DEFAULT_ADAPTER,
        "the task: a built-in one's name (`python -m mathrl tasks`), or module:Class",
    )
    backend: str = setting("mint", "mint, or fake (in memory, offline)")
    base_model: str = setting("Qwen/Qwen3-0.6B", "base model to train a LoRA on")
    lora_rank: int = setting(16, "LoRA rank")
    connect_timeout: float = setting(60.0, "seconds to wait for the MinT service to answer")
    setup_timeout: float = setting(
        600.0, "seconds MinT may take to create the LoRA client and load the tokenizer"
    )
    call_timeout: float = setting(
        CALL_TIMEOUT, "seconds one sample, training or save call may take before it is retried"
    )
    retries: int | None = setting(
        None,
        "at most this many retries of one call (besides the retry window)",
        "none: the retry window alone",
    )
    retry_delay: float = setting(
        RETRY_DELAY, "seconds before the first retry; doubles each time, with jitter"
    )
    retry_window: float = setting(
        RETRY_WINDOW, "seconds a failing call is retried for, from its first failure"
    )
    reward_workers: int | None = setting(
        None, "threads running the task's rewards and environment steps", "one per core"
    )
    reward_timeout: float = setting(
        DEFAULT_TIMEOUT, "seconds one reward or environment step may take before the run fails"
    )
    log_dir: str | None = setting(None, "the run folder", "runs/<UTC time>-<task>-<fingerprint>")
    log_samples: int = setting(
        2, "groups of each step whose completions go into the run folder's samples.jsonl"
    )
    wandb_project: str | None = setting(
        None,
        "mirror the metrics to this Weights & Biases project (needs mathrl[wandb])",
        "none: no mirror",
    )

    def __post_init__(self) -> None:
        _check_fields(self, "Config")
        if self.backend not in ("mint", "fake"):
            raise ConfigError(f"Config.backend must be 'mint' or 'fake' (got {self.backend!r})")


TrainConfig.__doc__ = described(TrainConfig)
Config.__doc__ = described(Config)


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
