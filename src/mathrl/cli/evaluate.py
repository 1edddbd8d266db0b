"""`python -m mathrl eval`: pass@k, maj@k, mean reward and greedy accuracy of any weights.

For: measuring weights on a task's held-out problems, on MinT or on the
fake: the base model (no path), a run folder (its latest weights, with its
task and settings), or a checkpoint path a run printed as `Saved:`. Each
problem gets one request for n samples at the temperature and one greedy
request, all in flight at once, so the evaluation costs one round of
requests (`mathrl.evaluation.evaluate`). It prints a table on stdout and,
given a run folder, appends the result to the folder's eval.jsonl
(`mathrl.cli.records.eval_file_record`). Not for: training-time
evaluations (`TrainConfig.eval_every`, `eval_k`), which ride along with the
next step's requests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mathrl.adapter import NoReference
from mathrl.backend import BackendError, Sampler, Tokenizer
from mathrl.checkpoints import step_of_checkpoint, task_of_checkpoint
from mathrl.cli.data import fake_tokenizer, prepared, refused_by_the_fake, same_data, say_line
from mathrl.cli.loader import load_recorded_task, load_task
from mathrl.cli.parsers import BACKENDS, SAMPLE_FIELDS
from mathrl.cli.records import eval_file_record
from mathrl.cli.run_folder import (
    CONFIG,
    EVALS,
    RunFolder,
    RunFolderError,
    RunRecord,
    no_such_weights,
    read_run,
)
from mathrl.cli.settings import (
    BY_FIELD,
    advised,
    api_key,
    base_url,
    build_config,
    parse_count,
    task_options,
)
from mathrl.cli.task_args import given_task_args
from mathrl.cli.train import model_line, retry_policy
from mathrl.config import MAX_COMPLETIONS_PER_STEP, Config, ConfigError
from mathrl.evaluation import distinct, evaluate, evaluation_set
from mathrl.passk import MAX_SAMPLES
from mathrl.report import EvalMetrics
from mathrl.resolved import Task
from mathrl.service.retry import Retrier, RetryingSampler
from mathrl.text import shown
from mathrl.workers import Workers

RECORDED = ("adapter", "seed", "max_tokens", "base_model")
"""The settings a run folder gives an evaluation of its weights, unless their flags do."""


@dataclass(frozen=True, slots=True)
class EvalPlan:
    """What to evaluate, on which problems, and how many samples of each."""

    config: Config
    task: Task[Any]
    weights: str | None
    """The sampler checkpoint's path; None: the base model (`config.base_model`)."""
    step: int | None
    """The step the weights are from, when known (a run folder's, or the checkpoint's name)."""
    count: int
    """How many held-out problems were asked for (`--problems`)."""
    ks: tuple[int, ...]
    samples: int
    folder: Path | None = None
    """The run folder given, whose eval.jsonl the result goes into."""
    fake_checkpoints: str | None = None
    """The run's folder of fake checkpoint files (a fake run's)."""
    record: RunRecord | None = None
    """The run folder given, read."""

    def problems(self) -> tuple[list[Any], list[str]]:
        """The held-out problems, each once, and notes on them: for a run folder's weights,
        none its run trained on. Drawn once the task is prepared (its data checked)."""
        problems, warnings = _problems(self.task, self.config, self.record, self.count)
        problems, note = distinct(self.task, problems)
        return problems, [*warnings, *filter(None, [note])]


def plan_eval(
    args: Any, flags: Mapping[str, str | None], env: Mapping[str, str], count: int
) -> EvalPlan:
    """The evaluation `python -m mathrl eval` was asked for; ConfigError (one line) if it
    cannot be made."""
    ks = _ks(args.k)
    samples = max(ks) if args.samples is None else _samples(args.samples)
    if max(ks) > samples:
        raise ConfigError(
            f"--k must be at most --samples, the samples drawn per problem (got k={max(ks)} "
            f"and --samples {samples})"
        )
    if count * samples > MAX_COMPLETIONS_PER_STEP:
        raise ConfigError(
            f"--problems x --samples must be at most {MAX_COMPLETIONS_PER_STEP:,} samples "
            f"(got {count:,} x {samples} = {count * samples:,})"
        )
    record = _run_folder(args.model_path)
    given = dict(flags)
    settings: dict[str, Any] = record.config["settings"] if record else {}
    for field in RECORDED:  # the run's settings, unless flags say otherwise
        if given.get(field) is None and settings.get(field) is not None:
            given[field] = str(settings[field])
    recorded_backend = settings.get("backend")
    backend = args.backend or (recorded_backend if recorded_backend in BACKENDS else "mint")
    fields = [*SAMPLE_FIELDS, *(["temperature"] if args.temperature is not None else [])]
    config = build_config({**given, "temperature": args.temperature}, env, fields, backend=backend)
    source = "--adapter" if flags.get("adapter") or not record else f"{record.path / CONFIG}"
    options, given_args = task_options(flags, env), given_task_args(args.task_arg)
    if record is not None and not flags.get("adapter"):
        recorded_args = settings.get("task_args") or {}
        where = f"--model-path {record.path}"
        task = load_recorded_task(config.adapter, source, recorded_args, given_args, where, options)
    else:
        task = load_task(config.adapter, source=source, options=options, task_args=given_args)
    if record is not None and not flags.get("adapter"):
        otherwise = (
            "to evaluate the run on its own data, or give --adapter and its --task-arg options"
        )
        same_data(record, task, f"--model-path {record.path}", otherwise)
    weights, step = _weights(args.model_path, record, task)
    return EvalPlan(
        config, task, weights, step, count, ks, samples,
        record.path if record else None,
        settings.get("fake_checkpoints") if record else None,
        record,
    )  # fmt: skip


