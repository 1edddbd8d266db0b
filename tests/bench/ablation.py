"""The algorithm choices side by side on the fake backend: `nox -s ablation`.

The addition task, 20 steps at the command line's defaults otherwise, for
each loss, with and without `--fill-batch`, at `--kl-coef` 0 and 0.1, over
seeds 0-4 (80 runs, each through `python -m mathrl --backend fake`, in this
process). It prints a Markdown table, one row a choice: accuracy over steps
1-5 and 16-20 (mean over seeds, and the seeds' range of the gain), problems
drawn a step, the clip fraction and the mean KL; and it draws each loss's
seed-0 run (no fill-batch, no KL) into one plot with `python -m mathrl plot`.

What it shows is the fake's behaviour: a tiny policy of a few hundred
parameters on a table of reference answers. It is no claim about real models.

Usage: python tests/bench/ablation.py [--out FOLDER] [--steps N] [--seeds K]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from mathrl.cli import main
from mathrl.losses import LOSSES

KL_COEFS = (0.0, 0.1)


def run(
    folder: Path, steps: int, substeps: int, seed: int, loss: str, fill: bool, kl: float
) -> list[dict[str, Any]]:
    """One fake run into `folder`; its step records."""
    args = ["--backend", "fake", "--steps", str(steps), "--seed", str(seed), "--loss", loss,
            "--log-dir", str(folder), "--kl-coef", str(kl), "--fill-batch", str(fill).lower(),
            "--substeps", str(substeps), "--fake-checkpoints", str(folder / "ckpt")]  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    if code != 0:
        raise SystemExit(f"ablation: {' '.join(args)} failed ({code}): {err.getvalue().strip()}")
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if not r.get("eval")]


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else 0.0


def main_(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", default="ablation", help="folder of the runs and the plot")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 to K - 1")
    parser.add_argument(
        "--substeps", type=int, default=1, help="minibatches a step (ratios move off 1 past 1)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    edge = max(1, args.steps // 4)  # steps 1-5 and 16-20 at 20 steps
    rows = [
        "| loss | fill-batch | KL coef | accuracy, first 5 | accuracy, last 5 "
        "| gain (min to max over seeds) | problems drawn a step | clipped | KL |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    seed_zero: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="mathrl-ablation-") as scratch,
        mock.patch.dict("os.environ", {"TMPDIR": scratch}),
    ):
        for loss, fill, kl in itertools.product(LOSSES, (False, True), KL_COEFS):
            starts, ends, drawn, clipped, kls = [], [], [], [], []
            for seed in range(args.seeds):
                name = f"{loss}-{'fill' if fill else 'nofill'}-kl{kl:g}-seed{seed}"
                folder = out / name
                if folder.exists():
                    raise SystemExit(f"ablation: {folder} exists already; choose another --out")
                records = run(folder, args.steps, args.substeps, seed, loss, fill, kl)
                accuracy = [float(r["accuracy"]) for r in records]
                starts.append(mean(accuracy[:edge]))
                ends.append(mean(accuracy[-edge:]))
                drawn += [float(r["groups"]) for r in records]
                clipped += [
                    float(r["backend_metrics"]["clipped:frac"])
                    for r in records
                    if "clipped:frac" in r["backend_metrics"]
                ]
                kls += [float(r["kl"]) for r in records if r["kl"] is not None]
                if seed == 0 and not fill and not kl:  # one curve a loss: a plot that reads
                    seed_zero.append(str(folder))
            gains = [e - s for s, e in zip(starts, ends, strict=True)]
            rows.append(
                f"| {loss} | {'yes' if fill else 'no'} | {kl:g} | {100 * mean(starts):.1f}% "
                f"| {100 * mean(ends):.1f}% | {100 * mean(gains):+.1f} "
                f"({100 * min(gains):+.1f} to {100 * max(gains):+.1f}) | {mean(drawn):.1f} "
                f"| {f'{100 * mean(clipped):.1f}%' if clipped else '-'} "
                f"| {f'{mean(kls):.4f}' if kls else '-'} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    plot = out / "ablation.png"
    with contextlib.redirect_stdout(io.StringIO()):
        if main(["plot", *seed_zero, "--out", str(plot)]) != 0:
            raise SystemExit("ablation: the plot failed")
    print(
        f"The fake backend, addition, {args.steps} steps, {args.substeps} substep(s), "
        f"seeds 0-{args.seeds - 1}:\n"
    )
    print("\n".join(rows))
    print(f"\nRuns in {out}/; each loss's seed-0 run drawn in {plot}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
