"""Where a task's rows come from: a file, a shipped fixture, or a Hugging Face dataset.

For: the data tasks (`dataset`, `math`), which read each source once, in their
constructor. This module does the reading (the only I/O of those tasks) and
returns a `Source`: its rows as plain dictionaries, where each row is in the
file, and a digest of the content, which makes the data part of a run's
identity. What a row means is the task's (`mathrl.tasks.dataset.rows` checks
them). Not for: drawing problems or grading.

A source is one of:

- a file, by its extension: `.jsonl` (one JSON object a line), `.json` (a
  list of objects), `.csv` (a header row, then one row a line), or
  `.parquet` (needs pyarrow: `pip install 'mathrl[datasets]'`). A relative
  path is taken from the working folder and recorded absolute (`Source.spec`),
  so a run folder works from any folder;
- `fixture:NAME`: a file shipped with mathrl (`FIXTURES`), written for this
  project: `gsm-train` (200 word problems) and `gsm-test` (50) in GSM8K's
  format, `equivalence` (32 problems in MATH's format whose answers need a
  real equivalence check), `units` (240 unit conversions, a CSV: the README's
  example of your own data);
- `hf:NAME:SPLIT` or `hf:NAME:CONFIG:SPLIT`: a dataset loaded with
  `datasets.load_dataset(NAME, CONFIG, split=SPLIT)` (`pip install
  'mathrl[datasets]'`), e.g. `hf:openai/gsm8k:main:train`; NAME may be a
  local folder of data files too. The Hub needs the network;
  `HF_HUB_OFFLINE=1` makes it fail at once without it.

Each row has a place, as a message names it: `line N` of a JSONL or CSV
file (a CSV's header is line 1), `row N` of a JSON list, a Parquet file or
a dataset. The digest is a hash of a file's bytes, or a dataset's own
fingerprint (`Dataset._fingerprint`, which changes with its files).

Every problem with a source raises `OptionError` naming the option, in one line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mathrl.adapter import OptionError
from mathrl.text import describe, listed, shown, shown_end

Row = Mapping[str, object]
FIXTURE, HF = "fixture:", "hf:"
FIXTURES = {
    "gsm-train": ("mathrl.tasks.math", "gsm-train.jsonl"),
    "gsm-test": ("mathrl.tasks.math", "gsm-test.jsonl"),
    "equivalence": ("mathrl.tasks.math", "equivalence.jsonl"),
    "units": ("mathrl.tasks.dataset", "units.csv"),
}
"""The shipped data files: NAME -> (the package whose `data/` folder holds it, its file)."""
SPEC_HELP = ".jsonl, .json, .csv or .parquet file, fixture:NAME or hf:NAME[:CONFIG]:SPLIT"


@dataclass(frozen=True, slots=True)
class Source:
    """One source's rows, where each is, and what its content hashes to."""

    option: str
    """The option that names it (`train`, `test`)."""
    given: str
    """The source as it was given, for messages."""
    spec: str
    """The source as a run records it: a file's absolute path, fixture:NAME or hf:...."""
    rows: tuple[Row, ...]
    places: tuple[str, ...]
    """Where each row is: `line 3`, `row 7`."""
    digest: str
    """16 hex digits of the content: new data, new digest."""

    def where(self, index: int) -> str:
        """Row `index` as a message names it: `train file 'units.csv' line 14`."""
        kind = "file" if not self.given.startswith((FIXTURE, HF)) else "source"
        return f"{self.option} {kind} {shown_end(self.given, 120)} {self.places[index]}"


