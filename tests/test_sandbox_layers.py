"""The sandbox fails closed: its kernel layers are all there, or it says which is not and stops.

Layers are made unavailable for real where this machine allows it (a seccomp filter that
refuses `unshare` or Landlock's calls to the whole command, as a container might), and by
replacing the trainer's view of the machine where it cannot (another architecture). The
unprivileged configuration runs the same payloads as uid 65534 through `setpriv`, from copies
of every file it runs that uid 65534 can read (the checkout may sit in a private folder).

Running with missing layers is each code task's own option (`allow_missing_layers`), never
the process's: the command line's `--weak-sandbox` reaches the task it makes, and only it.

The fast suite keeps one configuration of each behaviour; the slow suite has the rest: each
other layer refused to a whole command, the unprivileged user's payloads, and `check-adapter`
of the code task run with a layer missing (about 70 sandboxes uncached, 5 to 15 s each).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import mathrl
import mathrl_fakes
from cli_process import run_main
from mathrl.tasks.code import sandbox
from mathrl.tasks.code.feedback import CodeFeedbackAdapter
from mathrl.tasks.code.kernel import ALL_LAYERS, bit, kernel_layers
from mathrl.tasks.code.sandbox import (
    ALLOW_MISSING_LAYERS,
    SandboxError,
    SandboxUnavailable,
    call_function,
    check_layers,
)
from mathrl.tasks.code.task import CodeAdapter, CodeProblem, run
from mathrl.workers import Workers
from sandbox_evidence import (
    EXEC,
    EXEC_UNDER_USR,
    LYING_NAME,
    NATIVE_LIBRARY,
    NUL_NAME,
    PYTHON_3_13,
    SECCOMP,
    UNMAPPABLE,
    denied,
    needs_python,
    refused,
    refused_outside,
    relocatable,
    removed,
    with_library,
)

REFUSE = str(Path(__file__).with_name("refuse_syscalls.py"))
UNSHARE, LANDLOCK_CREATE_RULESET, MOUNT, SETRESUID, PRCTL = 272, 444, 165, 117, 157
X86_64 = platform.machine() == "x86_64"
CODE_RUN = (
    "--backend",
    "fake",
    "--adapter",
    "code",
    "--steps",
    "1",
    "--batch",
    "2",
    "--group",
    "2",
)


def without_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Landlock "missing" in this process, by replacing the trainer's view of it; and no
    outcome of the code tasks' kept from before (one run with every layer would answer)."""
    kernel = kernel_layers()
    assert kernel is not None
    monkeypatch.setattr(sandbox, "kernel_layers", lambda: replace(kernel, landlock=None))
    run.cache_clear()


def test_the_layers_line_names_each_layer_a_child_got_and_warns_of_the_rest() -> None:
    # Worked examples, whatever this machine has (the run's own line, from this machine's
    # check, is test_a_run_records_its_layers_on_stderr_and_in_its_folder's). Every layer: as
    # root, uid 65534 and no user namespace; as a user, the user namespace is the identity.
    every = sandbox.Setup(ALL_LAYERS)
    rest = "pid+net+ipc+mount namespaces, tmpfs 1 MiB, no capabilities, Landlock ABI 6"
    root = sandbox.Layers(every, root=True, landlock_abi=6, file_bytes=2**20)
    assert root.describe() == f"sandbox: uid 65534, {rest}, seccomp x86-64"
    user = sandbox.Layers(every, root=False, landlock_abi=6, file_bytes=2**20)
    assert user.describe() == f"sandbox: user+{rest}, seccomp x86-64"
    assert root.complete
    # Without Landlock and seccomp, and a tmpfs of 64 KiB: a warning naming what is missing.
    lacking = every.mask & ~bit("landlock") & ~bit("seccomp")
    partial = sandbox.Layers(sandbox.Setup(lacking), False, 0, 64 * 2**10)
    assert not partial.complete
    assert partial.describe() == (
        "warning: sandbox without landlock, seccomp (missing layers allowed): "
        "user+pid+net+ipc+mount namespaces, tmpfs 64 KiB, no capabilities"
    )
    none = sandbox.Layers(sandbox.Setup(0), True, 0, 2**20)
    assert none.describe().endswith("(missing layers allowed): no kernel layers")


def test_a_missing_layer_stops_every_call_unless_missing_layers_are_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_landlock(monkeypatch)
    honest = "def f(x):\n    return x + 1\n"
    with pytest.raises(SandboxError, match=r"^sandbox: Landlock is off .*Linux >= 5\.13") as call:
        call_function(honest, "f", [[1]])
    with pytest.raises(SandboxUnavailable, match=r"^sandbox: Landlock is off[^;]*$") as check:
        check_layers()
    # The library names the option that would allow it; the command line words it.
    assert call.value.allowed_by == check.value.allowed_by == ALLOW_MISSING_LAYERS
    assert call_function(honest, "f", [[1]], allow_missing_layers=True).results == (2,)
    line = check_layers(allow_missing_layers=True).describe()
    assert line.startswith("warning: sandbox without landlock (missing layers allowed): "), line
    assert "Landlock" not in line
    with pytest.raises(SandboxError):  # the call before changed nothing for the next
        call_function(honest, "f", [[1]])


def test_another_architecture_counts_as_missing_seccomp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    elsewhere = kernel_layers.__wrapped__()  # functools.cache's function, uncached
    assert elsewhere is not None
    assert elsewhere.seccomp is None
    monkeypatch.setattr(sandbox, "kernel_layers", lambda: elsewhere)
    with pytest.raises(SandboxUnavailable, match="no seccomp filter for aarch64: only x86-64"):
        check_layers()


