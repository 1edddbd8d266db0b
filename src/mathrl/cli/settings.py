"""The settings as the command line spells them: flags, environment variables, `.env`.

Each setting has a default, an environment variable (the seed demo's names
where it had one), and a flag that wins over the variable. Values are parsed
and checked once, here, against `mathrl.config.RULES`, and a bad one raises
`ConfigError` with a message that names the variable or flag, what it must
be, and what it got. The library's own errors name settings by field
(`BackendError.settings`); `wording` turns those names into flags and
variables.

The fake backend's knobs (`--fake-latency`, `--fake-fault-rate`) are the
fake's: they live in `FakeOptions`, not in `Config`. What the command line
asks of the task it loads (`--weak-sandbox`) is the task's: it lives in
`TaskOptions`, which `mathrl.cli.loader` maps onto the task's own options.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mathrl.backend import BackendError
from mathrl.config import (
    DEFAULT_BASE_URL,
    DEFAULTS,
    RULES,
    TRAIN_FIELDS,
    Config,
    ConfigError,
    Rule,
    TrainConfig,
    check_eval_k,
    check_loss,
    check_step_size,
    description,
    number_in,
)
from mathrl.config import setting as described_field
from mathrl.grpo import SCALES
from mathrl.losses import LOSSES, PARAMETERS, Parameter
from mathrl.tasks import BUILT_IN
from mathrl.text import closest, listed, shown, shown_end


@dataclass(frozen=True, slots=True)
class FakeOptions:
    """How the fake backend behaves, for trying a run by hand (`--backend fake` only)."""

    fake_latency: float = described_field(0.0, "seconds each fake call takes (--backend fake only)")
    fake_fault_rate: float = described_field(
        0.0, "share of fake calls that fail transiently, seeded (--backend fake only)"
    )
    fake_checkpoints: str | None = described_field(
        None,
        "the folder of the fake's checkpoint files (--backend fake only)",
        "checkpoints/ in the run folder",
    )

    def checkpoint_folder(self, run_folder: Path) -> Path:
        """`fake_checkpoints`, or its default in `run_folder`; absolute, so a resume from
        another working folder finds the files the run folder records."""
        if self.fake_checkpoints is not None:
            return Path(self.fake_checkpoints)
        return run_folder.absolute() / FAKE_CHECKPOINTS


FAKE_CHECKPOINTS = "checkpoints"
"""The fake's checkpoint folder in the run folder, by default."""


FAKE_RULES = {
    "fake_latency": number_in(0, 60),
    "fake_fault_rate": number_in(0, 1),
    "fake_checkpoints": RULES["log_dir"],
}
FAKE_FIELDS = frozenset(f.name for f in fields(FakeOptions))


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """What the command line asks of the task it loads; each maps onto an option of the
    task's constructor (`mathrl.cli.loader.TASK_KEYWORDS`), for the tasks that have it."""

    weak_sandbox: bool = described_field(
        False,
        "run model-written code with the sandbox layers this machine has, instead of refusing "
        "to (a warning names what is missing)",
    )


TASK_RULES = {"weak_sandbox": Rule("true or false", lambda v: isinstance(v, bool))}
TASK_FIELDS = frozenset(f.name for f in fields(TaskOptions))


