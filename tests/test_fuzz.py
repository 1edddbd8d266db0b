"""Any value for any variable or flag is accepted, or refused with exit 2 and one line.

`main()` runs in process with the training run itself replaced by a stand-in
that opens the fake backend and stops there (so an accepted `--steps 900000`
costs nothing, and no folder is made wherever a fuzzed path points). Imports
of arbitrary module names are refused before they reach the import system.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mathrl.cli.commands
from conftest import examples
from mathrl.cli.commands import main
from mathrl.cli.parsers import SAMPLE_FIELDS
from mathrl.cli.settings import SETTINGS
from mathrl.cli.train import Plan, open_backend

CHARACTERS = st.characters(codec="utf-8", exclude_characters="\x00")
"""What a command line or an environment can hold: UTF-8 text without NUL."""

values = st.one_of(
    st.text(CHARACTERS, max_size=30),
    st.integers().map(str),
    st.floats().map(str),
    st.sampled_from(["", " ", "-1", "0", "1e999", "nan", "99999999999999999999", "sk-x", "a:b"]),
    st.text(CHARACTERS, min_size=300, max_size=6000),
)
"""Whatever a user might type: short text, numbers, edge cases, very long text."""

CASES: list[tuple[str, str]] = [
    *(("flag", s.flag) for s in SETTINGS),
    *(("env", s.env) for s in SETTINGS if s.env),
    ("flag", "--backend"),
    ("flag", "--resume"),
    ("env", "MINT_API_KEY"),
    ("env", "MINT_BASE_URL"),
    *(("sample", s.flag) for s in SETTINGS if s.field in SAMPLE_FIELDS),
    ("sample", "--model-path"),
    ("sample", "--problems"),
    ("sample", "--temperature"),
    ("sample", "--backend"),
    ("check-adapter", ""),
    ("plot", ""),
    ("plot", "--out"),
]
"""Every variable and flag of every command: (where it goes, its name)."""


def arguments(where: str, name: str, value: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that give `value` to `name`."""
    if where == "env":
        backend = [] if name.startswith("MINT_") and "RL" not in name else ["--backend", "fake"]
        return backend, {name: value}
    if where == "flag":
        return ["--backend", "fake", "--steps", "1", name, value], {}
    if where == "sample":
        base = ["sample", "--backend", "fake", "--model-path", "/nowhere/x.json"]
        return [*base, name, value], {}
    if where == "check-adapter":
        return ["check-adapter", value], {}
    return (["plot", value] if not name else ["plot", "/nowhere", name, value]), {}


async def opened_and_stopped(plan: Plan, env: Mapping[str, str], version: str, say: Any) -> int:
    """The training run's stand-in: everything up to the first step, for the fake only."""
    if plan.config.backend == "fake":
        await open_backend(plan, env, say)
    return 0


REAL_IMPORT = importlib.import_module


@pytest.fixture(scope="module", autouse=True)
def matplotlib_whole() -> None:
    """`plot`'s module, and matplotlib whole, imported before import_module is refused below:
    by the worker that runs these tests, not at collection by every worker (0.5 s each)."""
    REAL_IMPORT("mathrl.cli.plot")


def refuse_imports(name: str, package: str | None = None) -> Any:
    if not name.startswith("mathrl"):
        raise ModuleNotFoundError(f"No module named {name!r}")
    return REAL_IMPORT(name, package)


@settings(
    max_examples=examples(100, 500),  # 5 s in all: the thorough session takes all 500
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=st.sampled_from(CASES), value=values)
def test_any_value_is_accepted_or_refused_in_one_line(
    case: tuple[str, str],
    value: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, env = arguments(*case, value)
    with monkeypatch.context() as patch:
        patch.chdir(tmp_path)
        for key in [k for k in __import__("os").environ if k.startswith(("MINT_", "TINKER_"))]:
            patch.delenv(key)
        for key, text in env.items():
            patch.setenv(key, text)
        patch.setattr(mathrl.cli.commands, "train", opened_and_stopped)
        patch.setattr(importlib, "import_module", refuse_imports)
        code = main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code in (0, 2), err
    if code == 2:
        (line,) = err.splitlines()
        assert line.startswith("mathrl: error: ")
        assert len(line) < 600  # long values are cut short
