"""`python -m mathrl`: turn flags and the environment into a run, a sample, a check or a plot.

Commands: training (the default; `--resume RUN_DIR` continues one), `sample`,
`check-adapter` and `plot`. stdout carries exactly the seed demo's lines
(`Model: ...`, `Step N: ...`, `Saved: ...`; with `--eval-every`, also
`Eval step N: ...`). Warnings, progress and advice go to stderr.

Exit codes: 0 success; 1 the service or the run failed; 2 a user's mistake
(one line naming the setting, what it must be and what it got); 130 and 143
a run stopped by SIGINT or SIGTERM; 141 a run stopped because stdout closed.
None of them prints a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from dotenv import dotenv_values

from mathrl import __version__
from mathrl.backend import BackendError
from mathrl.cli.exit_codes import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STDOUT_CLOSED,
    EXIT_USAGE,
)
from mathrl.cli.loader import load_task
from mathrl.cli.run_folder import RunFolder, RunFolderError, read_run
from mathrl.cli.settings import (
    SETTINGS,
    Setting,
    api_key,
    base_url,
    build_config,
    default_of,
    fake_options,
    worded,
)
from mathrl.cli.train import Plan, train
from mathrl.config import DEFAULT_BASE_URL, ConfigError
from mathrl.text import one_line, shown

BACKENDS = ("mint", "fake")
RELIABILITY = ("connect_timeout", "setup_timeout", "call_timeout", "retries", "retry_delay")
"""How long to wait and how often to retry: what any run against a service may change."""
RESUMABLE = (*RELIABILITY, "fake_fault_rate", "fake_latency")
"""Settings a resumed run may change: none of them changes what is trained."""
SAMPLE_FIELDS = ("adapter", "seed", "max_tokens", "base_model", *RELIABILITY)
"""The settings `sample` reads (and `--temperature`); the others cannot make it fail."""
MAX_PROBLEMS = 10_000


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a ConfigError."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def _say(message: str) -> None:
    print(f"mathrl: {message}", file=sys.stderr, flush=True)


DEFAULTS_DECIDED_LATER = {
    "max_tokens": "the task's",
    "log_dir": "runs/<UTC time>-<task>-<fingerprint>",
}


def _default(setting: Setting) -> object:
    """A setting's default as --help shows it."""
    return DEFAULTS_DECIDED_LATER.get(setting.field, default_of(setting))


