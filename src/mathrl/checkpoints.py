"""Checkpoints: what a run's saves are called, whose they are, and where a run resumes from.

For: the loop, which names every save, and the command line, which prints the
names (`Saved: ...`), fingerprints run folders, and refuses to sample a
checkpoint with another task. Not for: where checkpoints are stored (the
backend decides) or what they hold.

A name reads `<task>-seed<seed>-<fingerprint>-<code>-step<N>` (sampler
weights) or `...-state<N>` (weights and optimizer state): the fingerprint of
the training settings and the task's data (`Adapter`'s `data`: a changed file
gives new names), the task's code version, and N zero-padded to 7 digits so
the names sort by step. The same task, data and training settings give the same names,
so a rerun or a resumed run prints the same `Saved:` line; runs that would
train differently never share a name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal, TypeVar

from mathrl.config import TrainConfig
from mathrl.losses import IMPORTANCE_SAMPLING
from mathrl.resolved import Task

P = TypeVar("P")
DEFAULT = (IMPORTANCE_SAMPLING.name, IMPORTANCE_SAMPLING.config())
Kind = Literal["sampler", "state"]

CHECKPOINT_NAME = re.compile(
    r"(?P<task>[A-Za-z0-9][A-Za-z0-9_.-]*)-seed[0-9]+-[0-9a-f]{8}(-[0-9a-f]{8})?-(step|state)"
    r"(?P<step>[0-9]+)"
)
"""A checkpoint name; names from before the code version (one hex segment) match too."""


def run_fingerprint(task: Task[P], config: TrainConfig) -> str:
    """8 hex digits that change with the task, its data and every setting the loop trains with.

    The base model and LoRA rank are the backend's, not the loop's: MinT scopes
    each checkpoint path by its training run, and the fake has one model. The
    task's code is `code_version`, apart.
    """
    max_tokens = config.max_tokens if config.max_tokens is not None else task.max_tokens
    # Where the adapter's class is defined, not the name it goes by (`task.identity`, a
    # built-in task's public name): so renaming how a task is shown renames no checkpoint.
    cls = type(task.adapter)
    settings: tuple[object, ...] = (
        task.name, f"{cls.__module__}:{cls.__qualname__}", task.stop, max_tokens,
        config.batch, config.group, config.lr, config.temperature, config.seed,
        config.max_steps_off_policy,
    )  # fmt: skip
    options = sorted(task.chat_template_options.items())
    if options or task.mask_truncated or config.mask_truncated:  # settings added later
        settings += (options, task.mask_truncated or config.mask_truncated)
    # The loss as the service gets it, every setting spelled out: a default given trains alike.
    loss = config.loss_fn
    algorithm = (
        (loss.name, loss.config()), config.scale_rewards, config.substeps, config.fill_batch,
        config.kl_coef,
    )  # fmt: skip
    if algorithm != (DEFAULT, "none", 1, False, 0.0):  # added later: only when changed
        settings += algorithm
    # A source of data stands in the options as its content's digest (`Adapter`'s `data`):
    # new data, new names; the same data under another path, the same.
    given = {k: f"data:{task.data[k]}" if k in task.data else v for k, v in task.options.items()}
    if given:  # added later: only when the task has any
        settings += (("options", sorted(given.items())),)
    data = {k: v for k, v in task.data.items() if k not in given}
    if data:
        settings += (("data", sorted(data.items())),)
    return hashlib.blake2b(repr(settings).encode(), digest_size=4).hexdigest()


def code_version(task: Task[P]) -> str:
    """8 hex digits of the task's `version` (by default a hash of its module's source).

    Part of every checkpoint name: editing a task gives its runs new names
    rather than overwriting the old ones.
    """
    return hashlib.blake2b(task.version.encode(), digest_size=4).hexdigest()


def run_name(task: Task[P], config: TrainConfig) -> str:
    """The prefix of a run's checkpoint names: task, seed, settings and code."""
    return f"{task.name}-seed{config.seed}-{run_fingerprint(task, config)}-{code_version(task)}"


def checkpoint_name(task: Task[P], config: TrainConfig, step: int, kind: Kind = "sampler") -> str:
    """The name of step `step`'s save (0: before training); it sorts by step."""
    label = "step" if kind == "sampler" else "state"
    return f"{run_name(task, config)}-{label}{step:07d}"


def task_of_checkpoint(path: str) -> str | None:
    """The task a checkpoint path was trained on, if its name is one of `checkpoint_name`'s."""
    match = _named(path)
    return match["task"] if match else None


def step_of_checkpoint(path: str) -> int | None:
    """The step whose update a checkpoint path holds, if its name is one of `checkpoint_name`'s."""
    match = _named(path)
    return int(match["step"]) if match else None


def _named(path: str) -> re.Match[str] | None:
    name = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")
    return CHECKPOINT_NAME.fullmatch(name)


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a run continues from: a saved state and the samplers around it."""

    step: int
    """The last step whose update the state holds."""
    state_path: str
    sampler_path: str
    """The latest sampler checkpoint at or before `step` (the current weights)."""
    lagged_sampler_path: str
    """The latest one at or before `step - 1`; off-policy step `step + 1` samples from it."""
    evaluate_first: bool = False
    """Evaluate the state's weights before going on: their evaluation was due, and lost."""
    base_sampler_path: str = ""
    """The step-0 sampler checkpoint: the base model's weights, for the KL penalty."""
