"""The run folder: what a training run leaves behind, and how it is read back.

For: the command line's record of each run (written as the run goes, so a
crash loses nothing already reported), `--resume`, and `plot`. Not for: the
weights themselves, which the backend stores (the records hold their paths).

A run folder holds:

- `config.json`: every setting, the task, the backend, the mathrl version,
  and the task's data (`data`: each source's content digest), which
  `--resume`, `eval` and `sample` compare with the data as it is now. Never
  the API key (no setting holds it).
- `metrics.jsonl`: one JSON object per line: one per training step, and one
  per held-out evaluation (marked `"eval": true`), each written and flushed
  as it ends.
- `checkpoints.jsonl`: one record per completed save: step, kind
  ("sampler" or "state") and path.
- `eval.jsonl`: one record per `python -m mathrl eval` of the run's weights:
  which weights, which step, the samples drawn, pass@k, maj@k, the mean
  reward and greedy accuracy.
- `samples.jsonl`: what the model wrote: for the first `log_samples` groups
  of each step (2 by default), the prompt, and each completion's text, how it
  ended, its reward and reward parts (and the task's metrics, if it reports
  any), its advantage and whether it was trained on. The file stops growing
  at SAMPLES_BYTES.

`mathrl.cli.records` says what each field of each record means.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from difflib import SequenceMatcher
from pathlib import Path
from typing import IO, Any

from mathrl.adapter import Adapter
from mathrl.checkpoints import Resume, run_fingerprint
from mathrl.cli.records import eval_record, sample_record, step_record
from mathrl.config import Config, ConfigError, TrainConfig
from mathrl.report import Checkpoint, EvalMetrics, Observer, SampleGroup, StepMetrics
from mathrl.resolved import Task, as_task
from mathrl.text import closest, listed, shown

CONFIG, METRICS, CHECKPOINTS = "config.json", "metrics.jsonl", "checkpoints.jsonl"
RUNS = Path("runs")
"""Where a run's folder goes unless `--log-dir` says otherwise (relative: the working folder)."""
SAMPLES, EVALS = "samples.jsonl", "eval.jsonl"
SAMPLES_BYTES = 20_000_000
"""samples.jsonl stops growing past this size."""


class RunFolderError(Exception):
    """The run folder cannot be written or read. The message names the path."""


def _version() -> str:
    from mathrl import __version__

    return __version__


