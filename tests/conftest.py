"""Shared fixtures (a private temp folder for the session, a FakeBackend factory), the
addition task's references, `checks_passed`, which reads `check_adapter`'s summary, and
`examples`, the hypothesis example counts of the fast suite and of `nox -s slow`."""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from mathrl.resolved import as_task
from mathrl.tasks.addition import MathAdapter, all_problems
from mathrl.testing import check_adapter
from mathrl_fakes import FakeBackend, FakeModel, PromptKey, Reference, references_for

# Nothing of hypothesis's in the checkout (no example database, no caches):
# tests write only to temporary folders, and remove them. One folder for the session: xdist's
# workers inherit it from the process that starts them, which removes it.
_HYPOTHESIS_HOME = os.environ.get("MATHRL_HYPOTHESIS_HOME", "")
if not _HYPOTHESIS_HOME:
    _HYPOTHESIS_HOME = os.environ["MATHRL_HYPOTHESIS_HOME"] = tempfile.mkdtemp(
        prefix="mathrl-hypothesis-"
    )
    atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
# No deadline: these machines are shared, and timing is the benchmark's business, not a test's.
THOROUGH = os.environ.get("MATHRL_HYPOTHESIS") == "thorough"
"""Set by `nox -s slow`, which runs every property (`-m "slow or hypothesis"`) again with
hypothesis's full 100 examples, and the ones whose examples cost a second or more with their
full count (`examples`); the fast suite tries 25 of each."""
settings.register_profile(
    "mathrl", database=None, deadline=None, max_examples=100 if THOROUGH else 25
)
settings.load_profile("mathrl")


WARM_UP = (
    "import sys\n"
    "from hypothesis.configuration import set_hypothesis_home_dir\n"
    "set_hypothesis_home_dir(sys.argv[1])\n"
    "from hypothesis import find, strategies as st\n"
    "find(st.text(min_size=1), bool)\n"
)
"""Makes hypothesis write down which characters UTF-8 encodes, the table behind every text
strategy, which it computes once per home folder: 1.5 s, or 5 s under coverage's tracer."""


def pytest_configure(config: pytest.Config) -> None:
    """Before xdist starts its workers, which share the home folder: the table, written once
    for all of them by an interpreter that coverage does not trace."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        untraced = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
        subprocess.run([sys.executable, "-c", WARM_UP, _HYPOTHESIS_HOME], env=untraced, check=True)


def examples(fast: int, thorough: int) -> int:
    """`max_examples` for a property whose single example is expensive (a training run, a
    sandbox or a process each): `fast` in the fast suite, `thorough` in `nox -s slow`."""
    return thorough if THOROUGH else fast


if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    # Mutation testing (`nox -s mutants`): mutmut runs this suite in its own process, the
    # mutant under test named in MUTANT_UNDER_TEST and in its memory. While it records which
    # tests reach which functions ("stats"), an interpreter a test starts (check-adapter's
    # PYTHONHASHSEED check, a `python -m mathrl`) would inherit the name and try to record
    # too, reading mutmut's configuration from its own working folder, where there is none:
    # it fails. Its hits could not reach mutmut anyway, so that phase keeps the name in
    # mutmut's memory alone; a mutant's own run passes it on, so a child runs the mutant too.
    del os.environ["MUTANT_UNDER_TEST"]


REQUIRE_EXTRAS = os.environ.get("MATHRL_REQUIRE_EXTRAS") == "1"
"""Set by nox, which installs every extra: there a test that needs one always runs, and fails
if the extra is missing, so CI never passes by skipping it."""


def needs_extra(module: str, extra: str) -> pytest.MarkDecorator:
    """Skips a test when `module`, from mathrl's optional `extra`, is not installed (outside
    nox: under nox, `REQUIRE_EXTRAS`, the test runs whatever)."""
    missing = not REQUIRE_EXTRAS and importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=_not_installed(module, extra))


def import_extra(module: str, extra: str) -> ModuleType:
    """`module`, from mathrl's optional `extra`, imported; a skip where it is not installed
    (outside nox: see `needs_extra`)."""
    if REQUIRE_EXTRAS:
        return importlib.import_module(module)
    found: ModuleType = pytest.importorskip(module, reason=_not_installed(module, extra))
    return found


def _not_installed(module: str, extra: str) -> str:
    return f"{module} is not installed: pip install '.[{extra}]'"


@pytest.fixture(autouse=True, scope="session")
def private_temp_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point the temp folder (the fake's default checkpoint folder) somewhere of our own."""
    folder = str(tmp_path_factory.mktemp("tmp"))
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = folder, folder
    yield
    tempfile.tempdir = saved[0]
    if saved[1] is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = saved[1]


@cache
def math_references() -> Mapping[PromptKey, Reference]:
    """Prompt -> reference for every addition problem, held-out ones included (built once)."""
    return references_for(MathAdapter(), list(all_problems()))


@pytest.fixture
def fake_backend_factory(tmp_path: Path) -> Callable[..., FakeBackend]:
    counter = iter(range(1_000_000))

    def make(**kwargs: Any) -> FakeBackend:
        kwargs.setdefault("checkpoint_dir", tmp_path / f"ckpt{next(counter)}")
        return FakeBackend(FakeModel(math_references()), task_name="addition", **kwargs)

    return make


BUILT_IN_ARGS: dict[str, dict[str, str]] = {
    "dataset": {"train": "fixture:units", "prompt": "{value} {unit_from} in {unit_to}:"},
}
"""The options a built-in task needs to be made (the dataset task: rows, and a prompt over them),
as `--task-arg` gives them; the others take none."""


def checks_passed(adapter: Any, **options: Any) -> int:
    """How many checks `check_adapter(adapter, **options)` ran, all passed: read from its
    summary, which must name the task and end with the task's preflight line, if it has one,
    then (with `learns`) the line on what was judged, then a line for each warning.

    Within one process unless asked (`across_processes`): a new interpreter importing a test
    module costs most of a second, and test_new_interpreter checks it."""
    task = as_task(adapter)
    ready = task.preflight()
    summary = check_adapter(adapter, **{"across_processes": False, **options})
    expected = (
        rf"task {re.escape(repr(task.name))} \({re.escape(task.identity)}\) passed (\d+) checks"
        + (re.escape(f"; {ready}") if ready else "")
        + r"(; [^\n]+)?"  # what `prepare` said of the task's data, if it said anything
        + r"(\nlearning on [^\n]+)?(\nwarning: [^\n]+)*"
    )
    found = re.fullmatch(expected, summary)
    assert found, summary
    return int(found[1])