def adapter_spec_shown(spec: str) -> str:
    """A task spec quoted where it is wrong (the end of a long path, say), and what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not spec.strip() or spec in BUILT_IN or (module_name and attr and ":" not in attr):
        return shown(spec, 60)
    if not sep:
        return f"{shown_end(spec, 60)}, with no ':Class' after the module or file"
    if not module_name:
        return f"{shown_end(spec, 60)}, with no module or file before the ':'"
    if not attr:
        return f"{shown_end(spec, 60)}, with nothing after the ':'"
    return f"{shown_end(spec, 60)}, with a second ':' in the class part {shown_end(attr, 30)}"


CLI_RULES = {
    "adapter": Rule(
        f"{', '.join(BUILT_IN)} or module:Class, e.g. mymod:MyTask",
        lambda s: s in BUILT_IN or (0 < len(s) <= 500 and s.count(":") == 1),
        adapter_spec_shown,
    ),
}
"""The rules the command line holds a setting to beyond the config's own (`RULES`): the task
by a built-in name it resolves (`mathrl.tasks.BUILT_IN`), or module:Class."""


@dataclass(frozen=True, slots=True)
class Setting:
    """How one field of `TrainConfig`, `Config`, `FakeOptions` or `TaskOptions` is spelled
    and parsed."""

    field: str
    flag: str
    env: str | None
    parse: Callable[[str], Any]
    text: str = "TEXT"
    """What a text setting's value is, for `--help` (`PATH`, `TASK`); the others' is `parse`'s."""

    @property
    def kind(self) -> str:
        """The value's kind, as `--help` shows it (its metavar): N, FLOAT, SECONDS (a number
        of seconds, by its help), BOOL, K,K,... (a list) or the text's own."""
        if self.parse is parse_float and self.help_text.startswith("seconds"):
            return "SECONDS"
        return KINDS.get(self.parse, self.text)

    @property
    def owner(self) -> type:
        """The dataclass whose field it is."""
        if self.field in TRAIN_FIELDS:
            return TrainConfig
        if self.field in FAKE_FIELDS:
            return FakeOptions
        return TaskOptions if self.field in TASK_FIELDS else Config

    @property
    def help_text(self) -> str:
        """What it is, for `--help`: the field's one description (`mathrl.config.setting`)."""
        return description(self.owner, self.field)

    @property
    def rule(self) -> Rule:
        return {**RULES, **FAKE_RULES, **TASK_RULES, **CLI_RULES}[self.field]

    @property
    def requirement(self) -> str:
        return self.rule.requirement

    @property
    def trains(self) -> bool:
        """True for a TrainConfig field: changing it changes what is trained."""
        return self.field in TRAIN_FIELDS


_INT = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(
    r"[+-]?([0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?|[+-]?(inf|nan)", re.ASCII
)


def parse_int(text: str) -> int:
    # Plain ASCII digits only: int() would also take "1_0" and non-Latin digits.
    if not _INT.fullmatch(text.strip()):
        raise ValueError(text)
    return int(text.strip())


def parse_count(flag: str, raw: str, most: int) -> int:
    """A flag's whole number from 1 to `most`; ConfigError naming the flag otherwise."""
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else 0
    if not 1 <= value <= most:
        raise ConfigError(f"{flag} must be an integer from 1 to {most:,} (got {shown(raw)})")
    return value


def parse_float(text: str) -> float:
    if not _FLOAT.fullmatch(text.strip().lower()):
        raise ValueError(text)
    return float(text.strip())


def parse_ks(text: str) -> tuple[int, ...]:
    """Comma-separated integers, e.g. `1,4,16`: sorted, each once (the rule checks range)."""
    return tuple(sorted({parse_int(part) for part in text.split(",")}))


def _text(text: str) -> str:
    return text.strip()


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_bool(text: str) -> bool:
    """true/false, yes/no, on/off or 1/0, in any case."""
    word = text.strip().lower()
    if word not in (*_TRUE, *_FALSE):
        raise ValueError(text)
    return word in _TRUE


KINDS: dict[Callable[[str], Any], str] = {
    parse_int: "N",
    parse_float: "FLOAT",
    parse_bool: "BOOL",
    parse_ks: "K,K,...",
}
"""The kind of value each parser reads, as `--help` names it."""