class RunFolder(Observer):
    """An open run folder: records each step, evaluation and save as it happens."""

    def __init__(self, path: Path, log_samples: int = 2, made: Sequence[Path] = ()) -> None:
        self.path = path
        self.log_samples = log_samples
        """How many groups of each step go into samples.jsonl."""
        self._made = tuple(made)
        """The folders `create` made, outermost first: `discard` removes them again."""

    @classmethod
    def for_python(
        cls, path: str | Path, task: Adapter[Any] | Task[Any], config: TrainConfig
    ) -> RunFolder:
        """A run folder for a run made from Python: pass it to `run_grpo` as its observer.

        `path` must not hold a run already. `plot` draws it like any other.
        """
        resolved = as_task(task)
        settings = Config(train=config, adapter=resolved.identity, log_dir=str(path))
        fingerprint = run_fingerprint(resolved, config)
        return cls.create(
            settings, resolved.name, fingerprint, _version(), {"backend": "python"}, resolved.data
        )

    @classmethod
    def create(
        cls,
        config: Config,
        task_name: str,
        fingerprint: str,
        version: str,
        more_settings: Mapping[str, Any] | None = None,
        data: Mapping[str, str] | None = None,
        path: Path | None = None,
    ) -> RunFolder:
        """Make the folder (`path`, else `new_path`'s) and write config.json.

        `more_settings` are recorded beside the config's (the fake's knobs, say); `data` is
        the task's data, each source's digest by name (`Adapter`'s `data`).
        """
        now = datetime.now(UTC)
        check_new(config.log_dir)
        path = path or new_path(config.log_dir, task_name, fingerprint, now)
        made = [p for p in (path, *path.parents) if not p.exists()][::-1]
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"the run folder {path} cannot be created ({exc.strerror or exc}); "
                "choose another with --log-dir or MINT_RL_LOG_DIR"
            ) from None
        folder = cls(path, config.log_samples, made)
        settings = {
            **asdict(config.train),
            **{k: v for k, v in asdict(config).items() if k != "train"},
            **(more_settings or {}),
        }
        folder.write_config(
            {
                "mathrl_version": version,
                "task": task_name,
                "fingerprint": fingerprint,
                "created": now.isoformat(timespec="seconds"),
                "settings": settings,
                "data": dict(data or {}),
            }
        )
        return folder

    def discard(self) -> None:
        """Undo `create` for a run that did not start: the folder, if `create` made it (with
        what W&B may have left in it), else its config.json; then the empty folders above it
        that `create` made."""
        if not self._made:  # the folder was there before: only what create wrote goes
            (self.path / CONFIG).unlink(missing_ok=True)
            return
        shutil.rmtree(self.path, ignore_errors=True)
        for made in reversed(self._made[:-1]):
            with suppress(OSError):  # not empty: another run's folder is in it
                made.rmdir()

    def note_preflight(self, line: str) -> None:
        """Add the task's preflight line (what it relies on, e.g. the sandbox's layers) to
        config.json's `preflight` list, with the time: one entry per session of the run."""
        record = json.loads((self.path / CONFIG).read_text(encoding="utf-8"))
        entry = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "line": line}
        self.write_config({**record, "preflight": [*record.get("preflight", []), entry]})

    def write_config(self, record: Mapping[str, Any]) -> None:
        with self._writing(CONFIG, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")

    def append(self, name: str, record: Mapping[str, Any]) -> None:
        with self._writing(name, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @contextmanager
    def _writing(self, name: str, mode: str) -> Iterator[IO[str]]:
        target = self.path / name
        try:
            with target.open(mode, encoding="utf-8") as f:
                yield f
        except OSError as exc:
            raise RunFolderError(f"cannot write {target} ({exc.strerror or exc})") from None

    def on_step(self, metrics: StepMetrics) -> None:
        self.append(METRICS, step_record(metrics))

    def on_eval(self, metrics: EvalMetrics) -> None:
        self.append(METRICS, eval_record(metrics))

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.append(CHECKPOINTS, asdict(checkpoint))

    def on_samples(self, groups: Sequence[SampleGroup]) -> None:
        target = self.path / SAMPLES
        if not groups or self.log_samples == 0:
            return
        if target.exists() and target.stat().st_size > SAMPLES_BYTES:
            return
        for group in groups[: self.log_samples]:
            self.append(SAMPLES, sample_record(group))

    def truncate_after(self, step: int) -> str | None:
        """Drop records past `step`, which a resumed run is about to redo, and a last line cut
        off mid-write; return what went, as one line says it (None: nothing did)."""
        torn: list[str] = []
        later: dict[str, set[int]] = {}
        for name in (METRICS, CHECKPOINTS, SAMPLES):
            records = read_jsonl(self.path / name)
            cut = torn_line(self.path / name)
            if cut is not None:
                torn.append(f"{name}'s last line, cut off mid-write ({shown(cut, 30)})")
            if steps := {r["step"] for r in records if r["step"] > step}:
                later[name] = steps
            if cut is None and name not in later:
                continue
            with self._writing(name + ".tmp", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records if r["step"] <= step)
            (self.path / (name + ".tmp")).replace(self.path / name)
        if later:
            steps = set().union(*later.values())
            first, last = min(steps), max(steps)
            which = f"step {first}" if first == last else f"steps {first} to {last}"
            files = listed(later, "and")
            torn.append(f"the records of {which} in {files}, which the resumed run does again")
        return f"trimmed {self.path}: {'; '.join(torn)}" if torn else None


def check_new(log_dir: str | None) -> None:
    """ConfigError unless a new run's folder can go at `log_dir` (None: under `runs/`).

    Checked before a run starts, and again as the folder is made.
    """
    path = RUNS if log_dir is None else Path(log_dir)
    try:
        if log_dir is not None and path.exists() and not path.is_dir():
            raise ConfigError(f"--log-dir must be a folder (got a file: {path})")
        if log_dir is not None and ((path / METRICS).exists() or (path / CONFIG).exists()):
            raise ConfigError(
                f"--log-dir {path} already holds a run; choose another folder, or continue "
                f"that run with `python -m mathrl --resume {path}`"
            )
        why = unwritable(path)
    except OSError as exc:  # e.g. a name too long to look up
        why = exc.strerror or str(exc)
    if why is not None:
        raise ConfigError(
            f"the run folder {path} cannot be created ({why}); "
            "choose another with --log-dir or MINT_RL_LOG_DIR"
        )


def unwritable(folder: Path) -> str | None:
    """Why files cannot be made in `folder` (once it is made, if missing), or None.

    Tried, not guessed: a file is made in the nearest folder that exists and
    removed again. (`os.access` says yes to root even for /proc.)
    """
    try:
        existing = next(p for p in (folder, *folder.parents) if p.exists())
    except OSError as exc:  # e.g. a name too long
        return exc.strerror or str(exc)
    if not existing.is_dir():
        return f"{existing} is a file"
    try:
        handle, name = tempfile.mkstemp(dir=existing, prefix=".mathrl-can-write-")
    except OSError as exc:
        return f"cannot make a file in {existing}: {exc.strerror or exc}"
    os.close(handle)
    os.unlink(name)
    return None


def new_path(
    log_dir: str | None, task_name: str, fingerprint: str, now: datetime | None = None
) -> Path:
    """Where a new run's folder goes: `log_dir`, or a new folder under `runs/` named for the
    time (UTC), the task and the run's fingerprint. Known before the folder is made, so the
    fake backend can keep its checkpoints in it from the first save."""
    if log_dir is not None:
        return Path(log_dir)
    now = now or datetime.now(UTC)
    return _fresh(RUNS / f"{now:%Y%m%dT%H%M%SZ}-{task_name}-{fingerprint}")


def _fresh(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run folder, read back."""

    path: Path
    config: dict[str, Any]
    steps: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]

    def changed_data(self, task: Task[Any]) -> str | None:
        """What of the task's data differs from what this run recorded (`Adapter`'s `data`),
        in words naming the source; None if nothing does (or the run recorded no data)."""
        then = self.config.get("data")
        if not isinstance(then, dict):
            return None  # a run from before data was recorded: nothing to compare with
        now = dict(task.data)
        for name in sorted({*then, *now}):
            if then.get(name) == now.get(name):
                continue
            path = task.options.get(name, self.config["settings"].get("task_args", {}).get(name))
            source = f"{name} data {path}" if isinstance(path, str) and path else f"{name} data"
            if name not in now:
                return f"the run read {source}, which the task reads no more"
            if name not in then:
                return f"the task now reads {source}, which the run did not"
            return (
                f"{source} changed since the run read it (its content's digest was "
                f"{then[name]}, it is {now[name]} now)"
            )
        return None

    def train_config(self) -> TrainConfig:
        """The recorded training settings."""
        fields = TrainConfig.__dataclass_fields__
        return TrainConfig(**{k: v for k, v in self.config["settings"].items() if k in fields})

    def state_steps(self) -> list[int]:
        """The steps whose training state the run saved, in order."""
        return sorted({c["step"] for c in self.checkpoints if c["kind"] == "state"})

    def resume_point(self, until: int | None = None) -> Resume | None:
        """The last complete state record (at or before step `until`, if given) and the
        samplers around it; None if none was saved."""
        states = [
            c
            for c in self.checkpoints
            if c["kind"] == "state" and (until is None or c["step"] <= until)
        ]
        if not states:
            return None
        step = states[-1]["step"]
        samplers = [c for c in self.checkpoints if c["kind"] == "sampler"]
        at = [c["path"] for c in samplers if c["step"] <= step]
        before = [c["path"] for c in samplers if c["step"] <= step - 1] or at[:1]
        if not at:
            raise RunFolderError(f"{self.path / CHECKPOINTS} records no sampler checkpoint")
        base = [c["path"] for c in samplers if c["step"] == 0][:1]
        return Resume(
            step, states[-1]["path"], at[-1], before[-1], base_sampler_path=(base or [""])[0]
        )


def read_run(path: Path) -> RunRecord:
    """Read a run folder; RunFolderError (naming the file) if it is not one."""
    try:
        config = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunFolderError(f"{path} is not a run folder ({exc.strerror}: {CONFIG})") from None
    except ValueError:
        raise RunFolderError(f"{path / CONFIG} is not JSON") from None
    if not isinstance(config, dict) or not isinstance(config.get("settings"), dict):
        raise RunFolderError(f"{path / CONFIG} is not a mathrl run's config")
    metrics = read_jsonl(path / METRICS)
    return RunRecord(
        path,
        config,
        [r for r in metrics if not r.get("eval")],
        [r for r in metrics if r.get("eval")],
        read_jsonl(path / CHECKPOINTS),
    )


def run_record(path: str) -> RunRecord | None:
    """The run folder at `path`, read; None if `path` is not a folder with a config.json
    (a checkpoint's path, say). RunFolderError for a run folder that cannot be read."""
    folder = Path(path)
    try:
        if not (folder / CONFIG).is_file():
            return None
    except OSError:  # a name too long to be a folder, say: a checkpoint path, or nothing
        return None
    return read_run(folder)


def run_holding(path: str, runs: Path = RUNS) -> RunRecord | None:
    """The run folder at `path` (`run_record`); else the one above `path` that records it as
    a checkpoint (a `Saved:` path inside its run folder, where `--fake-checkpoints` can put
    them); else a run folder in `runs` (where runs go without `--log-dir`) that records
    `path` itself (a `tinker://` path, or the fake's file elsewhere); None if none does."""
    record = run_record(path)
    if record is not None:
        return record
    return _holding_above(path) or _recording(path, runs)


def _holding_above(path: str) -> RunRecord | None:
    try:
        checkpoint = Path(path).absolute()
        if not checkpoint.is_file():
            return None
    except OSError:  # a name too long to be a file, say
        return None
    for folder in checkpoint.parents:
        if not (folder / CONFIG).is_file():
            continue
        try:
            found = read_run(folder)
        except RunFolderError:  # another program's config.json
            continue
        if checkpoint.name in {Path(str(c.get("path"))).name for c in found.checkpoints}:
            return found
    return None


def _recording(path: str, runs: Path) -> RunRecord | None:
    """The first run folder in `runs`, by name, whose checkpoints.jsonl records `path`."""
    try:
        folders = sorted(config.parent for config in runs.glob(f"*/{CONFIG}"))
    except OSError:
        return None
    for folder in folders:
        try:
            if any(c.get("path") == path for c in read_jsonl(folder / CHECKPOINTS)):
                return read_run(folder)
        except RunFolderError:  # unreadable, or another program's: not the run looked for
            continue
    return None


NEARBY = 5
"""How many run folders a message about a missing `--model-path` names."""


def no_such_weights(path: str, runs: Path = RUNS) -> str | None:
    """Why `path`, a `--model-path`, names no weights, as the ConfigError says it; None if it
    may: a `tinker://` path is the service's to know, anything else a file or a folder here.

    A mistyped run folder is most often a letter off, so the message names the run
    folders nearby, the closest first: those beside the path, and those in `runs`.
    """
    try:
        if path.startswith("tinker://") or Path(path).exists():
            return None
        places = [p for p in dict.fromkeys([Path(path).parent, runs]) if p.is_dir()]
        found = [str(c.parent) for place in places for c in sorted(place.glob(f"*/{CONFIG}"))]
    except (OSError, ValueError):  # a name too long to be a file, say
        found = []
    said = f"--model-path {shown(path, 200)}: no such run folder or checkpoint file"
    if not found:
        return f"{said}; no run folder is beside it or in {runs}/"
    name = Path(path).name  # a run folder's name is what is mistyped, not where it is
    best = closest(name, [Path(f).name for f in found])
    similar = sorted(found, key=lambda f: -SequenceMatcher(None, name, Path(f).name).ratio())
    guess = next((f"; did you mean {f}?" for f in similar if Path(f).name == best), "")
    more = f" and {len(found) - NEARBY} more" if len(found) > NEARBY else ""
    return f"{said}{guess} (run folders: {', '.join(similar[:NEARBY])}{more})"


def torn_line(path: Path) -> str | None:
    """The last line of a .jsonl file if a crash cut it off mid-write (no newline after it,
    and not JSON), which `read_jsonl` skips; None if there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # missing, or read_jsonl says what is wrong
        return None
    last = text.rsplit("\n", 1)[-1]
    if not last.strip():
        return None
    try:
        json.loads(last)
    except ValueError:
        return last
    return None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a .jsonl file; a torn last line (a crash mid-write) is skipped."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"cannot read {path} ({exc})") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: the write never finished
                continue
            raise RunFolderError(f"{path} line {number} is not JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise RunFolderError(f"{path} line {number} is not a mathrl record")
        records.append(record)
    return records
