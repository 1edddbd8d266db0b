"""Run configuration: frozen dataclasses, built from flags and the environment.

`TrainConfig` is what the GRPO loop uses, and all it takes. `Config` is one
run of the command line: the training settings plus the task, the backend,
its connection deadlines and retries, and where the run folder goes.

Each setting has a default, an environment variable (the seed demo's names
where it had one), a flag that wins over the variable, and a check with an
upper limit, so a typo cannot eat the machine. Values are validated once,
here, and a bad one raises `ConfigError` with a message that names the
variable or flag, what it must be, and what it got.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

DEFAULT_BASE_URL = "https://mint.macaron.xin"
"""mint 0.2.0's endpoint when MINT_BASE_URL is unset (mint's `_MINT_DEFAULT_BASE_URL`)."""
DEFAULT_ADAPTER = "mathrl.tasks.addition:MathAdapter"
MAX_COMPLETIONS_PER_STEP = 65_536
"""Upper limit of batch x group."""
MAX_SEED = 2**31 - 1


class ConfigError(ValueError):
    """A setting's value is unusable. The message is meant for the user."""


def shown(raw: object, limit: int = 40) -> str:
    """`raw` for an error message: its repr, cut short when long."""
    if isinstance(raw, str) and len(raw) > limit:
        return f"{raw[:limit]!r}... ({len(raw):,} characters)"
    return repr(raw)


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
    save_every: int = 5
    """Save the full training state (weights and optimizer) every this many steps."""

    def __post_init__(self) -> None:
        _check_fields(self, "TrainConfig")
        _check_step_size(self.batch, self.group, "TrainConfig.batch", "TrainConfig.group")


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
    retries: int = 3
    retry_delay: float = 1.0
    log_dir: str | None = None
    fake_fault_rate: float = 0.0
    fake_latency: float = 0.0

    def __post_init__(self) -> None:
        _check_fields(self, "Config")
        if self.backend not in ("mint", "fake"):
            raise ConfigError(f"Config.backend must be 'mint' or 'fake' (got {self.backend!r})")
        if self.backend != "fake" and (self.fake_fault_rate or self.fake_latency):
            raise ConfigError(
                "--fake-fault-rate and --fake-latency work only with --backend fake "
                f"(got --backend {self.backend})"
            )


@dataclass(frozen=True, slots=True)
class Setting:
    """How one field of `TrainConfig` or `Config` is named, parsed and checked."""

    field: str
    flag: str
    env: str | None
    help: str
    parse: Callable[[str], Any]
    requirement: str
    check: Callable[[Any], bool]

    @property
    def trains(self) -> bool:
        """True for a TrainConfig field: changing it changes what is trained."""
        return self.field in _TRAIN_FIELDS


_INT = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(
    r"[+-]?([0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?|[+-]?(inf|nan)", re.ASCII
)


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


def _int_in(low: int, high: int) -> tuple[str, Callable[[Any], bool]]:
    return f"an integer from {low} to {high:,}", lambda n: low <= n <= high


def _number_in(
    low: float, high: float, low_open: bool = False
) -> tuple[str, Callable[[Any], bool]]:
    bound = ">" if low_open else ">="

    def check(x: float) -> bool:
        return math.isfinite(x) and (x > low if low_open else x >= low) and x <= high

    return f"a number {bound} {low:g} and <= {high:g}", check


def _model_name(text: str) -> bool:
    return 0 < len(text) <= 200 and text.isprintable()


def _path(text: str) -> bool:
    return 0 < len(text) <= 4096 and "\0" not in text


_DAY = 86_400.0

