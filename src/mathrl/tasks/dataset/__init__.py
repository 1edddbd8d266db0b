"""The dataset task (built-in as `dataset`), and the data layer every data task shares.

- `task`: `DatasetTask`: rows, a prompt template and reward functions, no class;
- `functions`: its reward and metric functions, found by name, weighed and called;
- `sources`: reading JSONL, JSON, CSV, Parquet, shipped fixtures and Hugging Face
  datasets, each row's place in its file, and the content's digest;
- `rows`: every row checked (`BadRow`, `RowError`), duplicates and overlaps dropped,
  the held-out split and the epoch draws;
- `data`: `Data`, the above put together for a task (the `math` task uses it too).

The shipped `units` fixture (`data/units.csv`) was written for this project by
`tests/dataset_fixtures.py`.
"""

from mathrl.tasks.dataset.data import Data
from mathrl.tasks.dataset.rows import BadRow, RowError
from mathrl.tasks.dataset.task import DatasetTask, Row

__all__ = ["BadRow", "Data", "DatasetTask", "Row", "RowError"]