def _loss_setting(parameter: Parameter) -> Setting:
    """A loss setting, spelled after its field."""
    flag, env = "--" + parameter.field.replace("_", "-"), f"MINT_RL_{parameter.field.upper()}"
    return Setting(parameter.field, flag, env, parse_float)


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    Setting("steps", "--steps", "MINT_RL_STEPS", parse_int),
    Setting("batch", "--batch", "MINT_RL_BATCH", parse_int),
    Setting("group", "--group", "MINT_RL_GROUP", parse_int),
    Setting("lr", "--lr", "MINT_RL_LR", parse_float),
    Setting("max_tokens", "--max-tokens", "MINT_RL_MAX_TOKENS", parse_int),
    Setting("temperature", "--temperature", "MINT_RL_TEMPERATURE", parse_float),
    Setting("seed", "--seed", None, parse_int),
    Setting("max_steps_off_policy", "--max-steps-off-policy", None, parse_int),
    Setting("eval_every", "--eval-every", "MINT_RL_EVAL_EVERY", parse_int),
    Setting("eval_problems", "--eval-problems", "MINT_RL_EVAL_PROBLEMS", parse_int),
    Setting("eval_k", "--eval-k", "MINT_RL_EVAL_K", parse_ks),
    Setting("save_every", "--save-every", "MINT_RL_SAVE_EVERY", parse_int),
    Setting("mask_truncated", "--mask-truncated", "MINT_RL_MASK_TRUNCATED", parse_bool),
    Setting("loss", "--loss", "MINT_RL_LOSS", _text, "LOSS"),
    *(_loss_setting(parameter) for parameter in PARAMETERS),
    Setting("scale_rewards", "--scale-rewards", "MINT_RL_SCALE_REWARDS", _text,
            "none|group|batch"),
    Setting("substeps", "--substeps", "MINT_RL_SUBSTEPS", parse_int),
    Setting("fill_batch", "--fill-batch", "MINT_RL_FILL_BATCH", parse_bool),
    Setting("kl_coef", "--kl-coef", "MINT_RL_KL_COEF", parse_float),
    Setting("adapter", "--adapter", "MINT_RL_ADAPTER", _text, "TASK"),
    Setting("base_model", "--base-model", "MINT_BASE_MODEL", _text, "MODEL"),
    Setting("lora_rank", "--lora-rank", "MINT_LORA_RANK", parse_int),
    Setting("connect_timeout", "--connect-timeout", "MINT_CONNECT_TIMEOUT", parse_float),
    Setting("setup_timeout", "--setup-timeout", "MINT_SETUP_TIMEOUT", parse_float),
    Setting("call_timeout", "--call-timeout", "MINT_CALL_TIMEOUT", parse_float),
    Setting("retries", "--retries", "MINT_RL_RETRIES", parse_int),
    Setting("retry_window", "--retry-window", "MINT_RL_RETRY_WINDOW", parse_float),
    Setting("retry_delay", "--retry-delay", "MINT_RL_RETRY_DELAY", parse_float),
    Setting("reward_workers", "--reward-workers", "MINT_RL_REWARD_WORKERS", parse_int),
    Setting("reward_timeout", "--reward-timeout", "MINT_RL_REWARD_TIMEOUT", parse_float),
    Setting("weak_sandbox", "--weak-sandbox", "MINT_RL_WEAK_SANDBOX", parse_bool),
    Setting("log_dir", "--log-dir", "MINT_RL_LOG_DIR", _text, "PATH"),
    Setting("log_samples", "--log-samples", "MINT_RL_LOG_SAMPLES", parse_int),
    Setting("wandb_project", "--wandb", "MINT_RL_WANDB", _text, "PROJECT"),
    Setting("fake_fault_rate", "--fake-fault-rate", None, parse_float),
    Setting("fake_latency", "--fake-latency", None, parse_float),
    Setting("fake_checkpoints", "--fake-checkpoints", "MINT_RL_FAKE_CHECKPOINTS", _text, "PATH"),
)
# fmt: on

BY_FIELD = {s.field: s for s in SETTINGS}
NAMES: dict[str, Collection[str]] = {"adapter": BUILT_IN, "loss": LOSSES, "scale_rewards": SCALES}
"""The names a setting takes, for "did you mean" after a mistyped one."""
ENVIRONMENT_ONLY = {"base_url": "MINT_BASE_URL", "api_key": "MINT_API_KEY"}
"""Settings read from the environment alone, by field name."""


class FromFile(dict[str, str]):
    """The environment, remembering which variables came from a `.env` file (and which)."""

    def __init__(self, from_file: Mapping[str, str], path: Path) -> None:
        super().__init__(from_file)
        self.path = path
        self._file_values = dict(from_file)

    def source(self, name: str) -> str:
        """How an error names the variable: `NAME`, or `NAME (from /path/.env)`."""
        if name in self._file_values and self.get(name) == self._file_values[name]:
            return f"{name} (from {self.path})"
        return name


def default_of(setting: Setting) -> Any:
    """The built-in default of a setting (None: decided elsewhere, e.g. by the task)."""
    if setting.field in FAKE_FIELDS:
        return getattr(FakeOptions(), setting.field)
    if setting.field in TASK_FIELDS:
        return getattr(TaskOptions(), setting.field)
    return DEFAULTS[setting.field]