@pytest.mark.parametrize(
    ("weak", "strict"),
    [
        (CodeAdapter, CodeFeedbackAdapter),
        pytest.param(CodeFeedbackAdapter, CodeAdapter, marks=pytest.mark.slow),  # the mirror
    ],
)
def test_two_tasks_in_one_process_keep_their_own_policy(
    monkeypatch: pytest.MonkeyPatch, weak: type[CodeAdapter], strict: type[CodeAdapter]
) -> None:
    without_landlock(monkeypatch)
    allowing, refusing = weak(allow_missing_layers=True), strict()
    problem = CodeProblem("square", 3)
    code = refusing.reference_completion(problem)
    passed = allowing.compute_reward(code, problem)
    assert passed in (1.0, {"first_try": 1.0, "second_try": 0.0})
    with pytest.raises(SandboxError, match=r"^sandbox: Landlock is off") as refused:
        refusing.compute_reward(code, problem)  # the same code: the outcome kept is not its
    assert refused.value.allowed_by == ALLOW_MISSING_LAYERS
    assert allowing.preflight().startswith("warning: sandbox without landlock ")
    with pytest.raises(SandboxUnavailable, match=r"^sandbox: Landlock is off"):
        refusing.preflight()
    assert allowing.compute_reward(code + "# again\n", problem) == passed  # nor the other way


@pytest.mark.slow
def test_the_option_reaches_the_sandboxes_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sandbox started ahead for a task that refuses missing layers stops at its set-up and
    # is passed over; one started for a task that allows them serves its call.
    without_landlock(monkeypatch)
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
    problem = CodeProblem("square", 3)
    allowing, refusing = CodeAdapter(allow_missing_layers=True), CodeAdapter()
    code = allowing.reference_completion(problem)

    async def go(pool: Workers) -> None:
        assert await pool.run(lambda: allowing.compute_reward(code, problem)) == 1.0
        warm = sandbox.warm_of(pool)
        assert warm is not None
        for n in range(1, 4):
            deadline = time.monotonic() + 30
            while warm.ready < 1:
                assert time.monotonic() < deadline, "no sandbox was started ahead"
                await asyncio.sleep(0.01)
            again = functools.partial(allowing.compute_reward, code + f"# {n}\n", problem)
            assert await pool.run(again) == 1.0  # (new code: no outcome kept from before)
            assert warm.taken == n  # it took the one started ahead: that one allowed it
        with pytest.raises(SandboxError, match=r"^sandbox: Landlock is off"):
            await pool.run(lambda: refusing.compute_reward(code, problem))
        await asyncio.sleep(0.5)  # time to start one ahead for the refusing task
        with pytest.raises(SandboxError, match=r"^sandbox: Landlock is off"):
            await pool.run(lambda: refusing.compute_reward(code + "# 4\n", problem))

    with Workers(1) as pool:
        asyncio.run(go(pool))


needs_x86_64 = pytest.mark.skipif(not X86_64, reason="refuse_syscalls.py filters x86-64 calls")


