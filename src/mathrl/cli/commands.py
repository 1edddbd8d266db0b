"""`python -m mathrl`: turn flags and the environment into a run, a sample, a check or a plot.

Commands: training (the default; `--resume RUN_DIR` continues one), `sample`,
`eval`, `check-adapter`, `tasks` and `plot`. Warnings, progress and advice go
to stderr; a training run's stdout carries exactly the seed demo's lines:

    Model: <base model>, Vocab: <size>    first; the fake adds ", Backend: fake"
    Eval step N: accuracy=XX.X% (k/M)     with --eval-every: greedy accuracy on M
                                          held-out problems after step N (0: before
                                          training), k the count it stands for
    Step N: accuracy=XX.X%, datums=D      one a step: the task's accuracy over the
                                          step's samples, at the sampling temperature
                                          as the seed reports it; D the completions
                                          trained on (of groups whose rewards differed;
                                          with --kl-coef, of every group)
    Saved: <path>                         last: the latest weights to sample from

Exit codes: 0 success; 1 the service or the run failed; 2 a user's mistake
(one line naming the setting, what it must be and what it got), a key the
service rejects, or an address that is not a MinT API; 130 and 143
a run stopped by SIGINT or SIGTERM; 141 a run stopped because stdout closed.
None of them prints a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from mathrl import __version__
from mathrl.adapter import Unavailable
from mathrl.backend import BackendError, CredentialsRejected, WrongEndpoint
from mathrl.cli.data import same_data
from mathrl.cli.exit_codes import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STDOUT_CLOSED,
    EXIT_USAGE,
)
from mathrl.cli.extras import as_installed, install_command
from mathrl.cli.loader import (
    CLI_KEYWORDS,
    TASK_KEYWORDS,
    check_command,
    load_recorded_task,
    load_task,
    opt_in,
    recorded_spec,
    task_target,
)
from mathrl.cli.parsers import (
    BACKENDS,
    MAX_PROBLEMS,
    RESUMABLE,
    SAMPLE_FIELDS,
    check_parser,
    eval_parser,
    plot_parser,
    sample_parser,
    tasks_parser,
    train_parser,
)
from mathrl.cli.resume import FROM_STEP, check_resume_point, resume_point_at
from mathrl.cli.run_folder import (
    CONFIG,
    METRICS,
    RunFolder,
    RunFolderError,
    check_new,
    read_run,
    run_holding,
    run_record,
    unwritable,
)
from mathrl.cli.settings import (
    BY_FIELD,
    FAKE_FIELDS,
    SETTINGS,
    FakeOptions,
    FromFile,
    api_key,
    base_url,
    build_config,
    fake_options,
    flag_values,
    given_values,
    parse_count,
    task_options,
    worded,
)
from mathrl.cli.task_args import described, given_task_args, task_options_of
from mathrl.cli.train import Plan, train
from mathrl.cli.wandb_mirror import check_installed
from mathrl.config import DEFAULTS, ConfigError, check_eval_k, unset_meaning
from mathrl.resolved import Task
from mathrl.rewards import TaskError
from mathrl.tasks import BUILT_IN
from mathrl.text import closest, listed, one_line, shown

COMMANDS = ("sample", "eval", "check-adapter", "plot", "tasks")
"""The commands besides training (which is none)."""


def _say(message: str) -> None:
    print(f"mathrl: {as_installed(message)}", file=sys.stderr, flush=True)


def environment() -> dict[str, str]:
    """os.environ, with `.env` from the working folder filling in what is unset.

    A value read from `.env` is named as such in an error (see `settings.FromFile`).
    """
    dotenv = Path.cwd() / ".env"
    if dotenv.exists() and not dotenv.is_file():
        raise ConfigError(f".env must be a file (got something else at {dotenv})")
    try:
        values = dotenv_values(dotenv)
    except UnicodeDecodeError as exc:
        bom = (
            "a UTF-16 byte-order mark"
            if exc.object[:2] in (b"\xff\xfe", b"\xfe\xff")
            else (f"byte {exc.object[exc.start]:#04x} at offset {exc.start}")
        )
        raise ConfigError(
            f".env must be UTF-8 text (got {bom} in {dotenv}): save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f".env must be a readable file (got {exc.strerror}: {dotenv})") from None
    merged = FromFile({k: v for k, v in values.items() if v is not None}, dotenv)
    merged.update(os.environ)
    return merged


def _flags(args: argparse.Namespace) -> dict[str, str | None]:
    return {s.field: getattr(args, s.field, None) for s in SETTINGS}


def _unavailable(exc: Unavailable) -> ConfigError:
    """A task's refusal to run here, and the setting that would run it anyway, if one would
    (the task option it names as `allowed_by`, as the command line spells it)."""
    flag = opt_in(getattr(exc, "allowed_by", None))
    return ConfigError(str(exc) if flag is None else f"{exc}; or run with what is there: {flag}")


def _preflight(task: Task[Any]) -> str | None:
    """The task's preflight line, said on stderr; a missing requirement is a ConfigError."""
    try:
        line = task.preflight()
    except Unavailable as exc:
        raise _unavailable(exc) from None
    if line is not None:
        _say(one_line(str(line), 500))
    return line


