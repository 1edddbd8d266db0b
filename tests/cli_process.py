"""Running `python -m mathrl` as a user would: a subprocess in a clean folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def user_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """The caller's environment less MINT_*/TINKER_*, home and temp under `tmp_path`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MINT_", "TINKER_"))}
    base.update(TMPDIR=str(tmp_path), HOME=str(tmp_path))
    base.update(env)
    return base


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m mathrl` in `tmp_path` (so no stray .env), with `env` added."""
    return subprocess.run(
        [sys.executable, "-m", "mathrl", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=user_env(tmp_path, **env),
        timeout=120,
        check=False,
    )
