"""Where `--resume RUN_DIR` goes on from: the run's last saved state, or `--from-step`'s.

For: `mathrl.cli.commands`, which plans a resumed run. The point is checked
before anything is printed or trimmed: on the fake backend, the files the
resumed run loads first (the state, and the samplers around it) must load,
or the command exits 2 naming the file, the last step whose files do, and
the command that goes on from there. (A cleaned temp folder once broke
every run folder this way, and its resume command failed the same way each
time.) MinT's checkpoints live on the service, which alone can say whether
they load. Not for: writing the run folder (`mathrl.cli.run_folder`).
"""

from __future__ import annotations

from pathlib import Path

from mathrl.backend import BackendError
from mathrl.checkpoints import Resume
from mathrl.cli.run_folder import CHECKPOINTS, RunRecord
from mathrl.cli.train import resume_command
from mathrl.config import ConfigError, TrainConfig
from mathrl.text import shown

FROM_STEP = "--from-step"


def resume_point_at(record: RunRecord, from_step: str | None) -> Resume | None:
    """The point `--from-step` names (None: the last saved state; 0: none, starting over),
    or the last one; ConfigError for a step whose state the run did not save."""
    if from_step is None:
        return record.resume_point()
    steps = record.state_steps()
    text = from_step.strip()
    step = int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else -1
    if step != 0 and step not in steps:
        saved = ", ".join(map(str, sorted({0, *steps})))
        raise ConfigError(
            f"{FROM_STEP} must be a step whose state {record.path / CHECKPOINTS} records, or 0 "
            f"to start over: {saved} (got {shown(from_step)})"
        )
    return record.resume_point(step) if step else None


def check_resume_point(
    record: RunRecord,
    point: Resume | None,
    train: TrainConfig,
    backend: str,
    steps: str | None = None,
) -> None:
    """ConfigError unless the fake's files at `point` load (see the module docstring). It
    names the file, and the last step whose files load, with the command that resumes from
    there (`steps`, the `--steps` given, goes with it); step 0 always does: it starts over."""
    if backend != "fake" or point is None:
        return
    problem = unloadable(point, train)
    if problem is None:
        return
    earlier = [s for s in record.state_steps() if 0 < s < point.step]
    good = next(
        (s for s in reversed(earlier) if unloadable(record.resume_point(s), train) is None), 0
    )
    command = f"{resume_command(record.path)} {FROM_STEP} {good}"
    command += f" --steps {steps.strip()}" if steps is not None else ""
    then = (
        f"the last step whose state can be loaded is {good}: resume from it with: {command}"
        if good
        else f"no earlier state can be loaded: start the run over with: {command}"
    )
    raise ConfigError(f"--resume: {record.path} cannot go on from step {point.step} ({problem}); "
                      f"{then}")  # fmt: skip


def unloadable(point: Resume | None, train: TrainConfig) -> str | None:
    """Why the fake cannot load a file the run resumed from `point` loads first, or None."""
    from mathrl_fakes import FakeBackend, FakeModel

    if point is None:
        return None
    files = [(point.state_path, "state"), (point.sampler_path, "sampler")]
    if train.max_steps_off_policy and point.lagged_sampler_path:
        files.append((point.lagged_sampler_path, "sampler"))
    if train.kl_coef and point.base_sampler_path:
        files.append((point.base_sampler_path, "sampler"))
    fake = FakeBackend(FakeModel({}))  # (its policy knows what its weights look like)
    for path, kind in files:
        try:
            if Path(path).is_dir():
                raise BackendError(f"{path!r} is a folder")
            fake.check_checkpoint(path, kind)
        except BackendError as exc:
            return str(exc)
        except OSError as exc:  # a name too long to be a file, say
            return f"cannot load the fake checkpoint {path!r} ({exc.strerror or exc})"
    return None