@needs_x86_64
@pytest.mark.parametrize(
    ("refused", "says"),
    # The fast suite refuses one layer; the others, each its own message, in the slow suite.
    [
        (UNSHARE, "no net namespace for the child (Operation not permitted)"),
        pytest.param(LANDLOCK_CREATE_RULESET, "Landlock is off", marks=pytest.mark.slow),
        pytest.param(
            MOUNT,
            "the child has its own mount namespace, but mount is refused in it (Operation not "
            "permitted): a seccomp filter or security module around the trainer refuses it; in "
            "a container",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            PRCTL,
            "the seccomp filter cannot be installed: prctl is refused (Operation not permitted)",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            SETRESUID,
            "cannot switch the child to uid 65534 (Operation not permitted)",
            marks=[
                pytest.mark.slow,
                pytest.mark.skipif(os.geteuid() != 0, reason="only root switches the child's uid"),
            ],
        ),
    ],
)
def test_a_run_refuses_to_start_without_a_layer(tmp_path: Path, refused: int, says: str) -> None:
    run = subprocess.run(
        [sys.executable, REFUSE, str(refused), sys.executable, "-m", "mathrl", *CODE_RUN],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith("mathrl: error: sandbox: "), line
    assert says in line
    assert line.endswith("or run with what is there: --weak-sandbox (or MINT_RL_WEAK_SANDBOX=1)")
    assert not (tmp_path / "runs").exists()  # it stopped before training


@needs_x86_64
@pytest.mark.parametrize(
    "opt_in",
    [("--weak-sandbox",), pytest.param(("--weak-sandbox", "true"), marks=pytest.mark.slow)],
)
def test_the_opt_in_runs_with_what_is_there_and_says_what_is_missing(
    tmp_path: Path, opt_in: tuple[str, ...]
) -> None:
    folder = tmp_path / "run"
    run = subprocess.run(
        [sys.executable, REFUSE, str(UNSHARE), sys.executable, "-m", "mathrl", *CODE_RUN,
         "--log-dir", str(folder), *opt_in],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    warning = run.stderr.splitlines()[0]
    assert warning.startswith("mathrl: warning: sandbox without "), warning
    assert "pid, net, ipc, mount, tmpfs, seccomp (missing layers allowed): " in warning
    assert "Landlock ABI" in warning  # what could be set up still is
    assert run.stdout.splitlines()[1] == "Step 1: accuracy=75.0%, datums=2"
    recorded = json.loads((folder / "config.json").read_text())
    assert recorded["settings"]["weak_sandbox"] is True
    [record] = recorded["preflight"]
    assert record["line"] == warning.removeprefix("mathrl: ")


@needs_x86_64
@pytest.mark.slow  # three real runs under a seccomp filter; the fast suite has one of them
def test_a_resumed_run_takes_the_opt_in_as_given_again(tmp_path: Path) -> None:
    # Like the reliability settings, it is the resumed session's to give (or not).
    def under_refused_unshare(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, REFUSE, str(UNSHARE), sys.executable, "-m", "mathrl", *args],
            capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
            env={**os.environ, "TMPDIR": str(tmp_path), **env},
        )  # fmt: skip

    first = under_refused_unshare(*CODE_RUN, "--log-dir", "run", "--weak-sandbox")
    assert first.returncode == 0, first.stderr
    refused = under_refused_unshare("--resume", "run", "--steps", "2")
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.splitlines()[-1]
    assert last.startswith("mathrl: error: sandbox: no net namespace for the child"), last
    assert last.endswith("or run with what is there: --weak-sandbox (or MINT_RL_WEAK_SANDBOX=1)")
    resumed = under_refused_unshare("--resume", "run", "--steps", "2", MINT_RL_WEAK_SANDBOX="1")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[1].startswith("Step 2: ")
    records = json.loads((tmp_path / "run" / "config.json").read_text())["preflight"]
    assert len(records) == 2  # one a session, each with what was missing
    missing = "pid, net, ipc, mount, tmpfs, seccomp (missing layers allowed): "
    assert all(missing in record["line"] for record in records)


LOSES_LANDLOCK = """
from dataclasses import replace

from mathrl.tasks.code import CodeAdapter, sandbox
from mathrl.tasks.code.task import run


class LosesLandlock(CodeAdapter):
    name = "loses-landlock"

    def build_dataset(self, seed, step, batch):
        if step == 3:  # from here on, this machine cannot set up Landlock for a child
            kernel = sandbox.kernel_layers()
            sandbox.kernel_layers = lambda: replace(kernel, landlock=None)
            run.cache_clear()  # no outcome kept from before answers for a call
        return super().build_dataset(seed, step, batch)
"""


def test_a_layer_lost_during_a_run_ends_it_in_one_line_naming_the_opt_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The machine's failure, not the task's: no check-adapter advice, but the opt-in, as
    # before a run; resumed with it, the run goes on with what is there.
    monkeypatch.setattr(sandbox, "kernel_layers", kernel_layers)  # put back afterwards
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 0)  # each call sets up its own child
    run.cache_clear()
    (tmp_path / "losing.py").write_text(LOSES_LANDLOCK)
    args = ("--adapter", "losing:LosesLandlock", "--batch", "2", "--group", "2", "--steps", "4")
    failed = run_main(tmp_path, "--backend", "fake", *args, "--log-dir", "run")
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    [error] = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert error.startswith(
        "mathrl: error: task 'loses-landlock' failed: compute_reward raised SandboxError: "
        "sandbox: Landlock is off"
    ), error
    assert error.endswith("; or run with what is there: --weak-sandbox (or MINT_RL_WEAK_SANDBOX=1)")
    assert "check-adapter" not in failed.stderr
    assert "resume with: python -m mathrl --resume run" in failed.stderr
    resumed = run_main(tmp_path, "--resume", "run", "--weak-sandbox")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[-2].startswith("Step 4: "), resumed.stdout


@pytest.mark.slow  # check-adapter of the code task without Landlock: ~70 sandboxes, uncached
def test_the_variable_is_the_opt_in_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without_landlock(monkeypatch)  # in this process: check-adapter runs here
    refused = run_main(tmp_path, "check-adapter", "code")
    assert refused.returncode == 2
    assert refused.stderr.startswith("mathrl: error: sandbox: Landlock is off")
    assert refused.stderr.endswith("; or run with what is there: --weak-sandbox (or "
                                   "MINT_RL_WEAK_SANDBOX=1)\n")  # fmt: skip
    allowed = run_main(tmp_path, "check-adapter", "code", MINT_RL_WEAK_SANDBOX="1")
    assert allowed.returncode == 0, allowed.stderr
    first = allowed.stdout.splitlines()[0]  # the line that says it passed, then any warnings
    assert first.endswith(
        "; warning: sandbox without landlock (missing layers allowed): " + _layers_but_landlock()
    )
    again = run_main(tmp_path, "check-adapter", "code-feedback")  # nothing of it stayed behind
    assert again.returncode == 2
    assert again.stderr.startswith("mathrl: error: sandbox: Landlock is off")


@pytest.mark.slow
def test_sample_takes_the_opt_in_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trained = run_main(tmp_path, *CODE_RUN, "--log-dir", "run")
    assert trained.returncode == 0, trained.stderr
    without_landlock(monkeypatch)
    asked = ("sample", "--backend", "fake", "--adapter", "code", "--model-path", "run")
    refused = run_main(tmp_path, *asked)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("mathrl: error: sandbox: Landlock is off")
    allowed = run_main(tmp_path, *asked, "--problems", "2", "--weak-sandbox")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stderr.startswith("mathrl: warning: sandbox without landlock ")
    assert allowed.stdout.splitlines()[-1].startswith("Accuracy: ")
    # The variable is the opt-in too (as for check-adapter, in the slow suite), and nothing of
    # it stays behind for the next command.
    by_variable = run_main(tmp_path, *asked, "--problems", "2", MINT_RL_WEAK_SANDBOX="1")
    assert (by_variable.returncode, by_variable.stdout) == (0, allowed.stdout), by_variable.stderr
    assert by_variable.stderr == allowed.stderr
    again = run_main(tmp_path, *asked)
    assert (again.returncode, again.stderr) == (2, refused.stderr)


