"""Learning curves of run folders, drawn with matplotlib into a PNG.

For: `python -m mathrl plot RUN_DIR... [--out FILE]`. Needs the optional
extra (`pip install '.[plot]'` in a clone); importing this module without
matplotlib raises ImportError, which the CLI turns into the install command.
Several runs in one call are overlaid, one colour each, to compare them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from mathrl.cli.records import METRIC
from mathrl.cli.run_folder import RunRecord
from mathrl.text import shown

KL_FLOOR = 1e-4
"""The approximate KL's axis reaches at least this high: a run whose sampler is the learner
(its KL 0 but for rounding) draws a flat line at 0, not noise magnified."""


def label_of(record: RunRecord, several: bool) -> str:
    """The legend label (several runs) or title (one run): task, base model, seed."""
    settings = record.config["settings"]
    text = (
        f"{record.config.get('task', '?')} on {settings.get('base_model', '?')}, "
        f"seed {settings.get('seed', '?')} ({settings.get('backend', '?')})"
    )
    return f"{record.path.name}: {text}" if several else text


def metric_names(records: Sequence[RunRecord]) -> list[str]:
    """The task's metrics the runs recorded (`metric/NAME` keys), by name."""
    keys = {key for r in records for row in (*r.steps, *r.evals) for key in row}
    return sorted(key.removeprefix(METRIC) for key in keys if key.startswith(METRIC))


def plot_runs(records: Sequence[RunRecord], out: Path) -> Path:
    """Draw the runs' curves (`figure_of`) into the PNG file `out`."""
    figure = figure_of(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def figure_of(records: Sequence[RunRecord]) -> Figure:
    """Accuracy (held-out greedy accuracy as points), mean reward and its parts (the held-out
    greedy mean reward as points), each of the task's metrics (a panel each, held-out as
    points), the sampler (its entropy, and the approximate KL to the learner, on its own
    axis at the right), and datums, one panel under the other."""
    several = len(records) > 1
    names = metric_names(records)
    figure, axes = plt.subplots(
        4 + len(names),
        1,
        figsize=(7.5, 9.5 + 1.6 * len(names)),
        sharex=True,
        height_ratios=(2, 1.3, *(1,) * len(names), 1, 1),
        layout="constrained",
    )
    accuracy_ax, reward_ax, *metric_axes, sampler_ax, datums_ax = axes
    kl_ax = sampler_ax.twinx()
    for i, record in enumerate(records):
        colour = f"C{i}"
        steps = [r["step"] for r in record.steps]
        label = label_of(record, several) if several else "training samples (step's temperature)"
        accuracy_ax.plot(
            steps, [100 * r["accuracy"] for r in record.steps], color=colour, label=label
        )
        prefix = f"{record.path.name}: " if several else ""
        held_out = {"color": colour, "markerfacecolor": "white" if several else colour}
        if record.evals:
            accuracy_ax.plot(
                [r["step"] for r in record.evals],
                [100 * r["accuracy"] for r in record.evals],
                "o",
                label=f"{prefix}held-out, greedy",
                **held_out,
            )
        reward_ax.plot(
            steps,
            [r.get("mean_reward", 0.0) for r in record.steps],
            color=colour,
            label=f"{prefix}mean reward",
        )
        if record.evals:
            reward_ax.plot(
                [r["step"] for r in record.evals],
                [r.get("mean_reward", 0.0) for r in record.evals],
                "o",
                label=f"{prefix}held-out mean reward, greedy",
                **held_out,
            )
        parts = sorted({name for r in record.steps for name in r.get("reward_parts", {})})
        for style, name in zip(("--", ":", "-.") * len(parts), parts, strict=False):
            reward_ax.plot(
                steps,
                [r.get("reward_parts", {}).get(name, 0.0) for r in record.steps],
                style,
                color=colour,
                label=f"{prefix}{name}",
            )
        for name, metric_ax in zip(names, metric_axes, strict=True):
            key = f"{METRIC}{name}"
            reported = [r for r in record.steps if key in r]
            metric_ax.plot([r["step"] for r in reported], [r[key] for r in reported], color=colour)
            held = [r for r in record.evals if key in r]
            metric_ax.plot([r["step"] for r in held], [r[key] for r in held], "o", **held_out)
        entropy = [r for r in record.steps if r.get("entropy") is not None]
        sampler_ax.plot(
            [r["step"] for r in entropy],
            [r["entropy"] for r in entropy],
            color=colour,
            label=f"{prefix}entropy",
        )
        divergence = [r for r in record.steps if r.get("approx_kl") is not None]
        kl_ax.plot(
            [r["step"] for r in divergence],
            [r["approx_kl"] for r in divergence],
            "--",
            color=colour,
            label=f"{prefix}approx KL to the learner",
        )
        datums_ax.plot(
            steps, [r["datums"] for r in record.steps], color=colour, drawstyle="steps-mid"
        )
    accuracy_ax.set_ylabel("accuracy (%)")
    accuracy_ax.set_ylim(-2, 102)
    accuracy_ax.grid(alpha=0.3)
    accuracy_ax.legend(loc="lower right", fontsize="small")
    reward_ax.set_ylabel("reward (mean)")
    reward_ax.grid(alpha=0.3)
    reward_ax.legend(loc="lower right", fontsize="small")
    for name, metric_ax in zip(names, metric_axes, strict=True):
        metric_ax.set_ylabel("mean")
        metric_ax.set_title(
            f"the task's metric {shown(name, 40)} (held-out, greedy: points)",
            fontsize="small",
            loc="left",
        )
        metric_ax.grid(alpha=0.3)
    sampler_ax.set_ylabel("entropy (nats)")
    kl_ax.set_ylabel("approx KL (dashed)")
    sampler_ax.set_title(
        "the sampler: its entropy per token, and its approximate KL to the learner",
        fontsize="small",
        loc="left",
    )
    # From 0, and at least to KL_FLOOR: on-policy rounding (1e-32) draws as the 0 it is.
    drawn = [float(y) for line in kl_ax.lines for y in line.get_ydata()]
    kl_ax.set_ylim(0.0, max([KL_FLOOR, *(1.1 * y for y in drawn)]))
    sampler_ax.grid(alpha=0.3)
    datums_ax.set_ylabel("datums trained on")
    datums_ax.set_xlabel("step")
    datums_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    datums_ax.grid(alpha=0.3)
    title = "mathrl: several runs" if several else f"mathrl: {label_of(records[0], False)}"
    figure.suptitle(title)
    return figure