def _add_settings(parser: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    for s in SETTINGS:
        if s.field in fields:
            env = f", env {s.env}" if s.env else ""
            parser.add_argument(
                s.flag, dest=s.field, metavar="X", help=f"{s.help} (default {_default(s)}{env})"
            )


def _train_parser() -> _Parser:
    variables = "\n".join(
        [f"  {s.env:<22} {s.flag:<24} default {_default(s)}" for s in SETTINGS if s.env]
        + [
            f"  {'MINT_API_KEY':<22} {'':<24} required by --backend mint",
            f"  {'MINT_BASE_URL':<22} {'':<24} default {DEFAULT_BASE_URL}",
        ]
    )
    parser = _Parser(
        prog="python -m mathrl",
        description="Train a LoRA adapter with GRPO on a task (two-digit addition by default) "
        "through MinT. Other commands: `sample`, `check-adapter`, `plot` "
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
    return parser


def _sample_parser() -> _Parser:
    parser = _Parser(
        prog="python -m mathrl sample",
        description="Sample greedy answers to a task's held-out problems from saved weights.",
    )
    parser.add_argument("--model-path", required=True, help="the path a run printed as `Saved:`")
    parser.add_argument(
        "--problems",
        default="10",
        help=f"held-out problems to ask, 1 to {MAX_PROBLEMS} (default 10)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="mint")
    _add_settings(parser, SAMPLE_FIELDS)
    parser.add_argument(
        "--temperature", metavar="X", help="sampling temperature (default 0: greedy)"
    )
    return parser


def _check_parser() -> _Parser:
    parser = _Parser(
        prog="python -m mathrl check-adapter",
        description="Check a task against the Adapter contract (mathrl.testing.check_adapter).",
    )
    parser.add_argument("adapter", metavar="module:Class", help="the task to check")
    parser.add_argument(
        "--learns", action="store_true", help="also train 20 steps on the fake backend"
    )
    return parser


def _plot_parser() -> _Parser:
    parser = _Parser(
        prog="python -m mathrl plot",
        description="Draw the learning curves of one or more run folders into a PNG.",
    )
    parser.add_argument("runs", metavar="RUN_DIR", nargs="+", help="run folders to draw")
    parser.add_argument(
        "--out", help="the PNG to write (default RUN_DIR/plot.png; ./plot.png for several runs)"
    )
    return parser


def environment() -> dict[str, str]:
    """os.environ, with `.env` from the working folder filling in what is unset."""
    dotenv = Path.cwd() / ".env"
    if dotenv.exists() and not dotenv.is_file():
        raise ConfigError(f".env must be a file (got something else at {dotenv})")
    try:
        values = dotenv_values(dotenv)
    except UnicodeDecodeError as exc:
        raise ConfigError(f".env must be UTF-8 text (got byte {exc.object[exc.start]:#04x} "
                          f"at offset {exc.start} of {dotenv})") from None  # fmt: skip
    except OSError as exc:
        raise ConfigError(f".env must be a readable file (got {exc.strerror}: {dotenv})") from None
    merged = {k: v for k, v in values.items() if v is not None}
    merged.update(os.environ)
    return merged


def _flags(args: argparse.Namespace) -> dict[str, str | None]:
    return {s.field: getattr(args, s.field, None) for s in SETTINGS}


def _train_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    args = _train_parser().parse_args(argv)
    if args.resume is not None:
        plan = _resume_plan(args, env)
        if plan is None:
            return EXIT_OK
    else:
        config = build_config(_flags(args), env, backend=args.backend or "mint")
        fake = fake_options(_flags(args), config.backend)
        plan = Plan(config, load_task(config.adapter), fake=fake)
    if plan.config.backend == "mint":
        api_key(env)
        base_url(env)
    return asyncio.run(train(plan, env, __version__, _say))


def _resume_plan(args: argparse.Namespace, env: Mapping[str, str]) -> Plan | None:
    folder = Path(args.resume)
    try:
        record = read_run(folder)
        point = record.resume_point()
    except RunFolderError as exc:
        raise ConfigError(f"--resume: {exc}") from None
    changed = [
        s.flag for s in SETTINGS if getattr(args, s.field) is not None and s.field not in RESUMABLE
    ]
    if args.backend is not None:
        changed.append("--backend")
    if changed:
        raise ConfigError(
            f"{', '.join(changed)} cannot be given with --resume: it would change training, "
            f"whose settings come from {folder / 'config.json'}"
        )
    recorded = record.config["settings"]
    reliability = build_config(_flags(args), env, only=RESUMABLE, backend=recorded.get("backend"))
    try:
        config = replace(
            reliability,
            train=record.train_config(),
            adapter=recorded["adapter"],
            base_model=recorded["base_model"],
            lora_rank=recorded["lora_rank"],
            log_dir=str(folder),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"--resume: {folder / 'config.json'} lacks a setting ({exc})") from None
    task = load_task(config.adapter, source=f"--resume ({folder / 'config.json'} adapter)")
    if task.name != record.config.get("task"):
        raise ConfigError(
            f"--resume: {config.adapter} is now task {task.name!r}, but the run trained "
            f"task {record.config.get('task')!r}"
        )
    if point.step >= config.train.steps:
        _say(f"{folder} already finished all {config.train.steps} steps; nothing to resume")
        print(f"Saved: {point.sampler_path}", flush=True)
        return None
    run_folder = RunFolder(folder)
    run_folder.truncate_after(point.step)
    return Plan(config, task, point, run_folder, fake_options(_flags(args), config.backend))


def _check_command(argv: Sequence[str]) -> int:
    from mathrl.testing import check_adapter

    args = _check_parser().parse_args(argv)
    task = load_task(args.adapter, source="check-adapter")
    try:
        summary = check_adapter(task, learns=args.learns)
    except AssertionError as exc:
        header, *violations = str(exc).splitlines()
        _say(header.rstrip(":"))
        for line in violations:
            print(line.removeprefix("- "), flush=True)
        return EXIT_FAILURE
    print(f"check-adapter: {summary}", flush=True)
    return EXIT_OK


def _plot_command(argv: Sequence[str]) -> int:
    args = _plot_parser().parse_args(argv)
    try:
        from mathrl.cli.plot import plot_runs
    except ImportError:
        raise ConfigError(
            "plot needs matplotlib (got none installed): pip install 'mathrl[plot]'"
        ) from None
    try:
        records = [read_run(Path(run)) for run in args.runs]
    except RunFolderError as exc:
        raise ConfigError(f"plot: {exc}") from None
    default = Path(args.runs[0]) / "plot.png" if len(args.runs) == 1 else Path("plot.png")
    out = Path(args.out) if args.out else default
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--out must be a .png file (got {shown(str(out))})")
    try:
        plot_runs(records, out)
    except OSError as exc:
        raise ConfigError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
    print(out, flush=True)
    return EXIT_OK


def _sample_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    from mathrl.cli.sample import sample

    args = _sample_parser().parse_args(argv)
    count = _problem_count(args.problems)
    fields = [*SAMPLE_FIELDS, *(["temperature"] if args.temperature is not None else [])]
    flags = {**_flags(args), "temperature": args.temperature}
    config = build_config(flags, env, only=fields, backend=args.backend)
    if args.temperature is None:  # greedy unless asked: MINT_RL_TEMPERATURE is training's
        config = replace(config, train=replace(config.train, temperature=0.0))
    task = load_task(config.adapter)
    return asyncio.run(sample(config, task, env, args.model_path, count, _say))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    command, rest = (args[0], args[1:]) if args[:1] and not args[0].startswith("-") else ("", args)
    try:
        if command == "check-adapter":
            return _check_command(rest)
        if command == "plot":
            return _plot_command(rest)
        env = environment()
        if command == "sample":
            return _sample_command(rest, env)
        if command:
            raise ConfigError(
                f"the command must be sample, check-adapter or plot, or none to train "
                f"(got {shown(command)})"
            )
        return _train_command(rest, env)
    except ConfigError as exc:
        _say(f"error: {one_line(str(exc), 500)}")
        return EXIT_USAGE
    except BackendError as exc:
        _say(f"error: {one_line(worded(exc), 500)}")
        return EXIT_FAILURE
    except RunFolderError as exc:
        _say(f"error: {one_line(str(exc), 500)}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout's reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_STDOUT_CLOSED


def _problem_count(raw: str) -> int:
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else 0
    if not 1 <= value <= MAX_PROBLEMS:
        raise ConfigError(
            f"--problems must be an integer from 1 to {MAX_PROBLEMS} (got {shown(raw)})"
        )
    return value