def _train_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    args = train_parser().parse_args(argv)
    _one_token_limit(args, env)
    if args.from_step is not None and args.resume is None:
        raise ConfigError(f"{FROM_STEP} goes only with --resume RUN_DIR (got no --resume)")
    if args.resume is not None:
        plan = _resume_plan(args, env)
        if plan is None:
            return EXIT_OK
    else:
        config = build_config(_flags(args), env, backend=args.backend or "mint")
        fake = fake_options(_flags(args), config.backend, env)
        options = task_options(_flags(args), env)
        given = given_task_args(args.task_arg)
        task = load_task(config.adapter, options=options, note=_say, task_args=given)
        # Recorded so that the run folder works from any folder (`--resume`, `eval`, `sample`).
        config = replace(config, adapter=recorded_spec(config.adapter))
        plan = Plan(config, task, fake=fake, task_options=options)
    if plan.config.backend == "mint":
        api_key(env)
        base_url(env)
    _check_folders(plan, new_run=args.resume is None)
    if plan.config.wandb_project is not None:
        check_installed()
    if plan.config.train.eval_k and not plan.config.train.eval_every:
        _say("--eval-k has no effect without evaluations: set --eval-every too")
    plan = replace(plan, preflight=_preflight(plan.task))
    return asyncio.run(train(plan, env, __version__, _say))


def _refuse_changes(
    values: Mapping[str, Any],
    recorded: Mapping[str, Any],
    given_with: str,
    record: str,
    why: str = "",
    otherwise: str = "",
) -> None:
    """ConfigError naming each of `values` (flags given, by field) that differs from the
    run's record, with both values: a flag that repeats what the record says changes nothing.

    `given_with` names the flag they came with, `record` the file; `why` says why the
    record wins, `otherwise` what else can be done.
    """
    flag = {**{s.field: s.flag for s in SETTINGS}, "backend": "--backend"}
    theirs = {field: recorded.get(field, DEFAULTS.get(field)) for field in values}
    changed = [field for field, value in values.items() if _spec(value) != _spec(theirs[field])]
    if changed:
        ours = ", ".join(f"{flag[f]} {_worded(values[f], f)}" for f in changed)
        kept = ", ".join(f"{flag[f]} {_worded(theirs[f], f)}" for f in changed)
        raise ConfigError(
            f"{ours} cannot be given with {given_with}: {record} records {kept}{why}; leave "
            f"{'them' if len(changed) > 1 else 'it'} out{otherwise}"
        )


def _spec(value: object) -> object:
    """A value as compared with the record: a built-in task's name is its module:Class, and a
    task's file or module in the working folder its absolute path (`recorded_spec`)."""
    if isinstance(value, str) and value in BUILT_IN:
        return BUILT_IN[value][0]
    return recorded_spec(value) if isinstance(value, str) else value


