"""`--wandb PROJECT`: a run's metrics mirrored to Weights & Biases, as they are recorded.

For: `mathrl.cli.train`, which adds a `WandbMirror` to a run's observers when
asked. wandb is an optional extra (`pip install '.[wandb]'` in a clone); only this
module imports it. W&B's own settings apply (`WANDB_MODE=offline` writes the
run under the run folder and needs no network or key). The W&B run's id comes
from the run folder, so a resumed run goes on in the same W&B run. Nothing
secret goes to W&B: its config is the run's settings, which hold no key. W&B failing
mid-run stops the mirror with one warning, never the training. Keys: `train/...` per
step and `eval/...` per evaluation; reward parts as `train/reward/NAME`, the task's
metrics as `train/metric/NAME` (and `eval/` alike).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mathrl.cli.extras import install_command
from mathrl.config import ConfigError
from mathrl.report import EvalMetrics, Observer, StepMetrics


def check_installed() -> None:
    """ConfigError unless wandb can be imported: say how to install it."""
    if importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            f"--wandb needs the wandb package (got none installed): "
            f"{install_command('wandb')}, or leave --wandb out"
        )


def run_id(folder: Path) -> str:
    """The W&B run id of the run in `folder`: the same for every resume of it, wherever the
    folder moves, and new for a new run made at the same path (its creation time differs)."""
    try:
        created = str(json.loads((folder / "config.json").read_text()).get("created", ""))
    except (OSError, ValueError, AttributeError):
        created = ""
    key = f"{folder.name}/{created}"
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


class WandbMirror(Observer):
    """Logs each step's and each evaluation's metrics to one W&B run."""

    def __init__(
        self,
        project: str,
        folder: Path,
        config: Mapping[str, Any],
        warn: Callable[[str], None],
    ) -> None:
        check_installed()
        import wandb

        self.warn = warn
        try:
            self.run = wandb.init(
                project=project,
                id=run_id(folder),
                resume="allow",
                name=folder.name,
                dir=str(folder),
                config=dict(config),
                settings=wandb.Settings(console="off", silent=True, init_timeout=60),
            )
        except Exception as exc:  # no key, no network: wandb says which
            raise ConfigError(
                f"--wandb could not start a W&B run in project {project!r} ({exc}); "
                "run `wandb login`, or set WANDB_MODE=offline"
            ) from None
        self.run.define_metric("train/step")
        self.run.define_metric("train/*", step_metric="train/step")
        self.run.define_metric("eval/step")
        self.run.define_metric("eval/*", step_metric="eval/step")

        self.live = True

    @property
    def where(self) -> str:
        """The run's page, or its folder when offline."""
        return str(self.run.dir if self.run.offline else self.run.url)  # offline: no URL to ask

    def _log(self, logged: Mapping[str, float]) -> None:
        if not self.live:
            return
        try:
            self.run.log(dict(logged))
        except Exception as exc:  # W&B's trouble is not the run's: keep training
            self.live = False
            self.warn(f"stopped mirroring to W&B ({type(exc).__name__}: {exc}); training goes on")

    def on_step(self, metrics: StepMetrics) -> None:
        logged = {
            "train/step": metrics.step,
            "train/accuracy": metrics.accuracy,
            "train/mean_reward": metrics.mean_reward,
            "train/datums": metrics.datums,
            "train/groups_kept": metrics.groups_kept,
            "train/sampled_tokens": metrics.sampled_tokens,
            "train/truncated": metrics.truncated,
            "train/groups": metrics.groups,
            "train/mean_abs_advantage": metrics.mean_abs_advantage,
            "train/seconds": metrics.seconds,
            "train/sampling_seconds": metrics.sampling_seconds,
            "train/training_seconds": metrics.training_seconds,
            **{f"train/reward/{name}": value for name, value in metrics.reward_parts.items()},
            **{f"train/metric/{name}": value for name, value in metrics.metrics.items()},
        }
        if metrics.loss is not None:
            logged["train/loss"] = metrics.loss
        if metrics.kl is not None:
            logged["train/kl"] = metrics.kl
        if metrics.approx_kl is not None:
            logged["train/approx_kl"] = metrics.approx_kl
        if metrics.entropy is not None:
            logged["train/entropy"] = metrics.entropy
        if "clipped:frac" in metrics.backend_metrics:
            logged["train/clipped_frac"] = metrics.backend_metrics["clipped:frac"]
        self._log(logged)

    def on_eval(self, metrics: EvalMetrics) -> None:
        self._log(
            {
                "eval/step": metrics.step,
                "eval/accuracy": metrics.accuracy,
                "eval/mean_reward": metrics.mean_reward,
                "eval/correct": metrics.correct,
                **{f"eval/reward/{name}": value for name, value in metrics.reward_parts.items()},
                **{f"eval/pass@{k}": value for k, value in metrics.pass_at_k.items()},
                **{f"eval/maj@{k}": value for k, value in metrics.majority_at_k.items()},
                **{f"eval/metric/{name}": value for name, value in metrics.metrics.items()},
            }
        )

    def close(self) -> None:
        try:
            self.run.finish()
        except Exception as exc:
            self.warn(f"W&B could not finish its run ({type(exc).__name__}: {exc})")
