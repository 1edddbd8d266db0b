"""One training run from the command line: backend, run folder, output lines, signals.

For: `python -m mathrl` and `python -m mathrl --resume RUN_DIR`. It opens the
backend (with retries and deadlines around it), writes the run folder,
prints the seed's lines on stdout, draws progress on stderr, and turns
Ctrl-C, SIGTERM, a closed stdout or a failed service into a clean stop with a
resumable state. Not for: parsing flags (`mathrl.cli.commands`) or the GRPO step
(`mathrl.loop`).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mathrl.adapter import NoReference
from mathrl.backend import Backend, BackendError, Tokenizer
from mathrl.checkpoints import Resume, run_fingerprint
from mathrl.cli.data import fake_tokenizer, prepared, refused_by_the_fake
from mathrl.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_SIGNAL, EXIT_STDOUT_CLOSED
from mathrl.cli.extras import as_installed
from mathrl.cli.loader import check_command, opt_in
from mathrl.cli.progress import ProgressBar
from mathrl.cli.run_folder import RunFolder, new_path
from mathrl.cli.settings import (
    BY_FIELD,
    FakeOptions,
    TaskOptions,
    advised,
    api_key,
    base_url,
    worded,
)
from mathrl.cli.wandb_mirror import WandbMirror
from mathrl.config import Config, ConfigError
from mathrl.loop import run_grpo_async
from mathrl.report import (
    Checkpoint,
    EvalMetrics,
    Observer,
    Observers,
    RunResult,
    StepMetrics,
    TemperedRatio,
)
from mathrl.resolved import Task
from mathrl.rewards import TaskError, ended_tokens, task_call
from mathrl.rollout import run_problems
from mathrl.service.hf_tokenizer import NoChatTemplate
from mathrl.service.recovery import RetryingBackend
from mathrl.service.retry import RetryPolicy
from mathrl.text import describe
from mathrl.workers import Workers


class Stdout:
    """stdout for the seed's lines; once it cannot be written, it stops the run quietly.

    A reader that went away (`| head`) is a broken pipe; a full disk or a
    closed descriptor is another error. Either way the run stops cleanly.
    """

    def __init__(self) -> None:
        self.error: OSError | None = None
        self.on_close: Callable[[], None] = lambda: None
        self.around: Callable[[Callable[[], None]], None] = lambda write: write()
        """How a write is made: the progress bar steps aside for it (`ProgressBar.above`)."""

    def line(self, text: str) -> None:
        if self.error is not None:
            return
        try:
            self.around(lambda: print(text, flush=True))
        except OSError as exc:
            self.error = exc
            # Point fd 1 at /dev/null, so the interpreter's final flush is quiet too.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            self.on_close()


class SeedLines(Observer):
    """The seed demo's stdout lines, eval lines, and advice on stderr."""

    def __init__(
        self,
        out: Stdout,
        say: Callable[[str], None],
        max_tokens: int = 0,
        reference_tokens: Callable[[int], int | None] = lambda step: None,
    ) -> None:
        """`max_tokens`: a completion's token limit; `reference_tokens(step)`: the most tokens
        a reference of that step's problems takes (None if unknown), asked only to explain
        a step that trained nothing while completions hit the limit."""
        self.out, self.say = out, say
        self.max_tokens, self.reference_tokens = max_tokens, reference_tokens

    def on_step(self, m: StepMetrics) -> None:
        self.out.line(f"Step {m.step}: accuracy={m.accuracy:.1%}, datums={m.datums}")
        if m.datums == 0 and m.accuracy == 1.0:
            self.say(
                f"step {m.step}: every completion was right, so there was nothing left to learn."
            )
        elif m.datums == 0:
            self.say(untrained_step_advice(m, self.max_tokens, self.reference_tokens))

    def on_eval(self, m: EvalMetrics) -> None:
        passes = "".join(f", pass@{k}={value:.1%}" for k, value in m.pass_at_k.items())
        self.out.line(
            f"Eval step {m.step}: accuracy={m.accuracy:.1%} ({m.correct}/{m.problems}){passes}"
        )

    def on_warning(self, message: str) -> None:
        self.say(advised(message))

    def on_tempered_ratio(self, note: TemperedRatio) -> None:
        self.say(tempered_ratio_note(note))


VARIED_GROUPS = (
    "Sample more varied groups: raise --group or --batch (MINT_RL_GROUP, MINT_RL_BATCH), "
    "--temperature (MINT_RL_TEMPERATURE) or --max-tokens (MINT_RL_MAX_TOKENS)."
)