def read_source(spec: str, option: str) -> Source:
    """Source `spec`, given as option `option`; OptionError if it cannot be read."""
    if spec.startswith(FIXTURE):
        name = spec.removeprefix(FIXTURE)
        if name not in FIXTURES:
            raise OptionError(
                option,
                f"{option} must name a shipped fixture, {listed(FIXTURES, 'or')} "
                f"(got {shown(spec, 200)})",
            )
        package, file = FIXTURES[name]
        data = resources.files(package).joinpath("data", file).read_bytes()
        reader = TEXT_READERS[Path(file).suffix]
        rows, places = reader(data.decode("utf-8-sig"), spec, option)
        return Source(option, spec, spec, rows, places, _digest(data))
    if spec.startswith(HF):
        rows, fingerprint = _hf_rows(spec, option)
        places = tuple(f"row {n}" for n in range(1, len(rows) + 1))
        return Source(option, spec, spec, rows, places, _digest(fingerprint.encode()))
    path = Path(spec)
    suffix = path.suffix.lower()
    if suffix != ".parquet" and suffix not in TEXT_READERS:
        raise OptionError(option, f"{option} must be a {SPEC_HELP} (got {shown(spec, 200)})")
    parquet = _parquet_reader(path, option) if suffix == ".parquet" else None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OptionError(
            option, f"{option} file {shown(spec, 200)} cannot be read: {describe(exc)}"
        ) from None
    if parquet is not None:
        rows = tuple(parquet())
        places = tuple(f"row {n}" for n in range(1, len(rows) + 1))
    else:
        try:
            text = data.decode("utf-8-sig")  # a spreadsheet's CSV may start with a BOM
        except UnicodeError as exc:
            raise OptionError(
                option, f"{option} file {shown(spec, 200)} cannot be read: {describe(exc)}"
            ) from None
        rows, places = TEXT_READERS[suffix](text, spec, option)
    return Source(option, spec, os.path.abspath(spec), rows, places, _digest(data))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


Rows = tuple[tuple[Row, ...], tuple[str, ...]]
"""Rows and their places."""


def _jsonl(text: str, spec: str, option: str) -> Rows:
    rows: list[Row] = []
    places: list[str] = []
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
        places.append(f"line {number}")
    return tuple(rows), tuple(places)


def _json(text: str, spec: str, option: str) -> Rows:
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise _not_rows(option, spec, f"it is not JSON: {describe(exc, 80)}") from None
    if not (isinstance(rows, list) and all(isinstance(row, dict) for row in rows)):
        raise _not_rows(option, spec, "it must hold a list of JSON objects")
    return tuple(rows), tuple(f"row {n}" for n in range(1, len(rows) + 1))


def _csv(text: str, spec: str, option: str) -> Rows:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: list[Row] = []
    places: list[str] = []
    try:
        for row in reader:
            # A row with more cells than the header has puts the rest under None: a bad row
            # that `rows.cells` names, so the key is kept as the text "None" is not.
            rows.append(row)
            places.append(f"line {reader.line_num}")
    except csv.Error as exc:
        raise _not_rows(option, spec, f"it is not CSV: {describe(exc, 80)}") from None
    return tuple(rows), tuple(places)


def _parquet_reader(path: Path, option: str) -> Callable[[], list[Row]]:
    """What reads the Parquet file `path`; OptionError now if pyarrow is missing."""
    try:
        import pyarrow.parquet
    except ImportError:
        raise OptionError(
            option,
            f"{option} file {shown(str(path), 200)} is Parquet, which needs pyarrow: "
            "pip install 'mathrl[datasets]'",
        ) from None

    def read() -> list[Row]:
        try:
            rows: list[Row] = pyarrow.parquet.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow's errors have no common base but Exception
            raise OptionError(
                option,
                f"{option} file {shown(str(path), 200)} cannot be read: {describe(exc, 120)}",
            ) from None
        return rows

    return read


def _hf_rows(spec: str, option: str) -> tuple[tuple[Row, ...], str]:
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
    fingerprint = str(getattr(dataset, "_fingerprint", "") or spec)
    return tuple(dict(row) for row in dataset), fingerprint


def _not_rows(option: str, spec: str, why: str) -> OptionError:
    return OptionError(option, f"{option} file {shown(spec, 200)} cannot be used: {why}")


TEXT_READERS: dict[str, Callable[[str, str, str], Rows]] = {
    ".jsonl": _jsonl,
    ".json": _json,
    ".csv": _csv,
}
"""How each text file's extension is read (`.parquet` is binary: `_parquet`)."""