def _ks(raw: str) -> tuple[int, ...]:
    setting = BY_FIELD["eval_k"]  # the same list as training's --eval-k
    try:
        ks: tuple[int, ...] = setting.parse(raw)
    except ValueError:
        ks = ()
    if not (ks and setting.rule.check(ks)):
        raise ConfigError(f"--k must be {setting.requirement} (got {shown(raw)})")
    return ks


def _samples(raw: str) -> int:
    return parse_count("--samples", raw, MAX_SAMPLES)


def _run_folder(model_path: str | None) -> RunRecord | None:
    """The run folder `model_path` names, read; None if it names none."""
    if model_path is None:
        return None
    if not model_path.strip():
        raise ConfigError(
            "--model-path must be a run folder or the path a run printed as `Saved:` (got ''); "
            "leave it out to evaluate the base model"
        )
    missing = no_such_weights(model_path)
    if missing is not None:  # before any key is asked for: a mistyped path needs none
        raise ConfigError(missing)
    try:
        if not (Path(model_path) / CONFIG).is_file():
            return None
    except OSError:  # a name too long to be a folder, say: a checkpoint path, or nothing
        return None
    try:
        return read_run(Path(model_path))
    except RunFolderError as exc:
        raise ConfigError(f"--model-path: {exc}") from None


def _weights(
    model_path: str | None, record: RunRecord | None, task: Task[Any]
) -> tuple[str | None, int | None]:
    """The checkpoint to evaluate and its step: a run folder's latest sampler, or the path."""
    if record is None:
        trained = task_of_checkpoint(model_path) if model_path is not None else None
        _same_task(task, trained, model_path or "")
        return model_path, step_of_checkpoint(model_path) if model_path is not None else None
    if record.config.get("task") != task.name:
        raise ConfigError(
            f"--adapter {task.identity} is task {task.name!r}, but the run folder {record.path} "
            f"trained task {record.config.get('task')!r}: leave --adapter out"
        )
    samplers = [c for c in record.checkpoints if c.get("kind") == "sampler"]
    if not samplers:
        raise ConfigError(
            f"--model-path: the run folder {record.path} records no sampler checkpoint"
        )
    return str(samplers[-1]["path"]), int(samplers[-1]["step"])


def _problems(
    task: Task[Any], config: Config, record: RunRecord | None, count: int
) -> tuple[list[Any], list[str]]:
    """The held-out problems: for a run folder's weights, none its run trained on."""
    if record is None:
        return task.heldout(config.train.seed, count), []
    try:
        trained = record.train_config()
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"--model-path: {record.path / CONFIG} holds unusable settings ({exc})"
        ) from None
    asked = replace(trained, seed=config.train.seed, eval_problems=count)
    return evaluation_set(task, asked, repeats=False)  # (left out by `distinct`, and said)


def _same_task(task: Task[Any], trained: object, path: str) -> None:
    if isinstance(trained, str) and trained != task.name:
        raise ConfigError(
            f"--model-path {shown(path, 60)} holds weights trained on task {trained!r}, "
            f"not on task {task.name!r} (--adapter {task.identity}): pass the matching --adapter"
        )