def untrained_step_advice(
    m: StepMetrics, max_tokens: int, reference_tokens: Callable[[int], int | None]
) -> str:
    """What to change after a step whose groups all had equal rewards.

    When completions hit the token limit, it says how many, against what the
    reference takes: a limit below the reference's length is the likely cause.
    """
    groups = f"all {m.groups} groups" if m.groups != 1 else "its one group"
    said = f"step {m.step}: {groups} had equal rewards, so nothing was trained"
    if not m.truncated:
        return f"{said}. {VARIED_GROUPS}"
    completions = m.groups * m.group_size
    said += f": {m.truncated} of {completions} completions hit the token limit of {max_tokens}"
    needed = reference_tokens(m.step)
    if needed is None:
        return f"{said}. {VARIED_GROUPS}"
    if needed > max_tokens:
        return (
            f"{said}, and the reference takes {needed} tokens. Raise --max-tokens "
            f"(MINT_RL_MAX_TOKENS) to {needed} or more."
        )
    return f"{said}, though the reference takes only {needed}. {VARIED_GROUPS}"


def longest_reference(
    task: Task[Any], tokenizer: Tokenizer, seed: int, batch: int
) -> Callable[[int], int | None]:
    """`step -> the most tokens a reference of the step's problems takes`, ended as the task
    asks (an episode's first turn: `reference_turn`); None if the task fails to say."""

    def longest(step: int) -> int | None:
        try:
            problems = task.adapter.build_dataset(seed, step, batch)
            return max(
                ended_tokens(
                    tokenizer,
                    task.reference_turn(p, ()),
                    task.stop_for(task.adapter.make_prompt(p)),
                )
                for p in problems
            )
        # The task's own code, which may raise anything: the advice then goes without it.
        except Exception:
            return None

    return longest


def tempered_ratio_note(note: TemperedRatio) -> str:
    """The note on a loss that clips at a sampling temperature other than 1, in flags."""
    settings = ", ".join(f"{BY_FIELD[field].flag} {value:g}" for field, value in note.loss.settings)
    how_many = (
        f"at step {note.step} it bound {note.clipped:.1%} of the model's tokens"
        if note.clipped is not None
        else f"the backend did not say how many it bound at step {note.step}"
    )
    return (
        f"note: with --loss {note.loss.name} ({settings}) at --temperature {note.temperature:g}, "
        "the importance ratio is not 1 even on-policy (the sampler's logprobs are the tempered "
        "distribution's, the learner's are at temperature 1), so the clip acts on tokens the "
        f"policy itself sampled: {how_many}. Sample at --temperature 1 (MINT_RL_TEMPERATURE=1) "
        "for a ratio of 1 on-policy."
    )


class Latest(Observer):
    """The newest checkpoints, so a failed run can still say what it left behind."""

    def __init__(self, resume: Resume | None = None) -> None:
        self.sampler = resume.sampler_path if resume else ""
        self.state_step = resume.step if resume else -1

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        if checkpoint.kind == "sampler":
            self.sampler = checkpoint.path
        else:
            self.state_step = checkpoint.step


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run: the settings, the task, and where to continue from (if resuming)."""

    config: Config
    task: Task[Any]
    resume: Resume | None = None
    folder: RunFolder | None = None
    fake: FakeOptions = field(default_factory=FakeOptions)
    """The fake backend's knobs (only with `--backend fake`)."""
    task_options: TaskOptions = field(default_factory=TaskOptions)
    """What the command line asked of the task (the task was made with it), for the record."""
    preflight: str | None = None
    """The task's preflight line (what it relies on), for the run folder."""


def retry_policy(config: Config) -> RetryPolicy:
    return RetryPolicy(
        config.retries, config.call_timeout, config.retry_delay, window=config.retry_window
    )