def _worded(value: object, field: str) -> str:
    if value is None:
        setting = BY_FIELD.get(field)
        meaning = unset_meaning(setting.owner, field) if setting is not None else None
        return f"unset ({meaning or 'the default'})"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _given_now(args: argparse.Namespace, env: Mapping[str, str]) -> set[str]:
    """The settings given to this command, by field: by a flag, or by a variable (or `.env`)."""
    return {
        s.field
        for s in SETTINGS
        if getattr(args, s.field, None) is not None or (s.env is not None and s.env in env)
    }


def _refuse_variables(
    args: argparse.Namespace, env: Mapping[str, str], recorded: Mapping[str, Any], folder: Path
) -> None:
    """ConfigError naming each variable (or `.env` line) that gives a training setting other
    than the run folder's record, as `_refuse_changes` does for flags: a resumed run trains as
    it started, and a setting given is never dropped silently. A flag beats its variable."""
    fixed = [
        s.field
        for s in SETTINGS
        if s.field not in RESUMABLE and getattr(args, s.field, None) is None
    ]
    given = given_values({}, env, fixed)  # flags: `_refuse_changes`
    changed = {
        field: (value, source)
        for field, (value, source) in given.items()
        if _spec(value) != _spec(recorded.get(field, DEFAULTS.get(field)))
    }
    if not changed:
        return
    ours = ", ".join(_as_given(value, source, field) for field, (value, source) in changed.items())
    kept = ", ".join(
        f"{BY_FIELD[f].flag} {_worded(recorded.get(f, DEFAULTS.get(f)), f)}" for f in changed
    )
    it = "them" if len(changed) > 1 else "it"
    steps = changed.get("steps", (0, ""))[0]
    extend = f" (--steps {steps} extends the run)" if steps > recorded.get("steps", 0) else ""
    raise ConfigError(
        f"{ours} cannot be given with --resume: {folder / CONFIG} records {kept}, and a resumed "
        f"run trains as it started; unset {it}, or give {kept}{extend}"
    )