async def evaluate_weights(
    plan: EvalPlan, env: Mapping[str, str], say: Callable[[str], None]
) -> int:
    """Sample, score and print the table; append it to the run folder's eval.jsonl if given one.
    Returns the exit code."""
    config, task = plan.config, plan.task
    tokenizer, sampler, problems = await _open(plan, env, say)
    print(model_line(config, tokenizer.vocab_size), flush=True)
    started = time.monotonic()
    with Workers(config.reward_workers, config.reward_timeout) as workers:
        result = await evaluate(
            tokenizer, sampler, task, config.train, problems,
            workers=workers, samples=plan.samples,
        )  # fmt: skip
    seconds = time.monotonic() - started
    weights = plan.weights or f"base model {config.base_model}"
    metrics = result.metrics(plan.step or 0, weights, seconds, plan.ks)
    for line in table(metrics, plan.weights, plan.step, config):
        print(line, flush=True)
    if plan.folder is not None:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        temperature, seed = config.train.temperature, config.train.seed
        RunFolder(plan.folder).append(
            EVALS, eval_file_record(metrics, task.name, temperature, seed, at)
        )
        say(f"appended to {plan.folder / EVALS}")
    return 0


def table(m: EvalMetrics, weights: str | None, step: int | None, config: Config) -> list[str]:
    """What `eval` prints: which weights, on what, then one metric a line."""
    which = f"the base model {config.base_model}" if weights is None else weights
    at = f" (step {step})" if step is not None else ""
    rows = [
        *((f"pass@{k}", f"{value:.1%}") for k, value in m.pass_at_k.items()),
        *((f"maj@{k}", f"{value:.1%}") for k, value in m.majority_at_k.items()),
        ("mean reward", f"{m.sampled_mean_reward or 0.0:.3g}"),
        ("greedy accuracy", f"{m.accuracy:.1%} ({m.correct}/{m.problems})"),
    ]
    width = max(len(name) for name, _ in rows)
    return [
        f"Weights: {which}{at}",
        f"Problems: {m.problems} held-out (seed {config.train.seed}), {m.samples} "
        f"sample{'s' * (m.samples != 1)} each "
        f"at temperature {config.train.temperature:g}, and one greedy",
        *(f"{name:<{width}}  {value}" for name, value in rows),
    ]


async def _open(
    plan: EvalPlan, env: Mapping[str, str], say: Callable[[str], None]
) -> tuple[Tokenizer, Sampler, list[Any]]:
    """The tokenizer, the weights' sampler and the problems (drawn once the task's data is
    checked on the tokenizer: the fake's is known before the fake is made, which must know
    them)."""
    config, task = plan.config, plan.task
    max_tokens = config.train.max_tokens or task.max_tokens

    def problems() -> list[Any]:
        drawn, notes = plan.problems()
        for note in notes:
            say(advised(note, {"eval_problems": "--problems"}))
        return drawn

    if config.backend == "fake":
        say_line(prepared(task, fake_tokenizer(), max_tokens), say)
        drawn = problems()
        return (*await _fake_sampler(plan, drawn), drawn)
    tokenizer, sampler = await _mint_sampler(plan, env, say)
    say_line(prepared(task, tokenizer, max_tokens), say)
    return tokenizer, sampler, problems()


async def _mint_sampler(
    plan: EvalPlan, env: Mapping[str, str], say: Callable[[str], None]
) -> tuple[Tokenizer, Sampler]:
    config = plan.config
    endpoint_key, endpoint_url = api_key(env), base_url(env)
    if plan.weights is not None and not plan.weights.startswith("tinker://"):
        raise ConfigError(
            f"--model-path must be a run folder or a tinker:// path a run printed as `Saved:` "
            f"(got {shown(plan.weights, 200)})"
        )
    from mathrl.service.mint_backend import Endpoint, open_sampler

    endpoint = Endpoint(endpoint_key, endpoint_url)
    tokenizer, sampler = await open_sampler(config, endpoint, plan.weights)
    return tokenizer, RetryingSampler(sampler, Retrier(retry_policy(config), say))


async def _fake_sampler(plan: EvalPlan, problems: list[Any]) -> tuple[Tokenizer, Sampler]:
    """The fake's sampler for the weights (the base model's: the fake's untrained ones)."""
    from mathrl_fakes import FakeBackend, FakeSampler

    folder = Path(plan.fake_checkpoints) if plan.fake_checkpoints else None
    try:
        backend = FakeBackend.for_problems(
            plan.task, problems, seed=plan.config.train.seed, checkpoint_dir=folder
        )
    except NoReference as exc:
        raise refused_by_the_fake(plan.task, exc, "evaluate") from None
    path = plan.weights
    if path is None:
        base = FakeSampler(backend, f"base/{plan.config.base_model}", backend.theta)
        return backend.tokenizer, base
    try:
        if os.path.isdir(path):
            raise BackendError(f"{path!r} is a folder")
        _same_task(plan.task, backend.read(path, "sampler").get("task"), path)
        sampler = await backend.create_sampler(path)
    except BackendError as exc:
        raise ConfigError(
            f"--model-path must be a run folder or a fake sampler checkpoint a run printed as "
            f"`Saved:` ({exc})"
        ) from None
    return backend.tokenizer, sampler
