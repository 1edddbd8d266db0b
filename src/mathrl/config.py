"""Run configuration: one frozen dataclass, built from flags and the environment.

Each setting has a default, an environment variable (the seed demo's names),
a flag that wins over the variable, and a check. Values are validated once,
here, and a bad one raises `ConfigError` with a message that names the
variable or flag, what it must be, and what it got.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_BASE_URL = "https://mint.macaron.xin"
"""mint 0.2.0's endpoint when MINT_BASE_URL is unset (mint's `_MINT_DEFAULT_BASE_URL`)."""


class ConfigError(ValueError):
    """A setting's value is unusable. The message is meant for the user."""


@dataclass(frozen=True, slots=True)
class Config:
    """Everything one run of `python -m mathrl` needs to know."""

    base_model: str = "Qwen/Qwen3-0.6B"
    lora_rank: int = 16
    steps: int = 5
    batch: int = 10
    group: int = 4
    lr: float = 1e-4
    max_tokens: int = 8
    temperature: float = 1.0
    seed: int = 0
    backend: str = "mint"
    stop_at_newline: bool = True
    max_steps_off_policy: int = 0
    connect_timeout: float = 60.0
    setup_timeout: float = 600.0

    def __post_init__(self) -> None:
        # build_config has already named the variable or flag; this catches a
        # Config built by hand, e.g. Config(group=1) passed to run_grpo.
        for setting in SETTINGS:
            value = getattr(self, setting.field)
            if not setting.check(value):
                raise ConfigError(
                    f"Config.{setting.field} must be {setting.requirement} (got {value!r})"
                )
        if self.backend not in ("mint", "fake"):
            raise ConfigError(f"Config.backend must be 'mint' or 'fake' (got {self.backend!r})")


@dataclass(frozen=True, slots=True)
class Setting:
    """How one `Config` field is named, parsed and checked."""

    field: str
    flag: str
    env: str | None
    help: str
    parse: Callable[[str], Any]
    requirement: str
    check: Callable[[Any], bool]


_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|nan)", re.ASCII)


def _int(text: str) -> int:
    # Plain ASCII digits only: int() would also take "1_0" and non-Latin digits.
    if not _INT.fullmatch(text.strip()):
        raise ValueError(text)
    return int(text.strip())


def _float(text: str) -> float:
    if not _FLOAT.fullmatch(text.strip().lower()):
        raise ValueError(text)
    return float(text.strip())


def _text(text: str) -> str:
    return text.strip()


def _finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def _at_least(n: int) -> Callable[[int], bool]:
    return lambda value: value >= n


def _finite_nonnegative(x: float) -> bool:
    return math.isfinite(x) and x >= 0


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    Setting("base_model", "--base-model", "MINT_BASE_MODEL", "base model to train a LoRA on",
            _text, "a model name", bool),
    Setting("lora_rank", "--lora-rank", "MINT_LORA_RANK", "LoRA rank",
            _int, "an integer >= 1", _at_least(1)),
    Setting("steps", "--steps", "MINT_RL_STEPS", "GRPO steps",
            _int, "an integer >= 1", _at_least(1)),
    Setting("batch", "--batch", "MINT_RL_BATCH", "problems per step",
            _int, "an integer >= 1", _at_least(1)),
    Setting("group", "--group", "MINT_RL_GROUP", "completions sampled per problem",
            _int, "an integer >= 2", _at_least(2)),
    Setting("lr", "--lr", "MINT_RL_LR", "Adam learning rate",
            _float, "a finite number > 0", _finite_positive),
    Setting("max_tokens", "--max-tokens", "MINT_RL_MAX_TOKENS", "most tokens per completion",
            _int, "an integer >= 1", _at_least(1)),
    Setting("temperature", "--temperature", "MINT_RL_TEMPERATURE", "sampling temperature",
            _float, "a finite number >= 0", _finite_nonnegative),
    Setting("seed", "--seed", None, "seed for problems and sampling",
            _int, "an integer", lambda n: True),
    Setting("max_steps_off_policy", "--max-steps-off-policy", None,
            "0: on-policy; 1: sample step k+1 while step k trains",
            _int, "0 or 1", lambda n: n in (0, 1)),
    Setting("connect_timeout", "--connect-timeout", "MINT_CONNECT_TIMEOUT",
            "seconds to wait for the MinT service to answer",
            _float, "a finite number > 0", _finite_positive),
    Setting("setup_timeout", "--setup-timeout", "MINT_SETUP_TIMEOUT",
            "seconds MinT may take to create the LoRA client and load the tokenizer",
            _float, "a finite number > 0", _finite_positive),
)
# fmt: on

_DEFAULTS = {f.name: f.default for f in fields(Config)}


def default_of(setting: Setting) -> Any:
    """The built-in default of a setting."""
    return _DEFAULTS[setting.field]


def build_config(
    flags: Mapping[str, str | None],
    env: Mapping[str, str],
    only: Collection[str] | None = None,
    **fixed: Any,
) -> Config:
    """Build a validated Config: a flag beats its variable, which beats the default.

    Args:
        flags: raw flag values by field name (None where the flag was absent).
        env: the environment (after `.env` has been merged in).
        only: the fields to read (default all); the rest keep their defaults,
            so a setting a command does not use cannot make it fail.
        fixed: fields given already typed, e.g. the `--backend` choice.
    """
    values: dict[str, Any] = dict(fixed)
    for setting in SETTINGS:
        if only is not None and setting.field not in only:
            continue
        raw, source = flags.get(setting.field), setting.flag
        if raw is None and setting.env is not None:
            raw, source = env.get(setting.env), setting.env
        if raw is None:
            continue
        try:
            value = setting.parse(raw)
        except ValueError:
            value = None
        if value is None or not setting.check(value):
            raise ConfigError(f"{source} must be {setting.requirement} (got {raw!r})")
        values[setting.field] = value
    return Config(**values)
