"""Where the math task's problems come from: a file, a shipped fixture, or a Hugging Face dataset.

For: the math task's constructor, which reads its `train` and `test` sources
once. This module does the reading (the only I/O of the task) and returns
rows as plain dictionaries; what the rows mean is `mathrl.tasks.math.problems`'.
Not for: drawing problems or grading.

A source is one of:

- a file, by its extension: `.jsonl` (one JSON object a line), `.json` (a
  list of objects), `.csv` (a header row, then one row a line), or
  `.parquet` (needs pyarrow: `pip install 'mathrl[datasets]'`);
- `fixture:NAME`: a file shipped with mathrl (`FIXTURES`), written for this
  project: `gsm-train` (200 word problems) and `gsm-test` (50) in GSM8K's
  format, `equivalence` (32 problems in MATH's format whose answers need a
  real equivalence check);
- `hf:NAME:SPLIT` or `hf:NAME:CONFIG:SPLIT`: a dataset loaded with
  `datasets.load_dataset(NAME, CONFIG, split=SPLIT)` (`pip install
  'mathrl[datasets]'`), e.g. `hf:openai/gsm8k:main:train`; NAME may be a
  local folder of data files too. The Hub needs the network;
  `HF_HUB_OFFLINE=1` makes it fail at once without it.

Every problem with a source raises `OptionError` naming the option, in one line.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from mathrl.adapter import OptionError
from mathrl.text import describe, listed, shown

Row = Mapping[str, object]
FIXTURE, HF = "fixture:", "hf:"
FIXTURES = ("gsm-train", "gsm-test", "equivalence")
"""The shipped data files (`data/NAME.jsonl` beside this module)."""
SPEC_HELP = ".jsonl, .json, .csv or .parquet file, fixture:NAME or hf:NAME[:CONFIG]:SPLIT"


def read_rows(spec: str, option: str) -> list[Row]:
    """The rows of source `spec`, given as option `option`; OptionError if it cannot be read."""
    if spec.startswith(FIXTURE):
        name = spec.removeprefix(FIXTURE)
        if name not in FIXTURES:
            raise OptionError(
                option,
                f"{option} must name a shipped fixture, {listed(FIXTURES, 'or')} "
                f"(got {shown(spec, 200)})",
            )
        text = resources.files(__package__).joinpath("data", f"{name}.jsonl").read_text("utf-8")
        return _jsonl(text, spec, option)
    if spec.startswith(HF):
        return _hf_rows(spec, option)
    path = Path(spec)
    if path.suffix.lower() == ".parquet":
        return _parquet(path, option)
    reader = TEXT_READERS.get(path.suffix.lower())
    if reader is None:
        raise OptionError(option, f"{option} must be a {SPEC_HELP} (got {shown(spec, 200)})")
    try:
        text = path.read_text("utf-8-sig")  # a spreadsheet's CSV may start with a BOM
    except (OSError, UnicodeError) as exc:
        raise OptionError(
            option, f"{option} file {shown(spec, 200)} cannot be read: {describe(exc)}"
        ) from None
    return reader(text, spec, option)


def _jsonl(text: str, spec: str, option: str) -> list[Row]:
    rows: list[Row] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise _not_rows(
                option, spec, f"line {number} is not JSON: {describe(exc, 80)}"
            ) from None
        if not isinstance(row, dict):
            raise _not_rows(option, spec, f"line {number} is not a JSON object")
        rows.append(row)
    return rows


def _json(text: str, spec: str, option: str) -> list[Row]:
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise _not_rows(option, spec, f"it is not JSON: {describe(exc, 80)}") from None
    if not (isinstance(rows, list) and all(isinstance(row, dict) for row in rows)):
        raise _not_rows(option, spec, "it must hold a list of JSON objects")
    return rows


def _csv(text: str, spec: str, option: str) -> list[Row]:
    try:
        rows: list[Row] = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise _not_rows(option, spec, f"it is not CSV: {describe(exc, 80)}") from None
    return rows


def _parquet(path: Path, option: str) -> list[Row]:
    try:
        import pyarrow.parquet
    except ImportError:
        raise OptionError(
            option,
            f"{option} file {shown(str(path), 200)} is Parquet, which needs pyarrow: "
            "pip install 'mathrl[datasets]'",
        ) from None
    try:
        rows: list[Row] = pyarrow.parquet.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow's errors have no common base but Exception
        raise OptionError(
            option, f"{option} file {shown(str(path), 200)} cannot be read: {describe(exc, 120)}"
        ) from None
    return rows


def _hf_rows(spec: str, option: str) -> list[Row]:
    parts = spec.removeprefix(HF).split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise OptionError(
            option,
            f"{option} must be hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT, e.g. "
            f"hf:openai/gsm8k:main:train (got {shown(spec, 200)})",
        )
    name, config, split = parts[0], parts[1] if len(parts) == 3 else None, parts[-1]
    try:
        import datasets
    except ImportError:
        raise OptionError(
            option, f"{option}={spec} needs the datasets package: pip install 'mathrl[datasets]'"
        ) from None
    try:
        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # no network, no such dataset or split, a broken file: all one line
        raise OptionError(
            option, f"{option}: datasets cannot load {spec}: {describe(exc, 160)}"
        ) from None
    return [dict(row) for row in dataset]


def _not_rows(option: str, spec: str, why: str) -> OptionError:
    return OptionError(option, f"{option} file {shown(spec, 200)} cannot be used: {why}")


TEXT_READERS: dict[str, Callable[[str, str, str], list[Row]]] = {
    ".jsonl": _jsonl,
    ".json": _json,
    ".csv": _csv,
}
"""How each text file's extension is read (`.parquet` is binary: `_parquet`)."""