def _read(
    flags: Mapping[str, str | None], env: Mapping[str, str], only: Collection[str] | None
) -> Iterable[tuple[Setting, Any, str]]:
    """Each given setting: the parsed and checked value, and where it came from."""
    for setting in SETTINGS:
        if only is not None and setting.field not in only:
            continue
        raw, source = flags.get(setting.field), setting.flag
        if raw is None and setting.env is not None:
            raw = env.get(setting.env)
            source = env.source(setting.env) if isinstance(env, FromFile) else setting.env
        if raw is None:
            continue
        try:
            value = setting.parse(raw)
        except ValueError:
            value = None
        if value is None or not setting.rule.check(value):
            got = setting.rule.quote(raw)
            guess = closest(raw.strip(), NAMES.get(setting.field, ()))
            maybe = f"; did you mean {guess}?" if guess else ""
            raise ConfigError(f"{source} must be {setting.requirement} (got {got}){maybe}")
        yield setting, value, source


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
    for setting, value, source in _read(flags, env, only):
        if setting.field in FAKE_FIELDS | TASK_FIELDS:
            continue
        (train if setting.trains else run)[setting.field] = value
        sources[setting.field] = source
    batch, group = train.get("batch", DEFAULTS["batch"]), train.get("group", DEFAULTS["group"])
    check_step_size(
        batch, group, sources.get("batch", "batch (default)"), sources.get("group", "group")
    )
    check_loss(train, lambda name: sources.get(name, BY_FIELD[name].flag))
    check_eval_k(
        train.get("eval_k", ()),
        train.get("eval_problems", DEFAULTS["eval_problems"]),
        lambda name: sources.get(name, BY_FIELD[name].flag),
    )
    return Config(train=TrainConfig(**train), **run)


def flag_values(flags: Mapping[str, str | None], only: Collection[str]) -> dict[str, Any]:
    """The flags given among `only`, by field: each parsed and checked alone, as flags only
    (no variable, no default, no check across settings)."""
    return {setting.field: value for setting, value, _ in _read(flags, {}, only)}


def given_values(
    flags: Mapping[str, str | None], env: Mapping[str, str], only: Collection[str]
) -> dict[str, tuple[Any, str]]:
    """The settings among `only` given by a flag or a variable, by field: each value parsed and
    checked alone, and where it came from as a message names it (`--x`, or `NAME`)."""
    return {setting.field: (value, source) for setting, value, source in _read(flags, env, only)}


def fake_options(
    flags: Mapping[str, str | None], backend: str, env: Mapping[str, str] | None = None
) -> FakeOptions:
    """The fake's knobs from their flags (and variables); a flag refused with another backend."""
    read = list(_read(flags, env or {}, FAKE_FIELDS))
    flagged = sorted(s.flag for s, _, source in read if source == s.flag)
    if flagged and backend != "fake":
        raise ConfigError(
            f"{listed(flagged, 'and')} {'work' if len(flagged) > 1 else 'works'} only with "
            f"--backend fake (got --backend {backend})"
        )
    return FakeOptions(**{s.field: value for s, value, _ in read})


def task_options(flags: Mapping[str, str | None], env: Mapping[str, str]) -> TaskOptions:
    """What the command line asks of the task, from the flags and the variables."""
    return TaskOptions(**{s.field: value for s, value, _ in _read(flags, env, TASK_FIELDS)})


def wording(settings: Iterable[str]) -> str:
    """Settings named by field, as the command line spells them: `MINT_X, --x`."""
    names = []
    for field in settings:
        setting = BY_FIELD.get(field)
        if setting is None:
            names.append(ENVIRONMENT_ONLY.get(field, field))
        else:
            names.append(f"{setting.env}, {setting.flag}" if setting.env else setting.flag)
    return ", ".join(names)


def worded(exc: BackendError) -> str:
    """A library error's message, with the settings it names spelled as flags and variables."""
    return f"{exc} ({wording(exc.settings)})" if exc.settings else str(exc)


def advised(message: str, flags: Mapping[str, str] | None = None) -> str:
    """A warning, with the settings it names (`report.Advice`) spelled as the command line
    does; `flags` spells a command's own flag for a field (`eval`'s `--problems`)."""
    settings: tuple[str, ...] = getattr(message, "settings", ())
    if not settings:
        return str(message)
    own = flags or {}
    named = [own[f] if f in own else wording([f]) for f in settings]
    return f"{message} ({', '.join(named)})"


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
        port = url.rsplit(":", 1)[-1].split("/", 1)[0]
        raise ConfigError(
            f"MINT_BASE_URL's port must be a number from 1 to 65,535 (got {shown(port)} in "
            f"{shown(url)})"
        ) from None
    if not (ok and url.isprintable() and not any(c.isspace() for c in url)):
        raise ConfigError(
            f"MINT_BASE_URL must be an http:// or https:// URL with a host, such as "
            f"{DEFAULT_BASE_URL} (got {shown(url)})"
        )
    return url