def _one_token_limit(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """ConfigError when `--task-arg max_tokens=N` and `--max-tokens` (or its variable) are both
    given and differ. The task's option is its own default limit, which `--max-tokens`
    overrides; rather than keep one silently and record both, the command asks for one."""
    task_limit = given_task_args(args.task_arg).get("max_tokens")
    run_limit = given_values(_flags(args), env, ["max_tokens"]).get("max_tokens")
    if task_limit is None or run_limit is None:
        return
    value, source = run_limit
    if task_limit.strip() != str(value):
        raise ConfigError(
            f"--task-arg max_tokens={task_limit} and {_as_given(value, source, 'max_tokens')} "
            "both set the tokens per completion, and disagree: give one of them"
        )


def _as_given(value: object, source: str, field: str) -> str:
    """A setting as it was given: `--x 3`, `NAME=3` or `NAME=3 (from /x/.env)`."""
    if source.startswith("--"):
        return f"{source} {_worded(value, field)}"
    name, _, where = source.partition(" ")
    return f"{name}={_worded(value, field)}{' ' * bool(where)}{where}"


def _check_folders(plan: Plan, new_run: bool) -> None:
    """The folders the run writes in, tried before anything is printed or made."""
    if new_run:
        check_new(plan.config.log_dir)
    if plan.config.backend == "fake" and plan.fake.fake_checkpoints is not None:
        folder = Path(plan.fake.fake_checkpoints)  # (by default: in the run folder, tried above)
        why = unwritable(folder)
        if why is not None:
            raise ConfigError(
                f"the fake's checkpoint folder {folder} cannot be written ({why}); choose "
                "another with --fake-checkpoints or MINT_RL_FAKE_CHECKPOINTS"
            )


def _recorded_mirror(recorded: Mapping[str, Any]) -> str | None:
    """The run's W&B project, unless wandb is missing here: then a warning, and no mirror."""
    project = recorded.get("wandb_project")
    if project is not None:
        try:
            check_installed()
        except ConfigError:
            _say(f"not mirroring to W&B project {project!r}: wandb is not installed here")
            return None
    return str(project) if project is not None else None


def _resume_plan(args: argparse.Namespace, env: Mapping[str, str]) -> Plan | None:
    folder = Path(args.resume)
    try:
        record = read_run(folder)
        point = resume_point_at(record, args.from_step)
    except RunFolderError as exc:
        raise ConfigError(f"--resume: {exc}") from None
    recorded = record.config["settings"]
    fixed = [s.field for s in SETTINGS if s.field not in (*RESUMABLE, "steps")]  # steps: extends
    _refuse_changes(
        {**flag_values(_flags(args), fixed), **({"backend": args.backend} if args.backend else {})},
        recorded,
        "--resume",
        str(folder / CONFIG),
        why=", and a resumed run trains as it started",
        otherwise=", or start a new run",
    )
    _refuse_variables(args, env, recorded, folder)
    now = _given_now(args, env)
    reliability = build_config(_flags(args), env, only=RESUMABLE, backend=recorded.get("backend"))
    try:
        train = record.train_config()
        if args.steps is not None:  # more steps: the run goes on where it ended
            steps = build_config({"steps": args.steps}, {}, only=["steps"]).train.steps
            if steps < train.steps:
                raise ConfigError(
                    f"--steps with --resume must be at least the run's {train.steps} (got "
                    f"{steps}): it extends a run, and cannot shorten one"
                )
            train = replace(train, steps=steps)
        if "eval_k" in now:  # pass@k in this session's evaluations: trains the same
            eval_k = reliability.train.eval_k
            check_eval_k(
                eval_k, train.eval_problems,
                lambda name: "--eval-k" if name == "eval_k" else f"the run's {name}",
            )  # fmt: skip
            train = replace(train, eval_k=eval_k)
        config = replace(
            reliability,
            train=train,
            adapter=recorded["adapter"],
            base_model=recorded["base_model"],
            lora_rank=recorded["lora_rank"],
            log_dir=str(folder),
            log_samples=(
                reliability.log_samples
                if "log_samples" in now
                else recorded.get("log_samples", reliability.log_samples)
            ),
            # The W&B mirror carries over too: the resumed steps go on in the same W&B run.
            wandb_project=reliability.wandb_project or _recorded_mirror(recorded),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"--resume: {folder / 'config.json'} lacks a setting ({exc})") from None
    task = load_recorded_task(
        config.adapter,
        f"--resume ({folder / 'config.json'} adapter)",
        recorded.get("task_args") or {},
        given_task_args(args.task_arg),
        f"--resume ({folder / CONFIG})",
        options=task_options(_flags(args), env),  # as given now, like the reliability settings
        note=_say,
    )
    if task.name != record.config.get("task"):
        raise ConfigError(
            f"--resume: {config.adapter} is now task {task.name!r}, but the run trained "
            f"task {record.config.get('task')!r}"
        )
    same_data(record, task, "--resume", "to resume the run, or start a new one")
    check_resume_point(record, point, config.train, config.backend, args.steps)
    if point is not None and point.step >= config.train.steps:
        _say(f"{folder} already finished all {config.train.steps} steps; nothing to resume")
        print(f"Saved: {point.sampler_path}", flush=True)
        return None
    run_folder = RunFolder(folder, config.log_samples)
    trimmed = run_folder.truncate_after(point.step if point is not None else -1)
    if trimmed is not None:
        _say(trimmed)
    if config.train.steps != recorded.get("steps"):  # extended: later resumes go as far
        run_folder.write_config(
            {**record.config, "settings": {**recorded, "steps": config.train.steps}}
        )
    # The fake's knobs carry over from the run's record unless given again.
    given = fake_options(_flags(args), config.backend, env)
    fake = FakeOptions(
        **{
            name: getattr(given, name)
            if name in now
            else recorded.get(name, getattr(FakeOptions(), name))
            for name in FAKE_FIELDS
        }
    )
    if point is None:  # it failed before its first state (or --from-step 0): start over
        why = "it saved no training state" if args.from_step is None else f"{FROM_STEP} 0"
        _say(f"starting {folder} over: {why}")
    else:
        _say(f"resuming {folder} from step {point.step} (of {config.train.steps})")
        if config.train.eval_every and point.step not in {e["step"] for e in record.evals}:
            point = replace(point, evaluate_first=True)  # its evaluation was lost: make it
    return Plan(config, task, point, run_folder, fake)


def _check_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    from mathrl.testing import check_adapter

    args = check_parser().parse_args(argv)
    options = task_options(_flags(args), env)
    given = given_task_args(args.task_arg)
    task = load_task(args.adapter, "check-adapter", options, _say, given)
    try:
        summary = check_adapter(task, learns=args.learns)  # its summary has the preflight line
    except Unavailable as exc:
        raise _unavailable(exc) from None
    except AssertionError as exc:
        header, *violations = str(exc).splitlines()
        _say(header.rstrip(":"))
        for line in violations:
            print(line.removeprefix("- "), flush=True)
        return EXIT_FAILURE
    print(f"check-adapter: {summary}", flush=True)
    return EXIT_OK


def _tasks_command(argv: Sequence[str]) -> int:
    """Each built-in task, then its options: its own (`--task-arg`), and the command line's
    settings it takes (`--weak-sandbox`); wrapped to the terminal, each under its first word."""
    tasks_parser().parse_args(argv)
    columns = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
    width = max(map(len, BUILT_IN))
    for name, (spec, what) in BUILT_IN.items():
        _wrapped(f"{name:<{width}}  {what} ({spec})", width + 2, columns)
        options = task_options_of(task_target(spec, "tasks"))
        for line in described({k: v for k, v in options.items() if k not in CLI_KEYWORDS}):
            _wrapped(f"{'':<{width}}    --task-arg {line}", width + 8, columns)
        for field, keyword in TASK_KEYWORDS.items():
            if keyword in options:
                setting = BY_FIELD[field]
                line = f"{setting.flag} (or {setting.env}=1)  {setting.help_text}"
                _wrapped(f"{'':<{width}}    {line}", width + 8, columns)
    return EXIT_OK


def _wrapped(line: str, indent: int, columns: int) -> None:
    """Print `line` in rows of at most `columns`, the rows after the first indented."""
    rows = textwrap.wrap(line, columns, subsequent_indent=" " * indent, break_on_hyphens=False)
    print("\n".join(rows or [""]))


def _plot_command(argv: Sequence[str]) -> int:
    args = plot_parser().parse_args(argv)
    try:
        from mathrl.cli.plot import plot_runs
    except ImportError:
        raise ConfigError(
            f"plot needs matplotlib, which is not installed: {install_command('plot')}"
        ) from None
    try:
        records = [read_run(Path(run)) for run in args.runs]
    except RunFolderError as exc:
        raise ConfigError(f"plot: {exc}") from None
    for record in records:
        if not record.steps:  # a run stopped during set-up, or not yet past its first step
            raise ConfigError(
                f"plot: {record.path} records no training step yet ({METRICS} has none), so "
                "there is nothing to draw"
            )
    out = Path(args.out) if args.out else Path(args.runs[0]) / PLOT[len(args.runs) > 1]
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--out must be a .png file (got {shown(str(out))})")
    try:
        plot_runs(records, out)
    except OSError as exc:
        raise ConfigError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
    print(out, flush=True)
    return EXIT_OK


PLOT = {False: "plot.png", True: "compare.png"}
"""The PNG `plot` writes in the (first) run folder without --out: one run's, or a comparison."""


def _sample_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    from mathrl.cli.sample import sample

    args = sample_parser().parse_args(argv)
    _one_token_limit(args, env)
    count = _problem_count(args.problems)
    fields = [*SAMPLE_FIELDS, *(["temperature"] if args.temperature is not None else [])]
    flags = {**_flags(args), "temperature": args.temperature}
    backend = args.backend
    try:
        record = run_holding(args.model_path)
    except RunFolderError as exc:
        raise ConfigError(f"--model-path: {exc}") from None
    if record is None and backend is None and os.path.isfile(args.model_path):
        backend = "fake"  # a file: the fake's checkpoint (MinT's paths are tinker://)
    if record is not None:  # a run folder: what it recorded decides, and a flag must agree
        recorded = dict(record.config["settings"])
        if recorded.get("backend") not in BACKENDS:  # "python": made from Python, no backend
            recorded["backend"] = args.backend
        _refuse_changes(
            {
                **flag_values(flags, ("adapter", "base_model")),
                **({"backend": args.backend} if args.backend else {}),
            },
            recorded,
            f"--model-path {_given_path(args.model_path, record.path)}",
            f"the run folder's {CONFIG}",
        )
        flags.update(adapter=recorded.get("adapter"), base_model=recorded.get("base_model"))
        backend = recorded["backend"]
    config = build_config(flags, env, only=fields, backend=backend or "mint")
    if args.temperature is None:  # greedy unless asked: MINT_RL_TEMPERATURE is training's
        config = replace(config, train=replace(config.train, temperature=0.0))
    options, given = task_options(_flags(args), env), given_task_args(args.task_arg)
    if record is not None:
        recorded_args = record.config["settings"].get("task_args") or {}
        where = f"--model-path {_given_path(args.model_path, record.path)}"
        task = load_recorded_task(config.adapter, "--adapter", recorded_args, given, where,
                                  options, _say)  # fmt: skip
        otherwise = (
            "to sample the run on its own data, or give --adapter and its --task-arg options"
        )
        same_data(record, task, where, otherwise)
    else:
        task = load_task(config.adapter, options=options, note=_say, task_args=given)
    _preflight(task)
    return asyncio.run(sample(config, task, env, args.model_path, count, _say))


def _given_path(given: str, run: Path) -> str:
    """How a message names `--model-path`: the run folder, or the checkpoint given and the
    run folder that records it."""
    if run_record(given) is not None:
        return str(run)
    return f"{given} (recorded by the run folder {run})"


def _eval_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    from mathrl.cli.evaluate import evaluate_weights, plan_eval

    args = eval_parser().parse_args(argv)
    _one_token_limit(args, env)
    plan = plan_eval(args, _flags(args), env, _problem_count(args.problems))
    _preflight(plan.task)
    return asyncio.run(evaluate_weights(plan, env, _say))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    command, rest = (args[0], args[1:]) if args[:1] and not args[0].startswith("-") else ("", args)
    try:
        if command == "tasks":
            return _tasks_command(rest)
        if command == "plot":
            return _plot_command(rest)
        env = environment()
        if command == "check-adapter":
            return _check_command(rest, env)
        if command == "sample":
            return _sample_command(rest, env)
        if command == "eval":
            return _eval_command(rest, env)
        if command:
            guess = closest(command, COMMANDS)
            raise ConfigError(
                f"the command must be {listed(COMMANDS, 'or')}, or none to train (got "
                f"{shown(command)}){f'; did you mean {guess}?' if guess else ''}"
            )
        return _train_command(rest, env)
    except ConfigError as exc:
        _say(f"error: {one_line(str(exc), 500)}")
        return EXIT_USAGE
    except (CredentialsRejected, WrongEndpoint) as exc:  # the key or the URL given: fix it
        _say(f"error: {one_line(worded(exc), 500)}")
        return EXIT_USAGE
    except BackendError as exc:
        _say(f"error: {one_line(worded(exc), 500)}")
        return EXIT_FAILURE
    except TaskError as exc:  # outside a run: `sample`, say
        _say(f"error: {one_line(str(exc), 500)}")
        _say(f"check the task with: {check_command(exc.task_identity)}")
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
    return parse_count("--problems", raw, MAX_PROBLEMS)
