"""mathrl on a Python older than 3.11: one line at import saying so, and pip's refusal.

pip refuses to install mathrl there (pyproject's `requires-python`; the
dependency's marker keeps pip 23.0.1, Python 3.10's own, from reporting the
dependency first). A clone put on the path by hand is refused at import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from mathrl.python_version import OLDEST, check_python

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("version", "shown"), [((3, 10, 13), "3.10.13"), ((2, 7, 18), "2.7.18")])
def test_an_older_python_is_one_import_error_line(version: tuple[int, ...], shown: str) -> None:
    with pytest.raises(ImportError) as refused:
        check_python(version)
    assert str(refused.value) == f"mathrl needs Python 3.11 or newer (this is Python {shown})"


@pytest.mark.parametrize("version", [(3, 11, 0), (3, 12, 1), (4, 0, 0)])
def test_3_11_and_newer_pass(version: tuple[int, ...]) -> None:
    check_python(version)


def test_the_oldest_python_is_the_one_pyproject_requires() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={OLDEST[0]}.{OLDEST[1]}"
    # A dependency with no release for older Pythons carries the same bound as a marker:
    # without it, pip 23.0.1 reports that dependency missing, not the Python too old.
    (toolkit,) = [d for d in project["dependencies"] if d.startswith("mindlab-toolkit")]
    assert toolkit.endswith(f"; python_version >= '{OLDEST[0]}.{OLDEST[1]}'")


def older_pythons() -> list[str]:
    """Interpreters older than 3.11 that run here: python3.N on PATH, or under pyenv."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [shutil.which(f"python3.{minor}") for minor in range(OLDEST[1])]
    found += map(str, sorted(pyenv.glob("3.*/bin/python")))
    older = "import sys; sys.exit(sys.version_info[:2] >= (3, 11))"
    return [
        python
        for python in dict.fromkeys(filter(None, found))
        if subprocess.run([python, "-c", older], capture_output=True, check=False).returncode == 0
    ]


@pytest.mark.slow
def test_importing_mathrl_on_an_older_python_says_so_in_one_line() -> None:
    pythons = older_pythons()
    if not pythons:
        pytest.skip("no Python older than 3.11 found here (on PATH or under pyenv) to try")
    for python in pythons:
        done = subprocess.run(
            [python, "-c", "import mathrl"],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )  # fmt: skip
        version = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == (
            f"ImportError: mathrl needs Python 3.11 or newer (this is Python {version})"
        )
