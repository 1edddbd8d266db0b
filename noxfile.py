"""Developer sessions: `nox` runs tests, coverage, slow, lint and typecheck; bench, ablation,
smoke and mutants on request.

Sessions use the Python that runs nox (3.11 or newer), so `nox` works on a
machine with any one of them.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests", "coverage", "slow", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = None  # the interpreter running nox; pyproject.toml requires >= 3.11
WITH_EXTRAS = ".[plot,wandb,math,datasets,reasoning-gym]"
"""mathrl and the extras its tests use for real (math-verify, datasets): the suites that
skip without them would skip in CI too."""
TEST_TOOLS = [
    "hypothesis>=6.100",
    "pytest>=8",
    "pytest-cov>=5",
    "coverage[toml]>=7.10",
    "pytest-xdist>=3.5",
]


def test_env() -> dict[str, str | None]:
    """The test sessions' environment.

    MATHRL_REQUIRE_EXTRAS: every extra is installed here, so a test that needs one runs
    (and fails if it is missing) rather than skipping (`tests/conftest.py`).

    Bytecode written and reused, as Python does by default (`__pycache__/`, ignored by git).
    Where PYTHONDONTWRITEBYTECODE is set, as on some CI images, every process would compile
    mathrl again and pytest would rewrite every test module's asserts again: each xdist worker
    and each `python -m mathrl` a test starts, about 15 s of the fast suite. (Not a
    PYTHONPYCACHEPREFIX: that ignores the installed packages' bytecode, and compiling
    reasoning-gym's sources warns, which the suite makes an error.)"""
    return {"MATHRL_REQUIRE_EXTRAS": "1", "PYTHONDONTWRITEBYTECODE": None}


def _workers() -> str:
    """One xdist worker per core the session may use, and one more: while a test waits on a
    deadline or on a child process, the spare worker keeps its core busy (on 2 cores, the fast
    suite's wall time falls by about a tenth)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return str(cores + 1)


FAST = ["-n", _workers(), "--dist", "worksteal"]
"""The fast suite's pytest options: its workers, an idle one taking tests from a busy one (no
long tail on one core)."""


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The offline suite less `slow`, untraced (see `coverage`): the one to run while you work."""
    session.install("-e", WITH_EXTRAS, *TEST_TOOLS)
    session.run("pytest", *FAST, *session.posargs, env=test_env())


@nox.session(python=PYTHON)
def coverage(session: nox.Session) -> None:
    """The fast suite again under coverage's tracer, with the branch-coverage floor on src
    (95%, `[tool.coverage]` in pyproject.toml). A session of its own: on Python 3.11 the
    tracer doubles the suite's time, which `tests` keeps for the work in hand."""
    session.install("-e", WITH_EXTRAS, *TEST_TOOLS)
    session.run(
        "pytest",
        *FAST,
        "--cov=mathrl",
        "--cov-branch",
        "--cov-report=term-missing:skip-covered",
        "--cov-fail-under=95",
        *session.posargs,
        env=test_env(),
    )


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """The tests marked slow (learning runs, real signals, the whole fault and sandbox
    matrices), and every property again, the expensive ones with all their examples (no floor).
    """
    session.install("-e", WITH_EXTRAS, *TEST_TOOLS)
    session.run(
        "pytest",
        "-n",
        "auto",
        "-m",
        "slow or hypothesis",
        *session.posargs,
        env={"MATHRL_HYPOTHESIS": "thorough", **test_env()},
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff==0.17.6")  # pinned: a new release may add lint rules
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src and fakes, and on the tests too."""
    session.install("-e", WITH_EXTRAS, "mypy==2.4.1", *TEST_TOOLS)  # pinned, as ruff
    session.run("mypy", "--strict", "src", "fakes", "tests")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Step wall time in round trips, evaluation overhead, client overhead, peak memory."""
    session.install("-e", ".")
    session.run("python", "tests/bench/benchmark.py", *session.posargs)


@nox.session(python=PYTHON)
def ablation(session: nox.Session) -> None:
    """Each loss, with and without --fill-batch, at --kl-coef 0 and 0.1, seeds 0-4, on the fake:
    a table on stdout and the seed-0 runs in one plot (ablation/ablation.png)."""
    session.install("-e", ".[plot]")
    session.run("python", "tests/bench/ablation.py", *session.posargs)


@nox.session(python=PYTHON)
def smoke(session: nox.Session) -> None:
    """The real-API smoke tests: needs MINT_API_KEY, costs a little real compute."""
    session.install("-e", ".", *TEST_TOOLS)
    session.run("pytest", "-m", "smoke", "-p", "no:cacheprovider", *session.posargs)


TRIAGED = (
    "mathrl.step", "mathrl.loop", "mathrl.rollout", "mathrl.episodes", "mathrl.rewards",
    "mathrl.grpo", "mathrl.losses", "mathrl.evaluation", "mathrl.passk",
)  # fmt: skip
"""The modules whose every surviving mutant is killed or listed as equivalent, with why, in
tests/mutants_equivalent.txt: `nox -s mutants` fails on any other survivor of theirs."""


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Mutation testing of the core ([tool.mutmut] in pyproject.toml) by its fast tests, then
    each module's mutants by outcome: killed, survived (not listed as equivalent, each shown
    with its diff) and equivalent (tests/mutants_equivalent.txt, each with why), by
    tests/mutants_report.py. It fails on a survivor of the TRIAGED modules.

    Results are cached in mutants/; `mutmut show <name>` shows a mutant, and `nox -s mutants
    -- 'mathrl.grpo*'` runs one module's again (its names: mutmut's own). A full run takes
    30 to 60 minutes on two cores: run a module at a time while you work.
    """
    session.install("-e", WITH_EXTRAS, "mutmut>=3.8,<4", "pytest-timeout>=2.3", *TEST_TOOLS)
    session.run("mutmut", "run", "--max-children", "2", *session.posargs)
    session.run("python", "tests/mutants_report.py", *TRIAGED)
