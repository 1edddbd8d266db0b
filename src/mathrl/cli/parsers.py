"""The command line's parsers: each command's flags, help and defaults.

For: `mathrl.cli.commands`, which parses with these and runs the command.
Every setting's flag, variable and help text come from `mathrl.cli.settings`,
so `--help` and the environment table never disagree with what is read.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from mathrl import __version__
from mathrl.cli.settings import SETTINGS, Setting, default_of, parse_bool
from mathrl.config import DEFAULT_BASE_URL, ConfigError, unset_meaning
from mathrl.losses import PARAMETERS, losses_taking
from mathrl.passk import MAX_SAMPLES
from mathrl.tasks import BUILT_IN
from mathrl.text import closest

BACKENDS = ("mint", "fake")
RELIABILITY = (
    "connect_timeout",
    "setup_timeout",
    "call_timeout",
    "retries",
    "retry_delay",
    "retry_window",
)
"""How long to wait and how often to retry: what any run against a service may change."""
TASK_WORK = ("reward_workers", "reward_timeout", "weak_sandbox")
"""Where, for how long and how isolated the task's own calls run: they change no reward."""
RESUMABLE = (
    *RELIABILITY,
    *TASK_WORK,
    "log_samples",
    "eval_k",
    "wandb_project",
    "fake_fault_rate",
    "fake_latency",
    "fake_checkpoints",
)
"""Settings a resumed run may change: none of them changes what is trained."""
SAMPLE_FIELDS = ("adapter", "seed", "max_tokens", "base_model", *RELIABILITY, *TASK_WORK)
"""The settings `sample` reads (and `--temperature`); the others cannot make it fail."""
MAX_PROBLEMS = 10_000


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a ConfigError, with the flag a mistyped one
    most likely meant."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}{self._guess(message)} (see `{self.prog} --help`)")

    def _guess(self, message: str) -> str:
        """ "; did you mean --steps?" for the first unknown flag in an "unrecognized arguments"
        message that is close to one this parser knows."""
        unknown = message.partition("unrecognized arguments: ")[2].split()
        flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
        for word in unknown:
            found = closest(word.partition("=")[0], flags) if word.startswith("-") else None
            if found is not None:
                return f"; did you mean {found}?"
        return ""


def shown_default(setting: Setting) -> object:
    """A setting's default as --help shows it; a loss setting's, each loss's that takes it."""
    parameter = next((p for p in PARAMETERS if p.field == setting.field), None)
    if parameter is not None:
        defaults = losses_taking(parameter)
        if len(defaults) == 1:
            return f"{next(iter(defaults.values())):g}"
        return "the loss's: " + ", ".join(f"{d:g} for {name}" for name, d in defaults.items())
    decided_later = unset_meaning(setting.owner, setting.field)
    if decided_later is not None:  # what None stands for, as its field says
        return decided_later
    value = default_of(setting)
    short = [name for name, (spec, _) in BUILT_IN.items() if spec == value]
    if setting.field == "adapter" and short:  # as the README and `tasks` name it
        return short[0]
    return str(value).lower() if isinstance(value, bool) else value


def _add_settings(
    parser: argparse.ArgumentParser, fields: Sequence[str], helps: Mapping[str, str] = {}
) -> None:
    """Add the settings' flags; `helps` words some of them for this command."""
    for s in SETTINGS:
        if s.field in fields:
            env = f", env {s.env}" if s.env else ""
            text = helps.get(s.field, s.help_text)
            switch: dict[str, Any] = (
                {"nargs": "?", "const": "true"} if s.parse is parse_bool else {}
            )
            parser.add_argument(
                s.flag,
                dest=s.field,
                metavar=s.kind,
                help=f"{text} (default {shown_default(s)}{env})",
                **switch,
            )


def _add_task_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task-arg",
        action="append",
        metavar="NAME=VALUE",
        help="an option of the task, repeatable (`python -m mathrl tasks` lists them); "
        "a resumed run, sample and eval take a run folder's own",
    )


