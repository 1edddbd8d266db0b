"""The dataset task's shipped example, written for this project: `python tests/dataset_fixtures.py`.

Writes `src/mathrl/tasks/dataset/data/units.csv`: 240 unit conversions (`value`,
`unit_from`, `unit_to`, `answer`), lengths, masses and times, seeded; each
answer is the exact conversion written with ten significant digits, so a
relative tolerance of 1e-6 grades it. It is the README's example of bringing
your own data (`fixture:units`, or a copy of the file).

`test_dataset_task.py` checks the committed file is what this script writes.
"""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "src" / "mathrl" / "tasks" / "dataset" / "data"
SEED = "mathrl/dataset-fixtures/1"
ROWS = 240
UNITS = (
    {"m": 1.0, "cm": 0.01, "mm": 0.001, "km": 1000.0, "in": 0.0254, "ft": 0.3048},
    {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125},
    {"s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0},
)
"""Each kind's units, by how many of its first unit one is."""


def units_csv() -> str:
    """The CSV text: a header, then ROWS distinct conversions."""
    rng = random.Random(SEED)
    rows: dict[tuple[str, str, str], str] = {}
    while len(rows) < ROWS:
        kind = rng.choice(UNITS)
        unit_from, unit_to = rng.sample(sorted(kind), 2)
        value = rng.choice([rng.randint(1, 100), rng.randint(1, 999) / 10])
        answer = value * kind[unit_from] / kind[unit_to]
        rows.setdefault((f"{value:g}", unit_from, unit_to), f"{answer:.10g}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["value", "unit_from", "unit_to", "answer"])
    writer.writerows([*key, answer] for key, answer in rows.items())
    return out.getvalue()


def files() -> dict[str, str]:
    return {"units.csv": units_csv()}


if __name__ == "__main__":
    for name, text in files().items():
        (DATA / name).write_text(text, encoding="utf-8")
