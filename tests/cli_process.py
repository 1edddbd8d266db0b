"""Running the command line as a user would: in a subprocess, or `main()` in this process.

`run_cli` runs `python -m mathrl` in a subprocess; keep it for what needs a
real process (signals, a closed or full stdout, a terminal, exit codes as a
shell sees them). `run_main` calls `mathrl.cli.main` here, with the same
folder, environment and temp folder, and gives the same kind of result in a
fraction of the time.
"""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from mathrl.cli import main


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


@dataclass(frozen=True, slots=True)
class Result:
    """What a run of the command line left: its exit code, stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_main(tmp_path: Path, *args: str, **env: str) -> Result:
    """`python -m mathrl ARGS` in this process: `main(args)` as `run_cli` would run it.

    The working folder is `tmp_path`, the environment is `user_env(tmp_path, **env)`
    and the temp folder (the fake's checkpoints) is `tmp_path`, for the call only.
    Modules the call imported from under `tmp_path` (tasks given by
    `--adapter`) are forgotten afterwards, and `sys.path` is restored, so
    the next call imports its own.
    """
    out, err = io.StringIO(), io.StringIO()
    cwd, path, modules, tempdir = os.getcwd(), list(sys.path), set(sys.modules), tempfile.tempdir
    importlib.invalidate_caches()  # files written just now under a name imported before
    try:
        os.chdir(tmp_path)
        tempfile.tempdir = str(tmp_path)  # gettempdir() caches TMPDIR
        with (
            mock.patch.dict(os.environ, user_env(tmp_path, **env), clear=True),
            redirect_stdout(out),
            redirect_stderr(err),
        ):
            code = _exit_code(list(args))
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        tempfile.tempdir = tempdir
        for name in set(sys.modules) - modules:
            if _is_under(getattr(sys.modules[name], "__file__", None), tmp_path):
                del sys.modules[name]
    return Result(code, out.getvalue(), err.getvalue())


def _exit_code(argv: list[str]) -> int:
    """`main(argv)`, with a SystemExit (argparse's --help) turned into its code, as Python does."""
    try:
        return main(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1


def _is_under(file: str | None, folder: Path) -> bool:
    return file is not None and Path(file).resolve().is_relative_to(folder.resolve())


def saved_names(stdout: str) -> str:
    """`stdout` with each `Saved:` path cut to its file name: two runs of the same training in
    other run folders (where the fake keeps its checkpoints) print the same."""
    return "".join(
        f"Saved: {Path(line.removeprefix('Saved: ').rstrip()).name}\n"
        if line.startswith("Saved: ")
        else line
        for line in stdout.splitlines(keepends=True)
    )


def fresh_interpreters(code: str) -> set[str]:
    """What `code` prints in two fresh interpreters with other hash seeds: one line if stable."""
    return {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(h)},
        ).stdout
        for h in (1, 2)
    }