async def open_backend(
    plan: Plan,
    env: Mapping[str, str],
    say: Callable[[str], None],
    waiting: Callable[[str], None] = lambda status: None,
    run_folder: Path = Path("."),
) -> RetryingBackend:
    """The run's backend, fake or MinT, wrapped in deadlines and retries.

    `waiting` hears what set-up waits on, and for how long at most; the fake
    keeps its checkpoints in `run_folder` unless told otherwise.
    """
    config = plan.config
    inner: Backend
    if config.backend == "fake":
        waiting("starting the fake backend")
        from mathrl_fakes import FakeBackend

        first_step = plan.resume.step + 1 if plan.resume else 1
        try:
            inner = FakeBackend.for_run(
                plan.task,
                run_problems(plan.task, config.train, first_step),
                latency=plan.fake.fake_latency,
                fault_rate=plan.fake.fake_fault_rate,
                checkpoint_dir=plan.fake.checkpoint_folder(run_folder),
            )
        except NoReference as exc:
            raise refused_by_the_fake(plan.task, exc, "train") from None
    else:
        from mathrl.service.mint_backend import Endpoint
        from mathrl.service.mint_backend import open_backend as open_mint

        endpoint = Endpoint(api_key(env), base_url(env))
        inner = await open_mint(config, endpoint, waiting=waiting)
    return RetryingBackend(inner, retry_policy(config), say)


def model_line(config: Config, vocab_size: int) -> str:
    suffix = ", Backend: fake" if config.backend == "fake" else ""
    return f"Model: {config.base_model}, Vocab: {vocab_size:,}{suffix}"


def resume_command(folder: Path) -> str:
    return f"python -m mathrl --resume {shlex.quote(str(folder))}"