def test_a_task_without_a_sandbox_runs_the_same_with_the_opt_in(tmp_path: Path) -> None:
    # --weak-sandbox asks the task for an option the addition task does not have: a note,
    # and the run is the run without it.
    plain = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "plain")
    opted = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "opted",
                     "--weak-sandbox")  # fmt: skip
    assert (plain.returncode, opted.returncode) == (0, 0), opted.stderr
    assert opted.stdout.replace("opted", "plain") == plain.stdout
    note = (
        "mathrl: note: --weak-sandbox (MINT_RL_WEAK_SANDBOX) changes nothing for task "
        "'addition': it takes no allow_missing_layers option"
    )
    assert opted.stderr.splitlines() == [note, *plain.stderr.replace("plain", "opted").splitlines()]
    settings = json.loads((tmp_path / "opted" / "config.json").read_text())["settings"]
    assert settings["weak_sandbox"] is True  # recorded as asked


MINE = (
    "from mathrl.adapter import Unavailable\n"
    "from mathrl.tasks.addition import MathAdapter\n"
    "from mathrl.tasks.code import CodeAdapter\n"
    "def code(allow_missing_layers=False):\n"
    "    return CodeAdapter(allow_missing_layers=allow_missing_layers)\n"
    "class NeedsGpu(MathAdapter):\n"
    "    def preflight(self):\n"
    "        raise Unavailable('needs a GPU: none is visible here')\n"
)
"""mine.py: a task of one's own that takes the option, and one that no option makes ready."""


@pytest.mark.slow
def test_a_task_of_ones_own_takes_the_option_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A function (or class) whose parameters include allow_missing_layers is given it; a
    # refusal that no option lifts is said as it is, with no opt-in to suggest.
    without_landlock(monkeypatch)
    (tmp_path / "mine.py").write_text(MINE)
    mine = ("--backend", "fake", "--adapter", "mine:code", *CODE_RUN[4:])
    allowed = run_main(tmp_path, *mine, "--weak-sandbox")
    assert allowed.returncode == 0, allowed.stderr
    assert "mathrl: warning: sandbox without landlock (missing layers allowed): " in (
        allowed.stderr
    )
    refused = run_main(tmp_path, "check-adapter", "mine:code")
    assert refused.returncode == 2
    assert refused.stderr.endswith("or run with what is there: --weak-sandbox (or "
                                   "MINT_RL_WEAK_SANDBOX=1)\n")  # fmt: skip
    gpu = run_main(tmp_path, "check-adapter", "mine:NeedsGpu", "--weak-sandbox")
    assert gpu.returncode == 2
    assert gpu.stderr.splitlines() == [
        "mathrl: note: --weak-sandbox (MINT_RL_WEAK_SANDBOX) changes nothing for task "
        "'addition': it takes no allow_missing_layers option",
        "mathrl: error: needs a GPU: none is visible here",
    ]
    # A callable whose parameters cannot be read is asked nothing: made as without the flag.
    unread = run_main(tmp_path, "check-adapter", "builtins:dict", "--weak-sandbox")
    assert unread.returncode == 2
    assert unread.stderr.startswith("mathrl: error: check-adapter: ")


@pytest.mark.slow  # check-adapter of the code task without Landlock: ~70 sandboxes, uncached
def test_check_adapter_of_a_task_of_ones_own_takes_the_option_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_landlock(monkeypatch)
    (tmp_path / "mine.py").write_text(MINE)
    allowed = run_main(tmp_path, "check-adapter", "mine:code", "--weak-sandbox")
    assert allowed.returncode == 0, allowed.stderr
    assert "; warning: sandbox without landlock (missing layers allowed): " in allowed.stdout


def _layers_but_landlock() -> str:
    who = "uid 65534, " if os.geteuid() == 0 else "user+"
    seccomp = ", seccomp x86-64" if X86_64 else ""
    return f"{who}pid+net+ipc+mount namespaces, tmpfs 1 MiB, no capabilities{seccomp}"