def train_parser() -> Parser:
    variables = "\n".join(
        [f"  {s.env:<22} {s.flag:<24} default {shown_default(s)}" for s in SETTINGS if s.env]
        + [
            f"  {'MINT_API_KEY':<22} {'':<24} required by --backend mint",
            f"  {'MINT_BASE_URL':<22} {'':<24} default {DEFAULT_BASE_URL}",
        ]
    )
    parser = Parser(
        prog="python -m mathrl",
        description="Train a LoRA adapter with GRPO on a task (two-digit addition by default) "
        "through MinT. Other commands: `sample`, `eval`, `check-adapter`, `plot`, `tasks` "
        "(`python -m mathrl COMMAND --help`).",
        epilog="environment variables (a flag wins over its variable; `.env` is read too):\n"
        + variables,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_settings(parser, [s.field for s in SETTINGS])
    parser.add_argument(
        "--backend", choices=BACKENDS, help="mint (default): the real service; fake: offline"
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a stopped run from its last saved state, with its own settings",
    )
    parser.add_argument(
        "--from-step",
        metavar="STEP",
        help="with --resume: go on from this step's saved state instead of the last one (the "
        "records after it are dropped; 0 starts the run over)",
    )
    _add_task_args(parser)
    parser.add_argument("--version", action="version", version=f"mathrl {__version__}")
    return parser


def sample_parser() -> Parser:
    parser = Parser(
        prog="python -m mathrl sample",
        description="Sample greedy answers to a task's held-out problems from saved weights "
        "(a whole episode, turn by turn, for a task that plays episodes).",
    )
    parser.add_argument(
        "--model-path",
        required=True,
        metavar="PATH",
        help="the path a run printed as `Saved:`, or a run folder (its latest weights); a run "
        "folder, or the one recording the path (the one it is in, or one in runs/), gives the "
        "task, its options, the model and the backend",
    )
    parser.add_argument(
        "--problems",
        default="10",
        metavar="N",
        help=f"held-out problems to ask, 1 to {MAX_PROBLEMS} (default 10)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        help="mint (default; a run folder's own backend; fake for a file): weights saved on "
        "MinT; fake: a fake run's checkpoint file",
    )
    _add_settings(
        parser,
        SAMPLE_FIELDS,
        {
            "base_model": "the base model the weights were trained from (a run folder's own)",
            "seed": "seed of the held-out problems asked",
            "adapter": "the task the weights were trained on, as module:Class (a run folder's "
            "own task)",
        },
    )
    parser.add_argument(
        "--temperature", metavar="FLOAT", help="sampling temperature (default 0: greedy)"
    )
    _add_task_args(parser)
    return parser


def eval_parser() -> Parser:
    parser = Parser(
        prog="python -m mathrl eval",
        description="Measure weights on a task's held-out problems: pass@k from samples at "
        "--temperature, maj@k where the task names its answers, the samples' mean reward, "
        "and greedy accuracy; all requests go out at once. Given a run folder, it appends "
        "the result to the folder's eval.jsonl.",
    )
    parser.add_argument(
        "--model-path",
        metavar="PATH",
        help="a run folder (its latest weights, task and settings), the path a run printed "
        "as `Saved:`, or none: the base model",
    )
    parser.add_argument(
        "--k",
        default="1,4,16",
        metavar="K,K,...",
        help="the k of pass@k and maj@k, comma-separated (default 1,4,16)",
    )
    parser.add_argument(
        "--samples",
        metavar="N",
        help=f"samples per problem, from the largest k to {MAX_SAMPLES} (default the largest k)",
    )
    parser.add_argument(
        "--problems",
        default="100",
        metavar="N",
        help=f"held-out problems to ask, 1 to {MAX_PROBLEMS} (default 100)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        help="mint: weights on MinT; fake: a fake run's (default: the run folder's, else mint)",
    )
    _add_settings(
        parser,
        SAMPLE_FIELDS,
        {
            "base_model": "the base model, unless the run folder names it",
            "seed": "seed of the held-out problems and of the samples, unless the run "
            "folder gives it",
            "adapter": "the task, as module:Class, unless the run folder names it",
            "max_tokens": "most tokens per completion, unless the run folder gives it",
        },
    )
    parser.add_argument(
        "--temperature", metavar="FLOAT", help="temperature of the samples (default 1; greedy is 0)"
    )
    _add_task_args(parser)
    return parser


def check_parser() -> Parser:
    parser = Parser(
        prog="python -m mathrl check-adapter",
        description="Check a task against the Adapter contract (mathrl.testing.check_adapter).",
    )
    parser.add_argument(
        "adapter", metavar="TASK", help="the task to check: a built-in one's name, or module:Class"
    )
    parser.add_argument(
        "--learns", action="store_true", help="also train 20 steps on the fake backend"
    )
    _add_settings(parser, ["weak_sandbox"])
    _add_task_args(parser)
    return parser


def tasks_parser() -> Parser:
    return Parser(
        prog="python -m mathrl tasks",
        description="List the built-in tasks: each one's name for --adapter, and what it is.",
    )


def plot_parser() -> Parser:
    parser = Parser(
        prog="python -m mathrl plot",
        description="Draw the learning curves of one or more run folders into a PNG.",
    )
    parser.add_argument("runs", metavar="RUN_DIR", nargs="+", help="run folders to draw")
    parser.add_argument(
        "--out",
        metavar="FILE.png",
        help="the PNG to write (default RUN_DIR/plot.png; for several runs, the first one's "
        "RUN_DIR/compare.png)",
    )
    return parser