async def train(
    plan: Plan, env: Mapping[str, str], version: str, say: Callable[[str], None]
) -> int:
    """Run (or resume) one training run; return the process exit code."""
    config, task = plan.config, plan.task
    out = Stdout()
    stop = asyncio.Event()
    received: list[int] = []
    loop = asyncio.get_running_loop()
    latest = Latest(plan.resume)
    where: list[Path] = [plan.folder.path] if plan.folder else []
    first = plan.resume.step if plan.resume else 0
    # Where the run folder is (or will be, once the backend is up): the fake saves in it.
    fingerprint = run_fingerprint(task, config.train)
    run_path = plan.folder.path if plan.folder else new_path(config.log_dir, task.name, fingerprint)
    progress = ProgressBar(config.train.steps, first, config.train.batch * config.train.group)
    # While the bar is up, a line for the user goes above it, never into its rows.
    speak = (lambda m: progress.say(f"mathrl: {as_installed(m)}")) if progress.active else say
    set_up: list[bool] = []
    max_tokens = config.train.max_tokens or task.max_tokens
    # The fake's tokenizer is known now: the task's data is checked before the fake learns it.
    data_line = prepared(task, fake_tokenizer(), max_tokens) if config.backend == "fake" else None

    def on_signal(signum: int) -> None:
        if received:  # the second one: abort at once, saying what can be resumed
            progress.close()  # os._exit skips every cleanup: the bar goes, the cursor shows
            say("aborted")
            if where and latest.state_step >= 0:
                say(
                    f"the last saved state is step {latest.state_step}; resume with: "
                    f"{resume_command(where[0])}"
                )
            os._exit(EXIT_SIGNAL[signal.Signals(received[0])])
        received.append(signum)
        stop.set()
        if set_up:  # (during set-up there is no step: the run ends at once, and says so)
            again = "Ctrl-C again" if signum == signal.SIGINT else "send it again"
            speak(f"stopping after the current step ({again} to abort)")

    for signum in EXIT_SIGNAL:
        loop.add_signal_handler(signum, on_signal, signum)
    out.on_close = stop.set
    try:
        with progress:
            out.around = progress.above
            opening = asyncio.ensure_future(
                open_backend(plan, env, speak, progress.setting_up, run_path)
            )
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({opening, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not opening.done():  # stopped during set-up: nothing to save, leave now
                opening.cancel()
                speak("stopped during set-up; nothing was trained")
                return EXIT_SIGNAL[signal.Signals(received[0])] if received else EXIT_FAILURE
            backend = opening.result()
            set_up.append(True)
            mirrors: list[WandbMirror] = []
            workers = Workers(config.reward_workers, config.reward_timeout)
            try:
                if config.backend != "fake":
                    data_line = prepared(task, backend.tokenizer, max_tokens)
                check_prompts(backend.tokenizer, task, config)
                # Only now: a run that cannot start leaves no folder behind.
                folder = plan.folder or RunFolder.create(
                    config, task.name, fingerprint, version,
                    {
                        **asdict(plan.fake), **asdict(plan.task_options),
                        "task_args": dict(task.options),
                    },
                    task.data,
                    run_path,
                )  # fmt: skip
                where[:] = [folder.path]
                if config.wandb_project is not None:  # before stdout: W&B may refuse to start
                    mirrors.append(_mirror(config.wandb_project, folder, plan, speak))
                for line in filter(None, [plan.preflight, data_line]):
                    folder.note_preflight(line)
                if data_line is not None:
                    speak(data_line)
                speak(f"run folder: {folder.path} (task {task.name})")
                if mirrors:
                    speak(f"mirroring metrics to W&B: {mirrors[0].where}")
                out.line(model_line(config, backend.tokenizer.vocab_size))
                references = longest_reference(
                    task, backend.tokenizer, config.train.seed, config.train.batch
                )
                lines = SeedLines(out, speak, max_tokens, references)
                observer = Observers(folder, latest, lines, progress, *mirrors)
                result = await run_grpo_async(
                    backend, task, config.train, observer,
                    resume=plan.resume, stop=stop, workers=workers,
                )  # fmt: skip
            except (BackendError, TaskError) as exc:
                if not where:  # it failed before the run folder was made
                    raise
                return _failed(exc, latest, where[0], out, speak)
            finally:
                workers.close()
                for mirror_ in mirrors:
                    mirror_.close()
                await backend.close()
    finally:
        for signum in EXIT_SIGNAL:
            loop.remove_signal_handler(signum)
    return _finished(result, folder.path, out, received, say)


def check_prompts(tokenizer: Tokenizer, task: Task[Any], config: Config) -> None:
    """ConfigError unless the model's tokenizer can render the task's prompts.

    A conversation needs the model's chat template, and a base model may have
    none: known once the tokenizer is in hand, so said before anything is saved.
    """
    seed = config.train.seed
    problems = task_call(task, "build_dataset", (seed, 1, 1), seed, 1, 1)
    prompts = [task_call(task, "make_prompt", p, p) for p in list(problems)[:1]]
    for prompt in prompts:
        if isinstance(prompt, str):  # text: any tokenizer encodes it
            continue
        try:
            tokenizer.render_chat(prompt, task.chat_template_options)
        except NoChatTemplate:
            problem = "has no chat template to render them"
        except Exception as exc:  # the template's own code refused the conversation
            problem = f"cannot render them ({type(exc).__name__}: {describe(exc)})"
        else:
            continue
        raise ConfigError(
            f"task {task.name!r} ({task.identity}) writes conversation prompts, but the base "
            f"model {config.base_model}'s tokenizer {problem}: choose a chat model "
            "(--base-model, MINT_BASE_MODEL), or a task with text prompts (--adapter)"
        )


def _mirror(
    project: str, folder: RunFolder, plan: Plan, speak: Callable[[str], None]
) -> WandbMirror:
    """The W&B mirror; if W&B refuses to start, a new run folder is removed again."""
    try:
        return WandbMirror(project, folder.path, asdict(plan.config), speak)
    except ConfigError as exc:
        if plan.folder is None:  # this run made it: leave nothing behind
            folder.discard()
            raise
        raise ConfigError(f"{exc}; then resume with: {resume_command(folder.path)}") from None


def _failed(
    exc: BackendError | TaskError,
    latest: Latest,
    folder: Path,
    out: Stdout,
    say: Callable[[str], None],
) -> int:
    if isinstance(exc, TaskError) and exc.late:
        say(f"error: {exc}; --reward-timeout sets how long a call may take")
    elif isinstance(exc, TaskError) and (flag := opt_in(exc.allowed_by)) is not None:
        say(f"error: {exc}; or run with what is there: {flag}")  # the machine's, not the task's
    elif isinstance(exc, TaskError):
        say(f"error: {exc}")
        say(f"check the task with: {check_command(exc.task_identity)}")
    else:
        say(f"error: {worded(exc)}")
    if latest.sampler:
        out.line(f"Saved: {latest.sampler}")
    if latest.state_step >= 0:
        resume = resume_command(folder)
        say(f"the last saved state is step {latest.state_step}; resume with: {resume}")
    else:
        say(f"no training state was saved; start the run over with: {resume_command(folder)}")
    return EXIT_FAILURE


def _finished(
    result: RunResult, folder: Path, out: Stdout, received: list[int], say: Callable[[str], None]
) -> int:
    out.line(f"Saved: {result.saved_path}")
    if not result.stopped:
        return EXIT_OK
    say(f"stopped after step {result.last_step}; resume with: {resume_command(folder)}")
    if received:
        return EXIT_SIGNAL[signal.Signals(received[0])]
    if out.error is not None and not isinstance(out.error, BrokenPipeError):
        say(f"error: stdout could not be written ({out.error.strerror or out.error})")
        return EXIT_FAILURE
    return EXIT_STDOUT_CLOSED
