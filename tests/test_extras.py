"""The install command a missing extra's message gives, for each way mathrl is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathrl.cli.extras import command_for, install_command

CLONE = Path("/home/me/mathrl")


def pip_record(url: str, **info: object) -> str:
    """What pip writes to direct_url.json (PEP 610)."""
    return json.dumps({"url": url, **info})


@pytest.mark.parametrize(
    ("direct_url", "cwd", "command"),
    [
        # `pip install .` or `pip install -e .` in a clone, then run from the clone.
        (pip_record(CLONE.as_uri(), dir_info={"editable": True}), CLONE, "pip install '.[plot]'"),
        # ... or from anywhere else: the clone's folder, which pip takes from anywhere.
        (pip_record(CLONE.as_uri(), dir_info={}), Path("/tmp"),
         "pip install '/home/me/mathrl[plot]'"),
        # A wheel file.
        (pip_record("file:///w/mathrl-0.3.0-py3-none-any.whl", archive_info={}), Path("/"),
         "pip install '/w/mathrl-0.3.0-py3-none-any.whl[plot]'"),
        # From an index (no record), from git, or a record that is not PEP 610's.
        (None, CLONE, "pip install 'mathrl[plot]'"),
        (pip_record("https://github.com/o/mathrl.git", vcs_info={"vcs": "git"}), CLONE,
         "pip install 'mathrl[plot]'"),
        ("not json", CLONE, "pip install 'mathrl[plot]'"),
    ],
)  # fmt: skip
def test_the_command_follows_where_mathrl_was_installed_from(
    direct_url: str | None, cwd: Path, command: str
) -> None:
    assert command_for("plot", direct_url, cwd) == command


def test_the_command_here_names_this_checkout() -> None:
    # The suite runs an install of this checkout (nox: `pip install .`; by hand: `-e .`).
    root = Path(__file__).resolve().parents[1]
    assert install_command("wandb") in (f"pip install '{root}[wandb]'", "pip install '.[wandb]'")