@pytest.mark.slow
def test_a_run_records_its_layers_on_stderr_and_in_its_folder(tmp_path: Path) -> None:
    run = run_main(tmp_path, *CODE_RUN, "--log-dir", "run")
    assert run.returncode == 0, run.stderr
    line = run.stderr.splitlines()[0]
    assert line == f"mathrl: {check_layers().describe()}"
    [record] = json.loads((tmp_path / "run" / "config.json").read_text())["preflight"]
    assert record["line"] == line.removeprefix("mathrl: ")
    resumed = run_main(tmp_path, "--resume", "run", "--steps", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert line in resumed.stderr.splitlines()
    records = json.loads((tmp_path / "run" / "config.json").read_text())["preflight"]
    assert [r["line"] for r in records] == [record["line"]] * 2  # one per session


# --- as an unprivileged user -----------------------------------------------------------------

UNPRIVILEGED_SCRIPT = r"""
import asyncio, json, os, socket, sys, time
from mathrl.tasks.code import sandbox
from mathrl.tasks.code.sandbox import call_function, check_layers, SandboxUnavailable
from mathrl.workers import Workers

world, payloads = sys.argv[1], json.loads(sys.argv[2])
report = {"uid": os.getuid(), "version": "%d.%d" % sys.version_info[:2]}
try:
    report["layers"] = check_layers().describe()
except SandboxUnavailable as exc:
    report["refused"], report["allowed_by"] = str(exc), exc.allowed_by
    print(json.dumps(report))
    raise SystemExit


def started_ahead(sources):  # each call in a sandbox a worker pool started ahead of it
    async def go(pool):
        await pool.run(lambda: call_function("def f():\n    return 1\n", "f", [[]]))
        warm, outcomes = sandbox.warm_of(pool), []
        for source in sources:
            deadline = time.monotonic() + 30
            while warm.ready < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            outcomes.append(await pool.run(lambda: call_function(source, "f", [[]])))
        return outcomes, warm.taken

    with Workers(1) as pool:
        return asyncio.run(go(pool))


with socket.create_server(("127.0.0.1", 0)) as server:
    port = server.getsockname()[1]
    sources = {
        name: source.replace("WORLD", repr(world)).replace("PORT", str(port))
        for name, source in payloads.items()
    }
    for layers in ("both", "kernel"):  # every layer; then the kernel's alone, without the hook
        sandbox._LAYERS = frozenset({"hook", "kernel"} if layers == "both" else {"kernel"})
        for name, source in sources.items():
            outcome = call_function(source, "f", [[]])
            report[layers + ": " + name] = [outcome.status, outcome.results[0], outcome.detail]
    sandbox._LAYERS = frozenset({"hook", "kernel"})
    outcomes, report["ahead: taken"] = started_ahead(list(sources.values()))
    for name, outcome in zip(sources, outcomes):
        report["ahead: " + name] = [outcome.status, outcome.results[0], outcome.detail]
print(json.dumps(report))
"""


def syscall(arguments: str) -> str:
    """A payload that makes a system call by ctypes, its arguments Python expressions (FLAGS
    is a struct file_attr of FS_XFLAG_NOATIME | FS_XFLAG_NODUMP), and fails with its errno."""
    return (
        "import os, struct\n"
        "def f():\n"
        "    import ctypes\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    FLAGS = struct.pack('=QIIII', 0xC0, 0, 0, 0, 0)\n"
        f"    arguments = [{arguments}]\n"
        "    got = libc.syscall(*[ctypes.c_long(a) if type(a) is int else a for a in arguments])\n"
        "    if got < 0:\n"
        "        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
        "    return 'escaped'\n"
    )


BLOCK_DEVICES = tuple(f"/dev/{name}" for name in ("loop0", "sda", "vda", "xvda", "nvme0n1"))
"""Raw disks, root's (another user's files could be read through one), by the names they
usually have; /dev's listing is Landlock's to refuse, so the payload does not list it."""
BLOCK_DEVICE = next(filter(os.path.exists, BLOCK_DEVICES), None)
PAYLOADS = {  # each returns 'escaped' if it got out
    "read root's private file": ("def f():\n    return open(WORLD + '/root-only.txt').read()\n"),
    "read the trainer's own private file": (
        "def f():\n    return open(WORLD + '/own-private.txt').read()\n"
    ),
    "read a raw block device": (  # the first of BLOCK_DEVICES this machine has
        "import os\n"
        "def f():\n"
        f"    for device in {BLOCK_DEVICES!r}:\n"
        "        if os.path.exists(device):\n"
        "            os.close(os.open(device, os.O_RDONLY))\n"
        "            return 'escaped'\n"
        "    return 'none here'\n"
    ),
    "processes": (
        "import os\n"
        "def f():\n"
        "    return [os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit())]\n"
    ),
    "write outside": (
        "def f():\n    open(WORLD + '/new.txt', 'w').write('x')\n    return 'escaped'\n"
    ),
    "write through os.open's dir_fd": (
        "import os\n"
        "def f():\n"
        "    folder = os.open(WORLD, os.O_RDONLY)\n"
        "    os.close(os.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=folder))\n"
        "    return 'escaped'\n"
    ),
    "capabilities": (
        "def f():\n"
        "    status = open('/proc/self/status').read().splitlines()\n"
        "    return [line.split()[1] for line in status if line.startswith(('CapEff', 'CapBnd'))]\n"
    ),
    "fork": "import os\ndef f():\n    os.fork()\n    return 'escaped'\n",
    "start a process through _posixsubprocess": (
        "def f():\n"
        "    import _posixsubprocess, subprocess\n"
        "    try:\n"
        "        subprocess.run(['/bin/true'], check=True)\n"
        "    except OSError as exc:  # 3.13 names the program in it, 3.11 does not\n"
        "        raise OSError(exc.errno, exc.strerror) from None\n"
        "    return 'escaped'\n"
    ),
    "F_SETOWN the trainer": (
        "import fcntl, os\n"
        "def f():\n"
        "    r, w = os.pipe()\n"
        "    fcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())\n"
        "    return 'escaped'\n"
    ),
    "connect to the trainer's loopback": (
        "import socket\n"
        "def f():\n"
        "    socket.create_connection(('127.0.0.1', PORT), timeout=1)\n"
        "    return 'escaped'\n"
    ),
    "a banned module by a name with a NUL": f"import os\ndef f():\n    {NUL_NAME}\n",
    "a native library written into its folder": f"import os\ndef f():\n    {NATIVE_LIBRARY}\n",
    "a native library by a name that lies": f"import os\ndef f():\n    {LYING_NAME}\n",
    "execve of a binary under /usr": f"import os\ndef f():\n    {EXEC_UNDER_USR}\n",
    "the host's mount table": "def f():\n    return open('/proc/self/mountinfo').read()\n",
    "memory both writable and executable": (
        "import mmap\n"
        "def f():\n"
        "    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "    return 'escaped'\n"
    ),
    # The third review's (issue 37): as the trainer's uid, the trainer's own files were its.
    "1. an open of an object that says it is an int": (
        "import io\n"
        "class Q:\n"
        "    __class__ = int\n"
        "    def __fspath__(self):\n"
        "        return WORLD + '/own-private.txt'\n"
        "    def __repr__(self):\n"
        "        return repr(WORLD + '/own-private.txt')\n"
        "def f():\n"
        "    io.FileIO(Q(), 'w').write(b'x')\n"
        "    return 'escaped'\n"
    ),
    "2. the hook's state emptied through its frame": (
        "import os\n"
        "def f():\n"
        "    try:\n"
        "        os.kill(1, 0)\n"
        "    except PermissionError as exc:\n"
        "        exc.__traceback__.tb_next.tb_frame.f_locals['watched'] = frozenset()\n"
        "    import ctypes\n"
        "    return 'escaped'\n"
    ),
    "3. executable memory that is shared": (
        "import mmap\n"
        "def f():\n"
        "    mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_EXEC)\n"
        "    return 'escaped'\n"
    ),
    "4. the host's mounts by listmount": syscall(
        "458, struct.pack('=IIQQ', 24, 0, 2**64 - 1, 0), (ctypes.c_uint64 * 64)(), 64, 0"
    ),
    "5. the trainer's own file's flags by file_setattr": syscall(
        "469, -100, (WORLD + '/own-private.txt').encode(), FLAGS, 24, 0"
    ),
    "6. a watch (inotify)": syscall("294, 0"),
    "6. a watch (fanotify)": syscall("300, 0x200, 0"),
    "7. sys.monitoring": "import sys\ndef f():\n    sys.monitoring.use_tool_id(3, 'spy')\n",
    "a call no kernel knows yet (600)": syscall("600"),
    "fill the folder": (
        "def f():\n"
        "    written = 0\n"
        "    for i in range(64):\n"
        "        try:\n"
        "            with open(f'{i}.bin', 'wb') as file:\n"
        "                written += file.write(bytes(2**19))\n"
        "        except OSError:\n"
        "            break\n"
        "    return written\n"
    ),
    "a deep tree left behind": (
        "import os\n"
        "def f():\n"
        "    path, depth = 'd', 0\n"
        "    while depth < 1400:\n"
        "        try:\n"
        "            os.mkdir(path)\n"
        "        except OSError:  # the tmpfs holds 1,024 entries\n"
        "            break\n"
        "        path, depth = path + '/d', depth + 1\n"
        "    return depth\n"
    ),
}


FILL, DEEP = "fill the folder", "a deep tree left behind"
STOPPED = {  # payload: the evidence of what stops it with the hook (None: the same as without)
    # and without it (see sandbox_evidence)
    "read root's private file": (None, denied("WORLD/root-only.txt")),  # its mode: identity
    "read the trainer's own private file": (  # the child's uid may: Landlock alone refuses
        None,
        denied("WORLD/own-private.txt"),
    ),
    "write outside": (refused_outside("open"), denied("WORLD/new.txt")),  # Landlock
    "write through os.open's dir_fd": (refused_outside("open"), denied("WORLD")),  # Landlock
    "fork": (refused("os.fork"), SECCOMP),
    "start a process through _posixsubprocess": (
        refused("importing _posixsubprocess"),
        SECCOMP,
    ),
    "F_SETOWN the trainer": (refused("fcntl command 8"), SECCOMP),
    "connect to the trainer's loopback": (refused("socket.getaddrinfo"), SECCOMP),
    "a banned module by a name with a NUL": (refused("importing a module by that name"), EXEC),
    "a native library by a name that lies": (
        refused("importing a module by that name"),
        UNMAPPABLE,
    ),
    "a native library written into its folder": (
        refused("loading that extension module"),
        UNMAPPABLE,  # the tmpfs's noexec
    ),
    "execve of a binary under /usr": (refused("os.exec"), EXEC),  # seccomp's exec filter
    "memory both writable and executable": (None, SECCOMP),
    "1. an open of an object that says it is an int": (
        refused("open of a path not a str or bytes"),
        denied("WORLD/own-private.txt"),
    ),
    "3. executable memory that is shared": (None, SECCOMP),
    **{  # by ctypes: the hook refuses ctypes, seccomp the call
        name: (refused("importing ctypes"), SECCOMP)
        for name, source in PAYLOADS.items()
        if "libc.syscall" in source
    },
}
HOOK_ONLY = {  # payload: the hook's evidence, with the hook (without it, native code is open)
    "2. the hook's state emptied through its frame": refused("importing ctypes"),
    "7. sys.monitoring": removed("sys", "monitoring"),
}
if BLOCK_DEVICE is not None:  # its mode: identity
    STOPPED["read a raw block device"] = (None, denied(BLOCK_DEVICE))
RETURNED: dict[str, object] = {  # payload: what it returns, in every configuration
    **({"read a raw block device": "none here"} if BLOCK_DEVICE is None else {}),
    "processes": [1, ["1"]],  # it sees only itself: its pid namespace
    "capabilities": ["0" * 16, "0" * 16],  # effective, bounding
    "the host's mount table": "",  # hidden
}


COMMAND_LINE_NEEDS = ("rich", "pygments", "markdown_it", "mdurl", "dotenv", "jinja2", "markupsafe")
"""What `python -m mathrl --backend fake` imports besides the standard library."""


@pytest.fixture
def unprivileged(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a folder of copies that uid 65534 can read: mathrl and what it imports, and
    refuse_syscalls.py; a world folder open to every user). Copies, since the checkout may
    sit in a folder only its owner may enter (a clone under root's home, or in mktemp -d)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become uid 65534")
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs a Python that uid 65534 can run: /usr/bin/python3")
    top = Path(tempfile.mkdtemp(prefix="mathrl-unprivileged-", dir="/var/tmp"))
    code, world = top / "code", top / "world"
    for package in (mathrl, mathrl_fakes, *map(importlib.import_module, COMMAND_LINE_NEEDS)):
        assert package.__file__ is not None
        shutil.copytree(Path(package.__file__).parent, code / package.__name__)
    shutil.copy(REFUSE, code / Path(REFUSE).name)
    info = code / f"mathrl-{mathrl.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: mathrl\nVersion: {mathrl.__version__}\n"
    )
    world.mkdir()
    private, own = world / "root-only.txt", world / "own-private.txt"
    private.write_text("secret")
    own.write_text("MINT_API_KEY=sk-secret")
    for path in [top, *top.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o644)
    private.chmod(0o600)
    own.chmod(0o600)
    os.chown(own, 65534, 65534)  # the unprivileged trainer's own: only Landlock keeps it
    yield code, world
    shutil.rmtree(top)


def as_nobody(
    code: Path,
    world: Path,
    refuse: int | None = None,
    python: str = "/usr/bin/python3",
    nobody: bool = True,
) -> dict[str, Any]:
    """The report of UNPRIVILEGED_SCRIPT, run by `python` as uid 65534 (or, not `nobody`, as
    root), with `code` (see `unprivileged`) on its path."""
    payloads = json.dumps({name: with_library(source) for name, source in PAYLOADS.items()})
    command = [python, "-c", UNPRIVILEGED_SCRIPT, str(world), payloads]
    if refuse is not None:  # its own copy: uid 65534 may not reach the checkout's
        command = [python, str(code / Path(REFUSE).name), str(refuse), *command]
    user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if nobody else []
    run = subprocess.run(
        [*user, *command],
        capture_output=True, text=True, cwd=world.parent, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), "TMPDIR": str(world.parent)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report: dict[str, Any] = json.loads(run.stdout)
    return report


@pytest.fixture(scope="module")
def python_3_13_for_anyone() -> Iterator[str]:
    """pyenv's Python 3.13, copied where uid 65534 can run it (pyenv's lives under /root,
    which it cannot enter), as a relocatable build: its libpython found through $ORIGIN."""
    with relocatable(needs_python(PYTHON_3_13)) as python:
        yield str(python)


@pytest.mark.slow  # as uid 65534 in real processes: the slow suite
@pytest.mark.parametrize("version", ["3.11", "3.13"])
def test_as_an_unprivileged_user_every_payload_fails(
    unprivileged: tuple[Path, Path], request: pytest.FixtureRequest, version: str
) -> None:
    # Debian's 3.11; pyenv's 3.13 as a relocatable copy, whose sandboxes started ahead work.
    code, world = unprivileged
    python = "/usr/bin/python3"
    if version == "3.13":
        python = request.getfixturevalue("python_3_13_for_anyone")
    every_payload_failed(code, world, python, version, nobody=True)


AHEAD_ON_THIS_PYTHON = r"""
import asyncio, json, sys
from dataclasses import replace
from mathrl.tasks.code import sandbox
from mathrl.workers import Workers

if sys.argv[1] == "unresolved":  # as before issue 37: its loader is not told where it is
    kernel = sandbox.kernel_layers()
    sandbox.kernel_layers = lambda: replace(kernel, origin=None)
sandbox.WARM_SANDBOXES = 4
started, start = [], sandbox._start


def counted(kind, lean=False):
    started.append(lean)
    return start(kind, lean)


sandbox._start = counted


async def calls(pool):
    call = lambda: sandbox.call_function("def f():\n    return 2\n", "f", [[]])
    outcomes = [await pool.run(call)]
    for _ in range(5):
        await asyncio.sleep(0.5)  # time to start the pool's sandboxes, and for them to end
        outcomes.append(await pool.run(call))
    return outcomes


with Workers(1) as pool:
    outcomes = asyncio.run(calls(pool))
    warm = sandbox.warm_of(pool)
    report = {"results": [o.results for o in outcomes], "taken": warm.taken,
              "failure": warm.failure, "started ahead": started.count(True)}
print(json.dumps(report))
"""


@pytest.mark.slow  # a trainer on a relocatable 3.13 in real processes: the slow suite
@pytest.mark.parametrize("loader", ["resolved", "unresolved"])
def test_a_relocatable_interpreters_sandboxes_started_ahead_serve_or_say_why_not(
    unprivileged: tuple[Path, Path], python_3_13_for_anyone: str, loader: str
) -> None:
    # Its libpython is found through $ORIGIN, which its loader reads from /proc/self/exe: a
    # sandbox's first process, outside the pid namespace whose /proc it sees, cannot read it,
    # so each sandbox started ahead exited 127 before its call, and the pool started them
    # again and again. Told the folder (Kernel.origin), they serve; not told, the pool says
    # so once, with the loader's own words, and the calls start their own.
    code, world = unprivileged
    run = subprocess.run(
        [python_3_13_for_anyone, "-c", AHEAD_ON_THIS_PYTHON, loader],
        capture_output=True, text=True, cwd=world, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), "TMPDIR": str(world)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["results"] == [[2]] * 6
    if loader == "resolved":
        assert (report["taken"], report["failure"], run.stderr) == (5, None, "")
        return
    failure = report["failure"]
    assert failure == (
        "a sandbox started ahead ended before its call (exited with code 127: "
        f"{python_3_13_for_anyone}: error while loading shared libraries: "
        "libpython3.13.so.1.0: cannot open shared object file: No such file or directory)"
    )
    assert run.stderr.splitlines() == [
        f"mathrl: warning: sandbox: {failure}: no sandbox is started ahead any more, each "
        "call starts its own"
    ]
    assert report["taken"] == 0
    assert report["started ahead"] <= 4 + 1  # the pool's size, then none: no restarting


@pytest.mark.slow  # a trainer on pyenv's 3.13 in a real process: the slow suite
def test_as_root_every_payload_fails_on_python_3_13(
    unprivileged: tuple[Path, Path], python_3_13_for_anyone: str
) -> None:
    code, world = unprivileged
    every_payload_failed(code, world, python_3_13_for_anyone, "3.13", nobody=False)


def every_payload_failed(code: Path, world: Path, python: str, version: str, nobody: bool) -> None:
    """Every payload of PAYLOADS, run by a trainer on `python` as uid 65534 (or root), failed
    with the evidence of the layer named for it, fresh and started ahead."""
    before = sorted(p.name for p in world.iterdir())
    report = as_nobody(code, world, python=python, nobody=nobody)
    assert report["uid"] == (65534 if nobody else 0)
    assert report["version"] == version
    layers = report["layers"]
    assert isinstance(layers, str)
    who = "user+pid" if nobody else "uid 65534, pid"
    assert layers.startswith(f"sandbox: {who}+net+ipc+mount namespaces, tmpfs 1 MiB, "), layers
    assert "no capabilities, Landlock ABI" in layers
    assert report["ahead: taken"] == len(PAYLOADS)  # "ahead": in sandboxes started ahead
    named = set(STOPPED) | set(HOOK_ONLY) | set(RETURNED) | {FILL, DEEP}
    assert named == set(PAYLOADS)  # each has its evidence
    for layers in ("both", "kernel", "ahead"):  # "both" and "ahead" with the hook
        for name, (with_hook, without) in STOPPED.items():
            error = without if layers == "kernel" or with_hook is None else with_hook
            expected = ["ok", None, "input 0: " + error.replace("WORLD", str(world))]
            assert report[f"{layers}: {name}"] == expected, (layers, name)
        for name, error in HOOK_ONLY.items():
            if layers != "kernel":
                assert report[f"{layers}: {name}"] == ["ok", None, "input 0: " + error]
        for name, value in RETURNED.items():
            assert report[f"{layers}: {name}"] == ["ok", value, ""], (layers, name)
        status, written, _ = report[f"{layers}: {FILL}"]
        assert status == "ok"
        assert 0 < written <= 2**20  # the folder's total is capped
        status, depth, _ = report[f"{layers}: {DEEP}"]
        assert status == "ok"
        assert depth >= 1000  # past Python's recursion limit, and the trainer survived it
    assert sorted(p.name for p in world.iterdir()) == before  # nothing written outside
    assert not list(world.parent.glob("mathrl-sandbox-*"))  # the trainer cleaned up


@needs_x86_64
@pytest.mark.slow  # as uid 65534 in real processes: the slow suite
def test_as_an_unprivileged_user_without_user_namespaces_the_sandbox_refuses(
    unprivileged: tuple[Path, Path],
) -> None:
    code, world = unprivileged
    report = as_nobody(code, world, refuse=UNSHARE)
    refused = report["refused"]
    assert isinstance(refused, str)
    assert refused.startswith("sandbox: no user namespace for the child (Operation not permitted)")
    assert "sysctl -w kernel.unprivileged_userns_clone=1" in refused
    assert report["allowed_by"] == ALLOW_MISSING_LAYERS  # the command line words the opt-in


@needs_x86_64
@pytest.mark.slow  # as uid 65534 in real processes: the slow suite
def test_as_an_unprivileged_user_a_refused_mount_is_named_as_mount(
    unprivileged: tuple[Path, Path],
) -> None:
    # Its user namespace was made: the refusal is mount's, not that user namespaces are off.
    code, world = unprivileged
    report = as_nobody(code, world, refuse=MOUNT)
    refused = report["refused"]
    assert isinstance(refused, str)
    assert refused.startswith(
        "sandbox: the child has its own mount namespace, but mount is refused in it (Operation "
        "not permitted)"
    ), refused
    assert "user namespaces" not in refused


@pytest.mark.slow  # as uid 65534 in real processes: the slow suite
def test_as_an_unprivileged_user_an_interpreter_under_tmp_is_named(
    unprivileged: tuple[Path, Path],
) -> None:
    # The child's private tmpfs over /tmp would hide it: the refusal says so (it said only
    # "No such file or directory"), and with missing layers allowed the child reaches it.
    code, world = unprivileged
    folder = Path(tempfile.mkdtemp(prefix="mathrl-python-", dir="/tmp"))
    try:
        python = folder / "python3"
        shutil.copy2("/usr/bin/python3", python)  # Debian's: it needs no libpython beside it
        folder.chmod(0o755)
        script = (
            "from mathrl.tasks.code.sandbox import check_layers, SandboxUnavailable\n"
            "try:\n"
            "    check_layers()\n"
            "except SandboxUnavailable as exc:\n"
            "    print(exc)\n"
            "print(check_layers(allow_missing_layers=True).describe())\n"
        )
        run = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(python),
             "-c", script],
            capture_output=True, text=True, cwd=world, timeout=120, check=False,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), "TMPDIR": str(world)},
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        refused, weak = run.stdout.splitlines()
        assert refused == (
            f"sandbox: the interpreter {python} (or its installation, /usr) is under /tmp, which "
            "the child's private tmpfs covers: install Python outside /tmp"
        )
        assert weak.startswith("warning: sandbox without tmpfs (missing layers allowed): user+"), (
            weak
        )
    finally:
        shutil.rmtree(folder)


@pytest.mark.slow  # as uid 65534 in real processes: the slow suite
def test_as_an_unprivileged_user_a_run_records_its_layers(unprivileged: tuple[Path, Path]) -> None:
    code, world = unprivileged
    run = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
         "-m", "mathrl", *CODE_RUN, "--log-dir", str(world / "run")],
        capture_output=True, text=True, cwd=world, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), "HOME": str(world),
             "TMPDIR": str(world)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    line = run.stderr.splitlines()[0]
    assert line.startswith("mathrl: sandbox: user+pid+net+ipc+mount namespaces, tmpfs 1 MiB, "), (
        line
    )
    [record] = json.loads((world / "run" / "config.json").read_text())["preflight"]
    assert record["line"] == line.removeprefix("mathrl: ")