# fmt: off
SETTINGS: tuple[Setting, ...] = (
    Setting("steps", "--steps", "MINT_RL_STEPS", "GRPO steps", _int, *_int_in(1, 1_000_000)),
    Setting("batch", "--batch", "MINT_RL_BATCH", "problems per step",
            _int, *_int_in(1, MAX_COMPLETIONS_PER_STEP // 2)),
    Setting("group", "--group", "MINT_RL_GROUP", "completions sampled per problem",
            _int, *_int_in(2, MAX_COMPLETIONS_PER_STEP)),
    Setting("lr", "--lr", "MINT_RL_LR", "Adam learning rate", _float, *_number_in(0, 1, True)),
    Setting("max_tokens", "--max-tokens", "MINT_RL_MAX_TOKENS",
            "most tokens per completion (default: the task's)", _int, *_int_in(1, 32_768)),
    Setting("temperature", "--temperature", "MINT_RL_TEMPERATURE", "sampling temperature",
            _float, *_number_in(0, 100)),
    Setting("seed", "--seed", None, "seed for problems and sampling", _int, *_int_in(0, MAX_SEED)),
    Setting("max_steps_off_policy", "--max-steps-off-policy", None,
            "0: on-policy; 1: sample step k+1 while step k trains", _int, *_int_in(0, 1)),
    Setting("eval_every", "--eval-every", "MINT_RL_EVAL_EVERY",
            "greedy held-out evaluation before training, every K steps and at the end; 0: off",
            _int, *_int_in(0, 1_000_000)),
    Setting("eval_problems", "--eval-problems", "MINT_RL_EVAL_PROBLEMS",
            "held-out problems per evaluation", _int, *_int_in(1, 10_000)),
    Setting("save_every", "--save-every", "MINT_RL_SAVE_EVERY",
            "save the full training state every K steps (and at the end)",
            _int, *_int_in(1, 1_000_000)),
    Setting("adapter", "--adapter", "MINT_RL_ADAPTER", "the task, as module:Class",
            _text, "module:Class, e.g. mymod:MyTask",
            lambda s: 0 < len(s) <= 500 and s.count(":") == 1),
    Setting("base_model", "--base-model", "MINT_BASE_MODEL", "base model to train a LoRA on",
            _text, "a model name (printable, at most 200 characters)", _model_name),
    Setting("lora_rank", "--lora-rank", "MINT_LORA_RANK", "LoRA rank", _int, *_int_in(1, 1024)),
    Setting("connect_timeout", "--connect-timeout", "MINT_CONNECT_TIMEOUT",
            "seconds to wait for the MinT service to answer", _float, *_number_in(0, _DAY, True)),
    Setting("setup_timeout", "--setup-timeout", "MINT_SETUP_TIMEOUT",
            "seconds MinT may take to create the LoRA client and load the tokenizer",
            _float, *_number_in(0, _DAY, True)),
    Setting("call_timeout", "--call-timeout", "MINT_CALL_TIMEOUT",
            "seconds one sample, training or save call may take before it is retried",
            _float, *_number_in(0, _DAY, True)),
    Setting("retries", "--retries", "MINT_RL_RETRIES",
            "retries of a call that failed transiently", _int, *_int_in(0, 100)),
    Setting("retry_delay", "--retry-delay", "MINT_RL_RETRY_DELAY",
            "seconds before the first retry; doubles each time, with jitter",
            _float, *_number_in(0, 3600)),
    Setting("log_dir", "--log-dir", "MINT_RL_LOG_DIR",
            "the run folder (default runs/<UTC time>-<task>-<fingerprint>)",
            _text, "a folder path", _path),
    Setting("fake_fault_rate", "--fake-fault-rate", None,
            "share of fake calls that fail transiently (--backend fake only)",
            _float, *_number_in(0, 1)),
    Setting("fake_latency", "--fake-latency", None,
            "seconds each fake call takes (--backend fake only)", _float, *_number_in(0, 60)),
)
# fmt: on

_TRAIN_FIELDS = frozenset(f.name for f in fields(TrainConfig))
_BY_FIELD = {s.field: s for s in SETTINGS}
_DEFAULTS: dict[str, Any] = {
    **{f.name: f.default for f in fields(TrainConfig)},
    **{f.name: f.default for f in fields(Config) if f.name != "train"},
}


def default_of(setting: Setting) -> Any:
    """The built-in default of a setting (None: decided elsewhere, e.g. by the task)."""
    return _DEFAULTS[setting.field]


def _check_fields(obj: Any, owner: str) -> None:
    # build_config has already named the variable or flag; this catches a config
    # built by hand, e.g. TrainConfig(group=1) passed to run_grpo.
    for f in fields(obj):
        setting = _BY_FIELD.get(f.name)
        value = getattr(obj, f.name)
        if setting is None or value is None:
            continue
        if not setting.check(value):
            raise ConfigError(f"{owner}.{f.name} must be {setting.requirement} (got {value!r})")


def _check_step_size(batch: int, group: int, batch_source: str, group_source: str) -> None:
    if batch * group > MAX_COMPLETIONS_PER_STEP:
        raise ConfigError(
            f"{batch_source} x {group_source} must be at most {MAX_COMPLETIONS_PER_STEP:,} "
            f"completions a step (got {batch:,} x {group:,} = {batch * group:,})"
        )


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
        fixed: Config fields given already typed, e.g. the `--backend` choice.
    """
    train: dict[str, Any] = {}
    run: dict[str, Any] = dict(fixed)
    sources: dict[str, str] = {}
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
            raise ConfigError(f"{source} must be {setting.requirement} (got {shown(raw)})")
        (train if setting.trains else run)[setting.field] = value
        sources[setting.field] = source
    batch, group = train.get("batch", _DEFAULTS["batch"]), train.get("group", _DEFAULTS["group"])
    _check_step_size(
        batch, group, sources.get("batch", "batch (default)"), sources.get("group", "group")
    )
    return Config(train=TrainConfig(**train), **run)


def api_key(env: Mapping[str, str]) -> str:
    """MINT_API_KEY, checked: set, not blank, and shaped like a MinT key (never echoed)."""
    key = env.get("MINT_API_KEY", "")
    if not key.strip():
        raise ConfigError(
            "MINT_API_KEY must be set to a MinT API key (got nothing): export it or put "
            "`MINT_API_KEY=sk-...` in .env; `--backend fake` runs offline without one"
        )
    if not key.startswith("sk-") or not key.isprintable() or any(c.isspace() for c in key):
        raise ConfigError(
            "MINT_API_KEY must be a MinT key: 'sk-' then the rest, with no spaces "
            f"(got a {len(key)}-character value that is not; it is not shown)"
        )
    return key


def base_url(env: Mapping[str, str]) -> str:
    """MINT_BASE_URL (or MinT's default), checked: an http(s) URL with a host."""
    url = env.get("MINT_BASE_URL") or DEFAULT_BASE_URL
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # e.g. a port that is not a number below 65,536
        ok = False
    if not (ok and url.isprintable() and not any(c.isspace() for c in url)):
        raise ConfigError(
            f"MINT_BASE_URL must be an http:// or https:// URL with a host, such as "
            f"{DEFAULT_BASE_URL} (got {shown(url)})"
        )
    return url
