"""The sandbox: honest code gets its results back; hostile code scores nothing and changes nothing.

Every hostile case runs under the production set-up, and the ones a single layer is meant to
stop also run with only that layer (the audit hook, or the kernel layers). Each names the layer
that must stop it and asserts that layer's own evidence (`sandbox_evidence`): the hook's
refusal, seccomp's EPERM for a call that would otherwise succeed or fail otherwise, Landlock's
EACCES in a world whose file modes let every user in, the tmpfs's ENOSPC, the uid or pid the
child sees. So an outcome without it fails, a child that crashed at start-up among them. Each
call runs against a `world` folder, snapshotted before and after, with the sandbox's own temp
folders under `sandboxes`, which must be empty afterwards. Timing is never a criterion beyond
"finished within the wall limit and a margin".
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dis
import functools
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import CodeType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from conftest import examples
from mathrl.tasks.code import harness, sandbox
from mathrl.tasks.code.harness import HARNESS
from mathrl.tasks.code.kernel import NOBODY, WAITER, _exposed, hidden_by, kernel_layers
from mathrl.tasks.code.sandbox import (
    STATUSES,
    JsonValue,
    Limits,
    Outcome,
    call_function,
    remove_tree,
)
from mathrl.workers import Workers, in_process
from sandbox_evidence import (
    EXEC,
    EXEC_UNDER_USR,
    LYING_NAME,
    NATIVE_LIBRARY,
    NUL_NAME,
    PYTHON_3_13,
    SECCOMP,
    UNMAPPABLE,
    base_prefix,
    denied,
    needs_python,
    refused,
    refused_outside,
    removed,
    with_library,
)

FAST = Limits(cpu_seconds=1, wall_seconds=3.0)
HANG = 60.0
"""Seconds past its wall limit after which a call counts as hung. Not a timing test: the
outcomes show each limit acted (their details say which); this bound is far past any
loaded machine's slowness, so a call that never returns fails instead of stalling the suite."""


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under `root`: mode, size, mtime and (for files) content."""
    entries = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        entries[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns, content)
    return entries


def no_children_left() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def open_warm(pool: Workers) -> sandbox.Warm:
    """The sandboxes the open `pool` keeps started ahead of its calls."""
    warm = sandbox.warm_of(pool)
    assert warm is not None, "the pool is open"
    return warm


def warm_call(
    source: str,
    function: str,
    inputs: Sequence[Sequence[JsonValue]],
    limits: Limits,
    allow_missing_layers: bool = False,
) -> Outcome:
    """`call_function` in a sandbox that a worker pool started ahead of the call."""
    with Workers(1) as pool:
        warm = primed(pool, 1, limits, allow_missing_layers)
        taken = warm.taken
        call = functools.partial(
            call_function, source, function, inputs, limits, allow_missing_layers
        )
        (outcome,) = in_pool(pool, call)
        assert warm.taken == taken + 1
        return outcome


@dataclass(frozen=True)
class Box:
    world: Path  # what the completion must not touch
    sandboxes: Path  # where call_function makes its temp folders
    warm: bool = False  # each call in a sandbox started ahead of it (then the pool closes)
    allow_missing_layers: bool = False  # for a machine (made) without some kernel layer

    def run(
        self,
        source: str,
        inputs: Sequence[Sequence[JsonValue]] = ((),),
        limits: Limits = FAST,
        function: str = "f",
    ) -> Outcome:
        before = snapshot(self.world)
        started = time.monotonic()
        call = warm_call if self.warm else call_function
        source = source.replace("WORLD", repr(str(self.world)))
        outcome = call(source, function, inputs, limits, self.allow_missing_layers)
        assert time.monotonic() - started < limits.wall_seconds + HANG
        assert snapshot(self.world) == before
        assert list(self.sandboxes.iterdir()) == []
        assert no_children_left()
        assert outcome.status in STATUSES
        assert len(outcome.results) == len(inputs)
        assert "\n" not in outcome.detail
        return outcome


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Box]:
    # The world is outside /tmp (the child's /tmp is its own tmpfs) and open to every user, and
    # keep.txt is the child's own (uid 65534's, or the trainer's), so only the sandbox's layers
    # stand between the code and it, not file modes or owners: each refusal is a layer's.
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(tmp_path)
    top = Path(tempfile.mkdtemp(prefix="mathrl-test-", dir=parent))
    world, sandboxes = top / "world", top / "sandboxes"
    (world / "sub").mkdir(parents=True)
    (world / "keep.txt").write_text("keep")
    for path in (top, world, world / "sub", world / "keep.txt"):
        path.chmod(0o777 if path.is_dir() else 0o666)
    if os.geteuid() == 0:
        os.chown(world / "keep.txt", NOBODY, NOBODY)
    sandboxes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(sandboxes))
    yield Box(world, sandboxes)
    remove_tree(str(top))


@pytest.fixture(params=["fresh", "warm"])
def any_box(request: pytest.FixtureRequest, box: Box, monkeypatch: pytest.MonkeyPatch) -> Box:
    """`box`, then `warm_box`: for how a call ends, which a started-ahead sandbox's own waiting
    process reports."""
    if request.param == "warm":
        monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
        return replace(box, warm=True)
    return box


@pytest.fixture
def warm_box(box: Box, monkeypatch: pytest.MonkeyPatch) -> Box:
    """`box`, each call in a sandbox started ahead of it (a pool that keeps one ready)."""
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
    return replace(box, warm=True)


def alone(*which: str) -> list[Any]:
    """Configurations of a layer alone (or the kernel layers without Landlock, "identity"):
    in the slow suite, where the fast one runs the same payload with every layer."""
    return [pytest.param(name, marks=pytest.mark.slow) for name in which]


SLOW = [pytest.mark.slow]
WARM_IS_SLOW = pytest.mark.parametrize(
    "any_box", ["fresh", pytest.param("warm", marks=pytest.mark.slow)], indirect=True
)
"""For a limit that stops the code: the fresh sandbox here, one started ahead in the slow suite
(`test_a_kill_is_reported_alike_by_either_sandbox` keeps how a waiting one reports a kill)."""


# What the machine offers the kernel layers is asked here, not of the sandbox: a layer that
# breaks must fail its tests, not skip them.


@functools.cache
def landlock_and_seccomp() -> bool:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    word = ctypes.c_ulong
    abi = ctypes.CDLL(None).syscall(word(444), None, word(0), word(1))  # Landlock's ABI version
    return int(abi) >= 1 and "Seccomp:" in Path("/proc/self/status").read_text()


@pytest.fixture(params=["both", *alone("hook", "kernel")])
def layers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The production set-up, then each optional layer on its own."""
    return use_layers(str(request.param), monkeypatch)


def use_layers(which: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the sandbox with `which` layers: "both", "hook" or "kernel"."""
    if which == "kernel" and not landlock_and_seccomp():
        pytest.skip("the kernel layers need Landlock and seccomp on x86-64")
    chosen = {"both": {"hook", "kernel"}, "hook": {"hook"}, "kernel": {"kernel"}}[which]
    monkeypatch.setattr(sandbox, "_LAYERS", frozenset(chosen))
    return which


def root_only(world: Path) -> None:
    """`world/root-only.txt`, "secret", readable by its owner (root) only."""
    private = world / "root-only.txt"
    private.write_text("secret")
    private.chmod(0o600)


# --- honest code -----------------------------------------------------------------------------


def test_a_correct_function_returns_its_results(box: Box) -> None:
    source = "def add(a, b):\n    return a + b\n"
    inputs: list[list[JsonValue]] = [[1, 2], [-5, 5], [0.5, 0.25], ["a", "b"], [[1], [2]]]
    outcome = box.run(source, inputs, function="add")
    assert outcome == Outcome("ok", (3, 0, 0.75, "ab", [1, 2]), "")


def test_the_child_runs_the_harness_the_trainer_compiled_or_else_its_source(
    any_box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The function's caller is the harness's main: compiled here, its file is "<harness>";
    # a child whose interpreter has another cache tag compiles the source (exec's "<string>").
    source = "import sys\ndef f():\n    return sys._getframe(1).f_code.co_filename\n"
    assert any_box.run(source, [[]]) == Outcome("ok", ("<harness>",), "")
    compiled = harness.arguments()
    other = (*compiled[:2], "cpython-0", *compiled[3:])  # "-c", BOOT, tag, code, source
    monkeypatch.setattr(harness, "arguments", lambda: other)
    assert any_box.run(source, [[]]) == Outcome("ok", ("<string>",), "")


def test_a_call_that_raises_loses_only_its_own_result(box: Box) -> None:
    outcome = box.run("def f(x):\n    return 10 // x\n", [[5], [0], [2]])
    assert outcome.status == "ok"
    assert outcome.results == (2, None, 5)
    assert outcome.detail == "input 1: ZeroDivisionError: integer division or modulo by zero"


def test_a_syntax_error_is_an_error_with_a_one_line_detail(box: Box) -> None:
    outcome = box.run("def f(:\n    return 1\n", [[1], [2]])
    assert outcome.status == "error"
    assert outcome.results == (None, None)
    assert outcome.detail.startswith("SyntaxError: ")


@pytest.mark.parametrize(
    ("source", "detail"),
    [
        ("def g():\n    return 1\n", "LookupError: the code defines no function f"),
        ("f = 3\n", "LookupError: the code defines no function f"),
        ("raise SystemExit(0)\n", "SystemExit: 0"),
        ("import no_such_module\n", "ModuleNotFoundError: No module named 'no_such_module'"),
    ],
)
def test_source_that_defines_no_callable_is_an_error(box: Box, source: str, detail: str) -> None:
    assert box.run(source, [[1]]) == Outcome("error", (None,), detail)


def test_hostile_exception_text_reaches_the_logs_as_one_printable_line(box: Box) -> None:
    source = "def f():\n    raise ValueError('\\x1b[2J\\nforged\\udcff line' + 'x' * 999)\n"
    outcome = box.run(source)
    # The escape and the surrogate are shown escaped, never sent to the terminal.
    assert outcome.detail.startswith("input 0: ValueError: \\x1b[2J forged\\udcff linexxx")
    assert outcome.detail.isprintable()
    assert re.search(r"x\.\.\. \([0-9,]+ characters\)$", outcome.detail)  # cut, with its length


def test_results_are_json_values_and_anything_else_is_none(box: Box) -> None:
    source = (
        "class Cheat:\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "def f(kind):\n"
        "    return {'set': {1}, 'object': Cheat(), 'tuple': (1, 2), 'dict': {1: 'one'},\n"
        "            'none': None, 'bytes': b'x'}[kind]\n"
    )
    kinds = ["set", "object", "tuple", "dict", "none", "bytes"]
    outcome = box.run(source, [[kind] for kind in kinds])
    assert outcome.results == (None, None, [1, 2], {"1": "one"}, None, None)


def test_printing_inside_the_function_does_not_corrupt_results(box: Box) -> None:
    source = (
        "import sys\n"
        'print(\'{"status": "ok", "detail": "", "results": [1]}\')\n'
        "def f(x):\n"
        "    print('noise', x)\n"
        "    print('more noise', file=sys.stderr)\n"
        "    sys.stdout.buffer.write(b'raw noise\\n')\n"
        "    return x * 2\n"
    )
    assert box.run(source, [[1], [2]]) == Outcome("ok", (2, 4), "")


def test_huge_and_deep_results_become_none_and_break_nothing(box: Box) -> None:
    source = (
        "def f(kind):\n"
        "    if kind == 'huge':\n"
        "        return 10 ** 100_000\n"
        "    if kind == 'long':\n"
        "        return 'x' * 10 ** 6\n"
        "    if kind == 'deep':\n"
        "        value = []\n"
        "        for _ in range(100_000):\n"
        "            value = [value]\n"
        "        return value\n"
        "    if kind == 'loop':\n"
        "        value = []\n"
        "        value.append(value)\n"
        "        return value\n"
        "    if kind == 'recurse':\n"
        "        return f(kind)\n"
        "    return 10 ** 50\n"
    )
    outcome = box.run(source, [["huge"], ["long"], ["deep"], ["loop"], ["recurse"], ["fine"]])
    assert outcome.status == "ok"
    assert outcome.results == (None, None, None, None, None, 10**50)


def test_the_code_may_use_its_own_folder_and_the_standard_library(box: Box) -> None:
    source = (
        "import collections, dataclasses, fractions, functools, heapq, itertools, math, os\n"
        "import random, re, statistics, string, tempfile, typing\n"
        "import decimal, hashlib, mmap  # native libraries mapped executable, memory writable\n"
        "def f(text):\n"
        "    page = mmap.mmap(-1, 4096)\n"
        "    page[:2] = hashlib.sha256(b'').hexdigest()[:2].encode()  # 'e3'\n"
        "    assert page[:2] == b'e3' and str(decimal.Decimal(1) / 8) == '0.125'\n"
        "    os.mkdir('notes')\n"
        "    with open('notes/text.txt', 'w') as file:\n"
        "        file.write(text)\n"
        "    with tempfile.TemporaryFile() as scratch:\n"
        "        scratch.write(b'x')\n"
        "    with tempfile.TemporaryDirectory() as scratch:\n"
        "        os.mkdir(os.path.join(scratch, 'inner'))\n"
        "    with open(os.path.join(os.getcwd(), 'notes', 'text.txt')) as file:\n"
        "        words = collections.Counter(re.findall('[a-z]+', file.read()))\n"
        "    return [words.most_common(1)[0][0], math.comb(5, 2), sorted(os.listdir('.'))]\n"
    )
    assert box.run(source, [["a b b c"]]).results == (["b", 10, ["notes"]],)


def test_bad_arguments_from_the_programmer_are_value_errors() -> None:
    with pytest.raises(ValueError, match="function must be a Python identifier"):
        call_function("", "not a name", [])
    with pytest.raises(ValueError, match="inputs must be a sequence of argument sequences"):
        call_function("", "f", ["ab"])
    with pytest.raises(ValueError, match="inputs must hold JSON values only"):
        call_function("", "f", [[{1, 2}]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"Limits.cpu_seconds must be a number >= 1, got 0"):
        Limits(cpu_seconds=0)
    with pytest.raises(ValueError, match=r"Limits.memory_bytes must be a number >= 1, got 1.5"):
        Limits(memory_bytes=1.5)  # type: ignore[arg-type]


@settings(max_examples=examples(3, 10), deadline=None, database=None)  # a sandbox each
@given(source=st.text())
def test_any_text_as_source_gives_an_outcome(source: str) -> None:
    outcome = call_function(source, "f", [[1]], FAST)
    assert outcome.status in STATUSES
    assert len(outcome.results) == 1
    assert "\n" not in outcome.detail


# --- hostile code that the limits stop, whatever the layers ----------------------------------


@WARM_IS_SLOW
def test_an_endless_loop_is_stopped_by_the_cpu_limit(any_box: Box) -> None:
    limits = Limits(cpu_seconds=1, wall_seconds=30.0)  # however busy the machine, CPU ends it
    outcome = any_box.run("def f():\n    while True:\n        pass\n", limits=limits)
    assert outcome == Outcome("timeout", (None,), "cpu limit of 1 s exceeded")


@WARM_IS_SLOW
def test_an_idle_wait_is_stopped_by_the_wall_clock(any_box: Box) -> None:
    limits = Limits(cpu_seconds=1, wall_seconds=1.0)
    outcome = any_box.run(
        "import time\ndef f():\n    time.sleep(60)\n    return 1\n", limits=limits
    )
    assert outcome == Outcome("timeout", (None,), "killed after 1 s (wall-clock limit)")


@WARM_IS_SLOW
@pytest.mark.parametrize(
    "body",
    [
        "b = bytearray(10 * 2**30)\n    return 'allocated'",
        "chunks = []\n    while True:\n        chunks.append([0] * 10**6)",
    ],
    ids=["10GB-at-once", "growing-list"],
)
def test_allocating_too_much_memory_is_stopped_by_the_address_space_limit(
    any_box: Box, body: str
) -> None:
    outcome = any_box.run(f"def f():\n    {body}\n")
    assert outcome == Outcome("ok", (None,), "input 0: MemoryError")  # RLIMIT_AS refused it


@pytest.mark.parametrize(
    ("body", "statuses"),
    [
        ("while True:\n        print('x' * 1000)", ("timeout",)),
        ("while True:\n        os.write(1, b'x' * 1000)", ("ok",)),
        (
            "while True:\n        for fd in range(1, 64):\n            try:\n"
            "                os.write(fd, b'x' * 65536)\n            except OSError:\n"
            "                pass",
            ("output_limit",),
        ),
    ],
    ids=["print", "fd-1", "every-fd"],
)
def test_flooding_the_output_scores_nothing(box: Box, body: str, statuses: tuple[str]) -> None:
    outcome = box.run(f"import os\ndef f():\n    {body}\n")
    assert outcome.status in statuses
    assert outcome.results == (None,)


def test_exiting_early_scores_nothing(any_box: Box) -> None:
    outcome = any_box.run("import os\ndef f(x):\n    os._exit(0)\n", [[1]])
    assert outcome == Outcome("crashed", (None,), "exited with code 0: no result")


def test_a_forged_result_line_cannot_say_what_the_code_does_not_know(box: Box) -> None:
    # The line reaches the trainer, which takes it as the reply: the results are the code's to
    # say, right or wrong. But the expected outputs (9 and 16) never reach the child, so a line
    # it forges holds only what it computed.
    source = (
        "import os\n"
        "def f(x):\n"
        '    line = b\'{"status": "ok", "detail": "", "results": ["forged", "forged"]}\\n\'\n'
        "    for fd in range(1, 64):\n"
        "        try:\n"
        "            os.write(fd, line)\n"
        "        except OSError:\n"
        "            pass\n"
        "    os._exit(0)\n"
    )
    assert box.run(source, [[3], [4]]) == Outcome("ok", ("forged", "forged"), "")


# --- hostile code that each layer stops on its own -------------------------------------------


@dataclass(frozen=True)
class Escape:
    """A payload: the body of `f`, which returns 'escaped' if it got out (TRAINER stands for
    the trainer's pid, WORLD for the world's path); and the layers that must stop it, each
    with its evidence: the error `f` raises when that layer stopped it."""

    body: str
    hook: str | None
    """What the audit hook raises; None: not the hook's to stop."""
    kernel: tuple[str, str] | None
    """The kernel layer that stops it without the hook, and what it raises; None: not theirs."""

    def stopper(self, which: str) -> tuple[str, str]:
        """The layer that stops it with `which` layers, and its evidence. The hook sees a call
        before the kernel does, so with both it is the hook's, where the hook stops it."""
        if which != "kernel" and self.hook is not None:
            return "hook", self.hook
        assert which != "hook", "not the hook's to stop"
        assert self.kernel is not None, "not the kernel layers' to stop"
        return self.kernel

    def source(self) -> str:
        source = f"import os\ndef f():\n    {self.body}\n".replace("TRAINER", str(os.getpid()))
        return with_library(source)


def stopped_with(outcome: Outcome, error: str, world: Path) -> None:
    """`f` ran and raised `error`: the evidence of the layer that stopped it. An outcome without
    it fails, a child that crashed or exited before calling `f` among them."""
    assert outcome == Outcome("ok", (None,), "input 0: " + error.replace("WORLD", str(world)))


ERRNO = (  # raise what a libc call made through ctypes failed with (`libc`, its result `got`)
    "    if got < 0:\n"
    "        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
    "    return 'escaped'"
)

AUDITED_OBJECTS = "\n    ".join(
    [  # events and arguments whose methods say whether the hook called them
        "import sys",
        "called = []",
        "class Spy(str):",
        "    def __hash__(self):",
        "        called.append('hash')",
        "        return str.__hash__(self)",
        "    def __eq__(self, other):",
        "        called.append('eq')",
        "        return str.__eq__(self, other)",
        "class Number(int):",
        "    __hash__ = int.__hash__",
        "    def __and__(self, other):",
        "        called.append('and')",
        "        return 0",
        "    def __eq__(self, other):",
        "        called.append('eq')",
        "        return int.__eq__(self, other)",
        "sys.audit(Spy('open'), Spy('/x'), 'w', Number(1))",
        "sys.audit('fcntl.fcntl', 0, Number(8), 0)",
        "try:",
        "    sys.audit('open', Spy(WORLD), 'w', Number(1))",
        "except PermissionError:",
        "    if called:",
        "        return 'escaped: the hook called ' + ', '.join(called)",
        "    raise",
        "return 'escaped'",
    ]
)
"""Objects of the code's, in events it raises itself: the hook must call none of their
methods (a method of the code's running in the hook could reach the hook's frame)."""

HOOK_STATE_THROUGH_ITS_FRAME = "\n    ".join(
    [  # the review's: on 3.13 it emptied the hook's closure cell, then loaded ctypes
        "try:",
        "    os.kill(1, 0)",
        "except PermissionError as exc:",
        "    frame = exc.__traceback__.tb_next.tb_frame  # the hook's, which raised",
        "    for name in ('watched', 'always', 'modules'):",
        "        frame.f_locals[name] = frozenset()",
        "import ctypes",
        "return 'escaped'",
    ]
)
"""Empty the hook's sets through its frame, then load ctypes."""

FINALIZER_IN_THE_HOOK = "\n    ".join(
    [  # each finalizer leaves garbage for the next collection, which the hook's start may run
        "import gc, sys",
        "class Finalized:",
        "    def __del__(self):",
        "        frame = sys._getframe(1)  # where the collector ran",
        "        if frame.f_code.co_name == 'hook':  # (3.13: its running frame's locals)",
        "            frame.f_locals['watched'] = frozenset()",
        "        again = Finalized()",
        "        again.me = again",
        "gc.set_threshold(1)",
        "try:",
        "    for _ in range(200):",
        "        first = Finalized()",
        "        first.me = first",
        "        del first",
        "        try:",
        "            import ctypes",
        "            return 'escaped'",
        "        except PermissionError as exc:",
        "            refusal = exc",
        "finally:",
        "    gc.set_threshold(700)",
        "raise refusal",
    ]
)
"""Code of its own run in the hook's frame, which (from 3.13) rebinds the hook's locals as it
runs: the collector would run a finalizer at the hook's start, in its frame."""

ESCAPES = {
    "os.fork": Escape(
        "pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
        "    return 'escaped'",
        refused("os.fork"),
        ("seccomp", SECCOMP),  # not the process limit's EAGAIN
    ),
    "subprocess.run": Escape(
        "import subprocess\n    subprocess.run(['true'], check=True)\n    return 'escaped'",
        refused("importing _posixsubprocess"),
        ("seccomp", SECCOMP),
    ),
    "os.system": Escape(
        "if os.system('true') == 0:\n        return 'escaped'\n"
        "    import ctypes  # why it failed: os.system keeps no errno, libc's system does\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    got = -1 if libc.system(b'true') else 0\n" + ERRNO,
        refused("os.system"),
        ("seccomp", SECCOMP),
    ),
    "absolute write": Escape(
        "open(os.path.join(WORLD, 'new.txt'), 'w').write('x')\n    return 'escaped'",
        refused_outside("open"),
        ("landlock", denied("WORLD/new.txt")),
    ),
    "an absolute write, builtins.int rebound to a class of every value": Escape(
        "import builtins\n    real, builtins.int = builtins.int, object  # 'a descriptor'\n"
        "    try:\n        open(os.path.join(WORLD, 'new.txt'), 'w').write('x')\n"
        "    finally:\n        builtins.int = real\n    return 'escaped'",
        refused_outside("open"),
        ("landlock", denied("WORLD/new.txt")),
    ),
    "a relative path out of its folder": Escape(
        "open('..' + WORLD + '/new.txt', 'w').write('x')\n    return 'escaped'",  # from /tmp
        refused_outside("open"),
        ("landlock", denied("..WORLD/new.txt")),
    ),
    "append to a file": Escape(
        "open(os.path.join(WORLD, 'keep.txt'), 'a').write('x')\n    return 'escaped'",
        refused_outside("open"),
        ("landlock", denied("WORLD/keep.txt")),
    ),
    "remove a file": Escape(
        "os.remove(os.path.join(WORLD, 'keep.txt'))\n    return 'escaped'",
        refused_outside("os.remove"),
        ("landlock", denied("WORLD/keep.txt")),
    ),
    "rename a file": Escape(
        "os.rename(os.path.join(WORLD, 'keep.txt'), os.path.join(WORLD, 'moved.txt'))\n"
        "    return 'escaped'",
        refused_outside("os.rename"),
        ("landlock", denied("WORLD/keep.txt", "WORLD/moved.txt")),
    ),
    "chmod a file": Escape(  # the child's own file: only seccomp refuses (Landlock has no say)
        "os.chmod(os.path.join(WORLD, 'keep.txt'), 0o777)\n    return 'escaped'",
        refused_outside("os.chmod"),
        ("seccomp", f"{SECCOMP}: 'WORLD/keep.txt'"),
    ),
    "mkfifo": Escape(  # Landlock, were it asked first, would say EACCES
        "os.mkfifo(os.path.join(WORLD, 'fifo'))\n    return 'escaped'",
        removed("os", "mkfifo"),
        ("seccomp", SECCOMP),
    ),
    "dir_fd of a folder outside": Escape(
        "folder = os.open(WORLD, os.O_RDONLY)\n    os.remove('keep.txt', dir_fd=folder)\n"
        "    return 'escaped'",
        refused_outside("open"),  # no descriptor of a folder outside, to read or not
        ("landlock", denied("WORLD")),  # nor a read of it
    ),
    "dir_fd of its own folder": Escape(
        "folder = os.open('.', os.O_RDONLY)\n"
        "    os.remove('..' + WORLD + '/keep.txt', dir_fd=folder)\n    return 'escaped'",
        refused_outside("os.remove"),
        ("landlock", denied("..WORLD/keep.txt")),
    ),
    "write through os.open's dir_fd, which the hook's open event does not show": Escape(
        "folder = os.open(WORLD, os.O_RDONLY)\n"
        "    os.close(os.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=folder))\n"
        "    return 'escaped'",
        refused_outside("open"),  # the descriptor of the folder outside
        ("landlock", denied("WORLD")),
    ),
    "symlink out": Escape(  # no symlink call (nor a right to make links in Landlock's rules)
        "os.symlink(WORLD, 'out')\n    open('out/new.txt', 'w').write('x')\n    return 'escaped'",
        refused("os.symlink"),
        ("seccomp", f"{SECCOMP}: 'WORLD' -> 'out'"),
    ),
    "raise rlimit": Escape(  # Python's word for EPERM here; seccomp lets setrlimit through
        "import resource\n    resource.setrlimit(resource.RLIMIT_CPU, (-1, -1))\n"
        "    return 'escaped'",
        refused("resource.setrlimit"),
        ("capabilities", "ValueError: not allowed to raise maximum limit"),
    ),
    "prlimit": Escape(  # no CAP_SYS_RESOURCE; seccomp lets prlimit64 through
        "import resource\n    resource.prlimit(0, resource.RLIMIT_AS, (-1, -1))\n"
        "    return 'escaped'",
        refused("resource.prlimit"),
        ("capabilities", "PermissionError: [Errno 1] Operation not permitted"),
    ),
    "import ctypes": Escape(
        "import ctypes\n    return 'escaped'", refused("importing ctypes"), None
    ),
    "fork by ctypes": Escape(
        "import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n    got = libc.fork()\n"
        "    if got == 0:\n        libc._exit(0)\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "signal the trainer": Escape(  # outside its pid namespace: ESRCH, were seccomp not first
        "os.kill(TRAINER, 0)\n    return 'escaped'",
        refused("os.kill"),
        ("seccomp", SECCOMP),
    ),
    "signal the trainer when a pipe is ready (F_SETOWN)": Escape(
        "import fcntl\n    r, w = os.pipe()\n    fcntl.fcntl(r, fcntl.F_SETOWN, TRAINER)\n"
        "    return 'escaped'",
        refused("fcntl command 8"),
        ("seccomp", SECCOMP),
    ),
    "choose the signal a ready pipe sends (F_SETSIG)": Escape(
        "import fcntl\n    r, w = os.pipe()\n    fcntl.fcntl(r, 10, 9)\n    return 'escaped'",
        refused("fcntl command 10"),
        ("seccomp", SECCOMP),
    ),
    "own a pipe by ioctl (FIOSETOWN)": Escape(
        "import fcntl, struct\n    r, w = os.pipe()\n"
        "    fcntl.ioctl(r, 0x8901, struct.pack('i', TRAINER))\n    return 'escaped'",
        refused("fcntl.ioctl"),
        ("seccomp", SECCOMP),
    ),
    "System V shared memory, which would outlive the call": Escape(
        "import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    got = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "leave the process group the trainer kills": Escape(  # it leads no group: setsid would do
        "os.setsid()\n    return 'escaped'",
        removed("os", "setsid"),
        ("seccomp", SECCOMP),
    ),
    "a banned module by a name with a NUL (the review's), then an exec": Escape(
        NUL_NAME,
        refused("importing a module by that name"),
        ("seccomp", EXEC),  # _ctypes loads: no kernel layer is about modules
    ),
    "a native library written into its folder": Escape(
        NATIVE_LIBRARY, refused("loading that extension module"), ("tmpfs", UNMAPPABLE)
    ),
    "a native library by a name that lies, builtins.str rebound": Escape(
        LYING_NAME, refused("importing a module by that name"), ("tmpfs", UNMAPPABLE)
    ),
    "execve of a binary under /usr": Escape(EXEC_UNDER_USR, refused("os.exec"), ("seccomp", EXEC)),
    "steer a native library through the environment": Escape(  # OpenSSL's configuration
        "os.environ['OPENSSL_CONF'] = 'openssl.cnf'\n    return 'escaped'",
        refused("os.putenv"),
        None,  # the noexec tmpfs keeps a library it names from loading
    ),
    "memory both writable and executable (mmap)": Escape(  # where code could be written
        "import mmap\n    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE"
        " | mmap.PROT_EXEC)\n    return 'escaped'",
        None,  # the mmap module is Python's own, and harmless without a way to run the code
        ("seccomp", SECCOMP),
    ),
    "writable memory made executable (mprotect) by ctypes": Escape(
        "import ctypes, mmap\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    page = mmap.mmap(-1, 4096)  # readable and writable: allowed\n"
        "    where = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(page)))\n"
        "    got = libc.mprotect(where, 4096, mmap.PROT_READ | mmap.PROT_EXEC)\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "signal through a pidfd": Escape(
        "import _signal\n    _signal.pidfd_send_signal(os.pidfd_open(TRAINER), 0)\n"
        "    return 'escaped'",
        removed("_signal", "pidfd_send_signal"),
        ("seccomp", SECCOMP),
    ),
    # The third review's (issue 37), each a finding: the hook's two, then the kernel layers'.
    "1. an open of an object that says it is an int (__class__), its path by __fspath__": Escape(
        "import io\n"
        "    class Q:\n"
        "        __class__ = int  # isinstance(Q(), int) asks it, and it says yes\n"
        "        def __fspath__(self):\n"
        "            return os.path.join(WORLD, 'new.txt')\n"
        "        def __repr__(self):\n"
        "            return repr(os.path.join(WORLD, 'new.txt'))\n"
        "    io.FileIO(Q(), 'w').write(b'x')\n    return 'escaped'",
        refused("open of a path not a str or bytes"),
        ("landlock", denied("WORLD/new.txt")),
    ),
    "1. objects of its own in an audit event it raises itself (sys.audit)": Escape(
        AUDITED_OBJECTS, refused("open of a path not a str or bytes"), None
    ),
    "2. the hook's state emptied through its frame's f_locals (PEP 667, Python 3.13)": Escape(
        HOOK_STATE_THROUGH_ITS_FRAME, refused("importing ctypes"), None
    ),
    "2. a finalizer of its own, run by the collector in the hook's frame": Escape(
        FINALIZER_IN_THE_HOOK, refused("importing ctypes"), None
    ),
    "3. executable memory that is shared (a second view of it could be written)": Escape(
        "import mmap\n"
        "    mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_EXEC)\n"
        "    return 'escaped'",
        None,  # the mmap module is Python's own
        ("seccomp", SECCOMP),
    ),
    "3. a second view of shared memory (mremap with old size 0)": Escape(
        "import ctypes, mmap\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    page = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)\n"
        "    where = ctypes.addressof(ctypes.c_char.from_buffer(page))\n"
        "    got = libc.syscall(ctypes.c_long(25), ctypes.c_void_p(where), ctypes.c_long(0),"
        " ctypes.c_long(4096), ctypes.c_long(1))  # MREMAP_MAYMOVE\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "4. the host's mounts by listmount (Linux 6.8)": Escape(
        "import ctypes, struct\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    request = struct.pack('=IIQQ', 24, 0, 2**64 - 1, 0)  # LSMT_ROOT: every mount\n"
        "    ids = (ctypes.c_uint64 * 64)()\n"
        "    got = libc.syscall(ctypes.c_long(458), request, ids, ctypes.c_long(64),"
        " ctypes.c_long(0))\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "5. a file's flags outside its folder by file_setattr (Linux 6.17)": Escape(
        "import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    attributes = ctypes.create_string_buffer(24)\n"
        "    attributes[0] = 0xC0  # FS_XFLAG_NOATIME | FS_XFLAG_NODUMP, on its uid's keep.txt\n"
        "    got = libc.syscall(ctypes.c_long(469), ctypes.c_long(-100),"
        " os.path.join(WORLD, 'keep.txt').encode(), attributes, ctypes.c_long(24),"
        " ctypes.c_long(0))\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "6. a watch on a folder (inotify)": Escape(
        "import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    got = libc.syscall(ctypes.c_long(294), ctypes.c_long(0))  # inotify_init1\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "6. a watch on a folder (fanotify, as an unprivileged user may)": Escape(
        "import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    got = libc.syscall(ctypes.c_long(300), ctypes.c_long(0x200), ctypes.c_long(0))\n"
        + ERRNO,  # fanotify_init(FAN_REPORT_FID, O_RDONLY)
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
    "7. a callback on every line by sys.monitoring (3.12), which is not audited": Escape(
        "import sys\n    sys.monitoring.use_tool_id(3, 'spy')\n    return 'escaped'",
        removed("sys", "monitoring"),
        None,
    ),
    "7. a Python signal handler, which runs in whatever frame is running": Escape(
        "import signal\n    signal.signal(signal.SIGALRM, lambda number, frame: None)\n"
        "    return 'escaped'",
        refused("signal.signal"),
        None,
    ),
    "a system call the kernel does not know yet (600: the kernel says ENOSYS)": Escape(
        "import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    got = libc.syscall(ctypes.c_long(600))\n" + ERRNO,
        refused("importing ctypes"),
        ("seccomp", SECCOMP),
    ),
}


KEPT_FAST = ("os.fork", "absolute write", "execve of a binary under /usr")
"""The escapes the fast suite runs in every configuration (the others: with every layer)."""


@pytest.mark.parametrize(
    ("name", "which"),
    # The production set-up, and each layer that is meant to stop the escape on its own: each
    # layer alone in the slow suite, but for a process escape and a file escape (seccomp's and
    # Landlock's evidence), which stay here with the production set-up of every payload.
    [
        pytest.param(
            name,
            which,
            id=f"{name}-{which}-{escape.stopper(which)[0]}",
            marks=[pytest.mark.slow] if which != "both" and name not in KEPT_FAST else [],
        )
        for name, escape in ESCAPES.items()
        for which in ("both", *["hook"][: bool(escape.hook)], *["kernel"][: bool(escape.kernel)])
    ],
)
def test_each_escape_is_stopped_by_the_layer_named_for_it(
    box: Box, monkeypatch: pytest.MonkeyPatch, name: str, which: str
) -> None:
    use_layers(which, monkeypatch)
    escape = ESCAPES[name]
    _, error = escape.stopper(which)
    stopped_with(box.run(escape.source()), error, box.world)


@pytest.mark.parametrize("which", ["both", *alone("hook")])
def test_whatever_the_code_leaves_in_its_folder_is_removed(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # 1,010 folders deep (past Python's recursion limit, where shutil.rmtree raised
    # RecursionError into the trainer), and a folder it can neither read nor enter.
    use_layers(which, monkeypatch)
    outcome = box.run(
        "import os\n"
        "def f():\n"
        "    path = 'd'\n"
        "    for _ in range(1010):\n"
        "        os.mkdir(path)\n"
        "        path += '/d'\n"
        "    os.mkdir('locked')\n"
        "    open('locked/x', 'w').write('x')\n"
        "    try:\n"
        "        os.chmod('locked', 0)  # where the kernel layers allow it\n"
        "    except OSError:\n"
        "        pass\n"
        "    return 'done'\n"
    )
    assert outcome.results == ("done",)  # and Box.run found its folder gone


def test_the_network_is_out_of_reach(box: Box, layers: str) -> None:
    # Refused by the hook's audit of the name lookup, or by seccomp's EPERM for the socket
    # (the network namespace would say ECONNREFUSED, Landlock EACCES).
    stopper = SECCOMP if layers == "kernel" else refused("socket.getaddrinfo")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        source = (
            "import socket\n"
            "def f():\n"
            f"    with socket.create_connection(('127.0.0.1', {port}), timeout=1):\n"
            "        return 'escaped'\n"
        )
        outcome = box.run(source)
        server.settimeout(0)
        with contextlib.suppress(BlockingIOError):
            server.accept()[0].close()
            pytest.fail("the code reached the trainer's loopback")
    stopped_with(outcome, stopper, box.world)


def layers_or_identity(box: Box, monkeypatch: pytest.MonkeyPatch, which: str) -> Box:
    """`box` with `which` layers, where "identity" is the kernel layers without Landlock (whose
    read rules would refuse too): then the refusal is the file's mode, as the child's uid."""
    use_layers("kernel" if which == "identity" else which, monkeypatch)
    if which != "identity":
        return box
    kernel = kernel_layers()
    assert kernel is not None
    monkeypatch.setattr(sandbox, "kernel_layers", lambda: replace(kernel, landlock=None))
    return replace(box, allow_missing_layers=True)


@pytest.mark.parametrize("which", ["both", *alone("kernel", "identity")])  # not the hook's to stop
def test_files_of_other_users_stay_unreadable(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # Root reads anything; without its capabilities it reads only what root's own files allow.
    box = layers_or_identity(box, monkeypatch, which)
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    private = box.world / "private.txt"
    private.write_text("secret")
    private.chmod(0o600)
    os.chown(private, 12345, 12345)
    outcome = box.run("def f():\n    return open(WORLD + '/private.txt').read()\n")
    stopped_with(outcome, denied("WORLD/private.txt"), box.world)


@pytest.mark.parametrize("which", ["both", *alone("kernel", "identity")])  # not the hook's to stop
def test_the_child_is_never_real_root(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # Root's own private file, and a raw block device root owns (another user's files are
    # readable through one): a child with root's uid owned both, capabilities or not.
    # "identity": the kernel layers without Landlock, whose read rules would hide both too.
    box = layers_or_identity(box, monkeypatch, which)
    root_only(box.world)
    source = (
        "import os\n"
        "def f():\n"
        "    with open(WORLD + '/root-only.txt') as file:\n"
        "        return file.read()\n"
        "def g():\n"
        "    blocks = [f'loop{i}' for i in range(8)] + ['sda', 'vda', 'xvda', 'nvme0n1']\n"
        "    for name in blocks:\n"
        "        try:\n"
        "            os.close(os.open('/dev/' + name, os.O_RDONLY))\n"
        "            return 'escaped'\n"
        "        except OSError:\n"
        "            pass\n"
        "    return [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()]\n"
    )
    stopped_with(box.run(source), denied("WORLD/root-only.txt"), box.world)
    outcome = box.run(source, function="g")
    assert outcome.status == "ok", outcome
    ids = outcome.results[0]
    assert isinstance(ids, list), ids  # not 'escaped': no block device opened
    assert 0 not in ids[:3], ids  # uid, euid, gid
    assert ids[3] in ([], [ids[2]]), ids  # no supplementary groups but its own


@pytest.mark.parametrize("which", ["both", *alone("kernel")])  # reads are not the hook's to stop
def test_the_child_reads_nothing_outside_the_system_folders(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # keep.txt is readable by every user: Landlock alone keeps it (and /etc) from the child,
    # with EACCES where the file's mode would let it read.
    use_layers(which, monkeypatch)
    source = (
        "def f(path):\n"
        "    try:\n"
        "        with open(path) as file:\n"
        "            return file.read()\n"
        "    except OSError as exc:\n"
        "        return ['refused', exc.errno]\n"
    )
    paths = [[str(box.world / "keep.txt")], ["/etc/passwd"], ["/usr/lib/os-release"]]
    outcome = box.run(source, paths)
    assert outcome.status == "ok", outcome
    assert outcome.results[:2] == (["refused", 13], ["refused", 13]), outcome
    assert isinstance(outcome.results[2], str)  # the system folders stay readable


def processes_limited_to(open_files: int) -> list[str]:
    """Processes whose open-file limit is `open_files`: a mark a test gives its sandbox."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if re.search(rf"Max open files\s+{open_files}\s", (entry / "limits").read_text()):
                found.append(entry.name)
    return found


@pytest.mark.slow
def test_a_child_that_leaves_its_process_group_still_ends_with_the_call(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel layers alone (no hook): setsid is refused by seccomp, and were it not, the
    # child dies with its first process, which the trainer stops at the wall-clock limit.
    use_layers("kernel", monkeypatch)
    mark = Limits(cpu_seconds=1, wall_seconds=1.0, open_files=57)
    source = (
        "import os, time\n"
        "def f():\n"
        "    try:\n"
        "        os.setsid()\n"
        "    except Exception:\n"
        "        pass\n"
        "    time.sleep(30)\n"
    )
    assert box.run(source, limits=mark).status == "timeout"
    time.sleep(0.2)
    assert processes_limited_to(57) == []


IN_FLIGHT = (  # a call of a minute, its child marked by an open-file limit of 58
    "from mathrl.tasks.code.sandbox import Limits, call_function\n"
    "call_function('import time\\ndef f():\\n    time.sleep(60)\\n', 'f', [[]],"
    " Limits(wall_seconds=60.0, cpu_seconds=60, open_files=58))\n"
)
STARTED_AHEAD = (  # one call, then its pool's sandboxes wait, started ahead, marked by 58
    "import asyncio, time\n"
    "from mathrl.tasks.code.sandbox import Limits, call_function\n"
    "from mathrl.workers import Workers\n"
    "with Workers(1) as pool:\n"
    "    asyncio.run(pool.run(lambda: call_function('def f():\\n    return 1\\n', 'f', [[]],"
    " Limits(open_files=58))))\n"
    "    time.sleep(60)\n"
)


@pytest.mark.parametrize(
    ("script", "running"),
    # A killed trainer whose sandboxes wait, started ahead: the same end, in the slow suite.
    [(IN_FLIGHT, 1), pytest.param(STARTED_AHEAD, 2, marks=pytest.mark.slow)],
)
def test_the_sandboxes_end_when_the_trainer_is_killed(
    tmp_path: Path, script: str, running: int
) -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    try:
        deadline = time.monotonic() + 30
        while len(processes_limited_to(58)) < running:
            assert time.monotonic() < deadline, "the sandboxes never started"
            time.sleep(0.05)
    finally:
        trainer.kill()
        trainer.wait()
    deadline = time.monotonic() + 5
    while processes_limited_to(58):
        assert time.monotonic() < deadline, "a sandbox outlived the trainer"
        time.sleep(0.05)


@pytest.mark.parametrize("which", ["both", *alone("kernel")])
def test_the_child_sees_only_its_own_process(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    use_layers(which, monkeypatch)
    source = (
        "import os\n"
        "def f():\n"
        "    return [os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit())]\n"
    )
    assert box.run(source).results == ([1, ["1"]],)


def test_a_process_the_child_starts_ends_with_it(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where nothing stops it from starting one (no hook, no seccomp: any machine but x86-64,
    # with missing layers allowed), a process it starts dies with its pid namespace.
    kernel = kernel_layers()
    assert kernel is not None
    use_layers("kernel", monkeypatch)
    monkeypatch.setattr(sandbox, "kernel_layers", lambda: replace(kernel, seccomp=None))
    box = replace(box, allow_missing_layers=True)
    marker = "30.0123"
    source = (
        "import os, time\n"
        "def running():\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        f"            if b'{marker}' in open(f'/proc/{{pid}}/cmdline', 'rb').read():\n"
        "                return True\n"
        "        except OSError:\n"
        "            pass\n"
        "    return False\n"
        "def f():\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()  # out of the process group the trainer kills\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    for _ in range(100):  # it did start: the test is not passed by a failed exec\n"
        "        if running():\n"
        "            return 'spawned'\n"
        "        time.sleep(0.01)\n"
        "    return 'never started'\n"
    )
    assert box.run(source, limits=replace(FAST, processes=8)).results == ("spawned",)
    time.sleep(0.2)  # the kernel kills the namespace's processes as its process 1 ends
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            assert marker.encode() not in (entry / "cmdline").read_bytes(), entry


@pytest.mark.parametrize("which", ["both", *alone("kernel")])
def test_the_child_has_no_capabilities_and_none_to_gain(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    use_layers(which, monkeypatch)
    source = (
        "def f():\n"
        "    status = open('/proc/self/status').read().splitlines()\n"
        "    keys = ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp:')\n"
        "    return [line.split()[1] for line in status if line.startswith(keys)]\n"
    )
    seccomp = "2" if landlock_and_seccomp() else "0"
    assert box.run(source).results == (["0" * 16] * 5 + ["1", seccomp],)


# Disk space is not the hook's to limit.
@pytest.mark.parametrize("which", ["both", *alone("kernel")])
def test_the_folder_holds_at_most_file_bytes(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # The tmpfs is a required layer now: where it cannot be made, the sandbox refuses to run.
    # Its ENOSPC, at 1 MiB in all: the file size limit, per file, would say EFBIG.
    use_layers(which, monkeypatch)
    source = (
        "def f():\n"
        "    for i in range(64):\n"
        "        with open(f'{i}.bin', 'wb') as file:\n"
        "            file.write(bytes(2**19))\n"
        "    return 'filled'\n"
    )
    assert box.run(source) == Outcome("ok", (None,), "input 0: OSError: [Errno 28] No space "
                                      "left on device")  # fmt: skip


def test_removing_a_folder_never_follows_links_and_never_raises(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "tree"
    # Deeper than Python's recursion limit (1,000), and longer than a path may be (PATH_MAX,
    # 4,096; 1,400 x "dd/" is 4,200): made a folder at a time from the one before, as the
    # child would.
    tree.mkdir()
    folder = os.open(tree, os.O_RDONLY)
    for _ in range(1400):
        os.mkdir("dd", dir_fd=folder)
        inner = os.open("dd", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    os.close(os.open("file", os.O_WRONLY | os.O_CREAT, dir_fd=folder))
    os.close(folder)
    (tree / "link").symlink_to(outside, target_is_directory=True)
    (tree / "locked").mkdir()
    (tree / "locked" / "x").write_text("x")
    (tree / "locked").chmod(0)
    remove_tree(str(tree))
    assert not tree.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    remove_tree(str(tree))  # gone already: nothing to do, and no error


def test_a_mount_hides_what_is_under_it_and_nothing_beside_it() -> None:
    # /tmp covers /tmp and /tmp/x/python3, not /tmpx/python3 (a name that begins with "tmp").
    assert hidden_by(b"/tmp", b"/usr", b"/tmp/x/python3")
    assert hidden_by(b"/tmp", b"/tmp")
    assert not hidden_by(b"/tmp", b"/usr/bin/python3", b"/tmpx/python3")
    assert not hidden_by(b"/tmp")


@given(mount=strategies.absolute_paths, paths=st.lists(strategies.absolute_paths, max_size=3))
def test_a_mount_hides_a_path_exactly_when_its_names_begin_the_paths(
    mount: bytes, paths: list[bytes]
) -> None:
    def names(path: bytes) -> list[bytes]:
        return [name for name in path.split(b"/") if name]

    under = [names(path)[: len(names(mount))] == names(mount) for path in paths]
    assert hidden_by(mount, *paths) is any(under)


@functools.cache
def interpreter_with_posixsubprocess_built_in() -> str | None:
    """A Python 3 here whose `_posixsubprocess` is built in, as Debian's and Ubuntu's is."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            check = "import sys; print('_posixsubprocess' in sys.builtin_module_names)"
            answer = subprocess.run([candidate, "-c", check], capture_output=True, text=True)
            if answer.stdout.strip() == "True":
                return candidate
    return None


def use_debians_python(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the sandbox's child with `which` layers on a Python that has _posixsubprocess built
    in (Debian's python3), the kernel layers' executable included; skip where there is none."""
    python = interpreter_with_posixsubprocess_built_in()
    if python is None:
        pytest.skip("no Python here has _posixsubprocess built in (Debian's python3 does)")
    use_layers(which, monkeypatch)
    monkeypatch.setattr(sys, "executable", python)
    kernel = kernel_layers()
    if kernel is not None:
        monkeypatch.setattr(sandbox, "kernel_layers", lambda: replace(kernel, executable=python))


@pytest.mark.parametrize("which", ["both", *alone("hook")])
def test_a_banned_module_built_into_the_interpreter_is_refused(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    use_debians_python(which, monkeypatch)
    # Its set-up imports every built-in module (to take _imp.create_builtin away), then unloads
    # those it bans: a fresh import, which it refuses, is the only way to them.
    source = (
        "import sys\n"
        "def f():\n"
        "    if '_posixsubprocess' in sys.modules:\n"
        "        return 'escaped: loaded'\n"
        "    import _posixsubprocess\n"
        "    return 'escaped'\n"
    )
    stopped_with(box.run(source), refused("importing _posixsubprocess"), box.world)


REVIEWED = (
    "a banned module by a name with a NUL (the review's), then an exec",
    "a native library written into its folder",
    "execve of a binary under /usr",
)
"""The payloads of the review that got past the hook, or found exec open."""


@pytest.mark.parametrize(
    ("name", "which"),
    # One here; the others, and each with the kernel layers alone, in the slow suite.
    [
        pytest.param(name, which, marks=[] if (name, which) == (REVIEWED[0], "both") else SLOW)
        for name in REVIEWED
        for which in ("both", "kernel")
    ],
)
def test_the_reviews_payloads_fail_with_debians_python_too(
    box: Box, monkeypatch: pytest.MonkeyPatch, name: str, which: str
) -> None:
    # Its extension modules live in /usr/lib/python3.11/lib-dynload, and _posixsubprocess is
    # built in: the hook's list of them, and the kernel layers, hold there too.
    use_debians_python(which, monkeypatch)
    assert kernel_layers() is not None
    _, error = ESCAPES[name].stopper(which)
    stopped_with(box.run(ESCAPES[name].source()), error, box.world)


def use_python(python: str, which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the sandbox's child with `which` layers on `python`, as a trainer that runs on it
    would: its installation is the one Landlock lets the child read."""
    use_layers(which, monkeypatch)
    kernel = kernel_layers()
    assert kernel is not None
    prefix = base_prefix(python)
    on_python = replace(
        kernel,
        executable=python,
        prefix=os.fsencode(prefix),
        exposed=_exposed(prefix) if kernel.root else None,
        origin=os.path.dirname(python),
    )
    monkeypatch.setattr(sandbox, "kernel_layers", lambda: on_python)


THIRD_REVIEW = [name for name in ESCAPES if name[0].isdigit()]
"""The third review's findings (issue 37), each a payload."""
FAST_ON_3_13 = {*((name, False) for name in THIRD_REVIEW), (THIRD_REVIEW[2], True)}
"""(payload, started ahead) run on 3.13 in the fast suite, with every layer."""


@pytest.mark.parametrize(
    ("name", "which", "ahead"),
    # On Python 3.13 (pyenv's): the third review's payloads here, fresh, and the one that
    # emptied the hook's state started ahead too; every payload, fresh and started ahead, with
    # every layer, the hook alone and the kernel layers alone, in the slow suite.
    [
        pytest.param(
            name,
            which,
            ahead,
            id=f"{name}-{which}-{'ahead' if ahead else 'fresh'}",
            marks=[] if which == "both" and (name, ahead) in FAST_ON_3_13 else SLOW,
        )
        for name, escape in ESCAPES.items()
        for which, ahead in (
            ("both", False),
            ("both", True),
            *[("hook", False)][: bool(escape.hook)],
            *[("kernel", False)][: bool(escape.kernel)],
        )
    ],
)
def test_each_escape_is_stopped_on_python_3_13(
    box: Box, monkeypatch: pytest.MonkeyPatch, name: str, which: str, ahead: bool
) -> None:
    # The child runs pyenv's 3.13, whose frames' f_locals write through to closure cells.
    use_python(needs_python(PYTHON_3_13), which, monkeypatch)
    if ahead:
        monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
        box = replace(box, warm=True)
    _, error = ESCAPES[name].stopper(which)
    stopped_with(box.run(ESCAPES[name].source()), error, box.world)


@pytest.mark.parametrize("which", ["both", *alone("kernel")])
def test_the_child_does_not_see_the_hosts_mounts(
    box: Box, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # Its mount tables would show the host's devices and paths: they read empty.
    use_layers(which, monkeypatch)
    source = "def f(name):\n    with open(name) as file:\n        return file.read()\n"
    names = ["/proc/self/mountinfo", "/proc/self/mounts", "/proc/mounts", "/proc/1/mountstats"]
    names.append("/proc/thread-self/mountinfo")
    assert box.run(source, [[name] for name in names]) == Outcome("ok", ("",) * 5, "")


def test_an_interpreter_under_tmp_is_named_as_hidden_by_the_tmpfs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The child's private tmpfs over /tmp would hide it (the exec said only "No such file or
    # directory"): the set-up says so, and what to do; with missing layers allowed, the child
    # runs without the tmpfs, and reaches it.
    kernel = kernel_layers()
    assert kernel is not None
    folder = tempfile.mkdtemp(prefix="mathrl-python-", dir="/tmp")
    try:
        python = os.path.join(folder, "python3")
        shutil.copy2("/usr/bin/python3", python)  # Debian's: it needs no libpython beside it
        os.chmod(folder, 0o755)
        monkeypatch.setattr(sandbox, "kernel_layers", lambda: replace(kernel, executable=python))
        with pytest.raises(sandbox.SandboxUnavailable) as refused:
            sandbox.check_layers()
        assert str(refused.value) == (
            f"sandbox: the interpreter {python} (or its installation, "
            f"{os.fsdecode(kernel.prefix)}) is under /tmp, which the child's private tmpfs "
            "covers: install Python outside /tmp"
        )
        assert refused.value.allowed_by == sandbox.ALLOW_MISSING_LAYERS
        line = sandbox.check_layers(allow_missing_layers=True).describe()
        assert line.startswith("warning: sandbox without tmpfs (missing layers allowed): "), line
    finally:
        remove_tree(folder)


# --- sandboxes started ahead of their calls (a worker pool's) -------------------------------


def test_a_sandbox_started_ahead_returns_what_a_fresh_one_does(warm_box: Box) -> None:
    source = "def f(x):\n    return x * 2 + 1\n"
    assert warm_box.run(source, [[1], [20]]).results == (3, 41)


@pytest.mark.parametrize(
    "name",
    # A process escape and a file escape here; every other in the slow suite.
    [
        pytest.param(name, marks=[] if name in KEPT_FAST else [pytest.mark.slow])
        for name in sorted(ESCAPES)
    ],
)
def test_a_sandbox_started_ahead_stops_every_escape(warm_box: Box, name: str) -> None:
    # Its layers were set up before the call existed, exactly as a fresh one's: the same one
    # stops each escape, with the same evidence.
    escape = ESCAPES[name]
    _, error = escape.stopper("both")
    stopped_with(warm_box.run(escape.source()), error, warm_box.world)


@pytest.mark.parametrize(
    "name",
    [REVIEWED[2], pytest.param(REVIEWED[0], marks=SLOW)],  # Python's exec; native code's
)
def test_a_sandbox_started_ahead_refuses_exec_without_the_hook(
    warm_box: Box, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # Its first process waits in an interpreter of its own (kernel.WAITER), which answers the
    # exec filter: the same EPERM as a fresh sandbox's first process, a copy of the trainer.
    use_layers("kernel", monkeypatch)
    stopped_with(warm_box.run(ESCAPES[name].source()), EXEC, warm_box.world)


def test_a_sandbox_started_ahead_is_no_more_than_a_fresh_one(warm_box: Box) -> None:
    # Never root, alone in its pid namespace, off the network: what the kernel layers give.
    root_only(warm_box.world)
    source = (
        "import os, socket\n"
        "def f():\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "        net = 'reached'\n"
        "    except Exception:\n"
        "        net = 'none'\n"
        "    try:\n"
        "        secret = open(WORLD + '/root-only.txt').read()\n"
        "    except OSError:\n"
        "        secret = 'refused'\n"
        "    return [os.getuid() != 0, os.getpid(), net, secret]\n"
    )
    assert warm_box.run(source).results == ([True, 1, "none", "refused"],)


def in_pool(pool: Workers, *calls: Callable[[], Outcome]) -> list[Outcome]:
    async def go() -> list[Outcome]:
        return [await pool.run(call) for call in calls]

    return asyncio.run(go())


def primed(
    pool: Workers, count: int, limits: Limits = FAST, allow_missing_layers: bool = False
) -> sandbox.Warm:
    """The pool's sandboxes started ahead, once a first call told it their kind (`limits`,
    `allow_missing_layers`) and `count` of them are ready."""
    probe = "def f():\n    return 1\n"
    in_pool(pool, functools.partial(call_function, probe, "f", [[]], limits, allow_missing_layers))
    return ready(open_warm(pool), count)


def ready(warm: sandbox.Warm, count: int) -> sandbox.Warm:
    """`warm`, once `count` of its sandboxes are ready (no call needed to start them)."""
    deadline = time.monotonic() + 30
    while warm.ready < count:
        assert time.monotonic() < deadline, f"{warm.ready} of {count} sandboxes started ahead"
        time.sleep(0.01)
    return warm


def test_each_sandbox_started_ahead_serves_one_call(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call leaves a file in its folder; no later call finds it, so no sandbox served twice.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 3)
    source = (
        "import os\n"
        "def f():\n"
        "    found = os.path.exists('mark')\n"
        "    open('mark', 'w').write('x')\n"
        "    return found\n"
    )
    call = functools.partial(call_function, source, "f", [[]], FAST)
    with Workers(1) as pool:
        warm = primed(pool, 3)
        outcomes = in_pool(pool, call, call, call)
        assert warm.taken == 3
        assert [o.results for o in outcomes] == [(False,)] * 3
    assert warm.ready == 0  # the pool closed: those not used are gone, and so is their folder
    assert list(box.sandboxes.iterdir()) == []
    assert no_children_left()


def test_a_pool_told_to_keep_more_sandboxes_starts_them(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its size changed while its thread waited for room, and no call came: it hears of it.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
    with Workers(1) as pool:
        warm = primed(pool, 1)
        warm.size = 3
        ready(warm, 3)
        warm.size = 0
        assert in_pool(pool, functools.partial(call_function, "def f():\n    return 2\n", "f",
                                               [[]], FAST))[0].results == (2,)  # fmt: skip
        assert warm.ready == 2  # none started in its place
    assert no_children_left()


def test_a_sandbox_that_died_waiting_is_passed_over_and_said_once(
    box: Box, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Killed from outside while it waited: the call starts its own, and the pool, which would
    # lose the next ones alike, says so once and starts none ahead any more.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 2)
    call = functools.partial(call_function, "def f():\n    return 7\n", "f", [[]], FAST)
    with Workers(1) as pool:
        warm = primed(pool, 2)
        for started in list(warm._ready):
            os.killpg(started.child.pid, signal.SIGKILL)
            started.child.wait()
        assert [o.results for o in in_pool(pool, call, call)] == [(7,), (7,)]
        assert (warm.taken, warm.ready) == (0, 0)  # each started its own; none ahead since
        why = "a sandbox started ahead ended before its call (killed by SIGKILL)"
        assert warm.failure == why
        warm._fail("another cause")  # said once: the first cause stays, and nothing more
        assert warm.failure == why
    assert list(box.sandboxes.iterdir()) == []
    assert no_children_left()
    assert capsys.readouterr().err.splitlines() == [
        f"mathrl: warning: sandbox: {why}: no sandbox is started ahead any more, each call "
        "starts its own"
    ]


def test_sandboxes_started_ahead_that_stop_at_their_set_up_are_said_once(
    box: Box, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A task that refuses missing layers, on a machine without Landlock: each sandbox started
    # ahead for its calls stops at its set-up, which says why.
    kernel = kernel_layers()
    assert kernel is not None
    monkeypatch.setattr(sandbox, "kernel_layers", lambda: replace(kernel, landlock=None))
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 2)
    call = functools.partial(call_function, "def f():\n    return 7\n", "f", [[]], FAST)
    with Workers(1) as pool:
        with pytest.raises(sandbox.SandboxError, match=r"^sandbox: Landlock is off"):
            in_pool(pool, call)
        warm = open_warm(pool)
        warm._thread.join(30)  # it stops once it sees one ended
        assert not warm._thread.is_alive()
    why = (
        "a sandbox started ahead ended before its call (exited with code 121: Landlock is off "
        "(Function not implemented): Linux >= 5.13 with landlock in the lsm= boot parameter)"
    )
    assert warm.failure == why
    assert capsys.readouterr().err.count(why) == 1
    assert no_children_left()


@pytest.mark.slow
def test_a_call_of_another_kind_starts_its_own(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    # Other limits: the sandboxes waiting have the wrong ones, so they go, and it starts its own.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 2)
    source = "import resource\ndef f():\n    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
    other = replace(FAST, open_files=32)
    with Workers(1) as pool:
        warm = primed(pool, 2)
        (outcome,) = in_pool(pool, functools.partial(call_function, source, "f", [[]], other))
        assert outcome.results == (32,)
        assert warm.taken == 0
    assert no_children_left()


@pytest.mark.parametrize(
    "error",
    [OSError("no more processes"), pytest.param(RuntimeError("a bug"), marks=pytest.mark.slow)],
)
def test_a_pool_that_cannot_start_sandboxes_ahead_leaves_each_call_its_own(
    box: Box, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception
) -> None:
    # Starting one ahead fails (say, out of processes): the pool stops trying, calls go on.
    start = sandbox._start

    def failing(kind: sandbox.Kind, lean: bool = False) -> sandbox.Started:
        if threading.current_thread().name == "mathrl-sandboxes":
            raise error
        return start(kind, lean)

    monkeypatch.setattr(sandbox, "_start", failing)
    call = functools.partial(call_function, "def f():\n    return 7\n", "f", [[]], FAST)
    with Workers(1) as pool:
        in_pool(pool, call)
        warm = open_warm(pool)
        warm._thread.join(30)
        assert not warm._thread.is_alive()
        assert [o.results for o in in_pool(pool, call, call)] == [(7,), (7,)]
        assert (warm.taken, warm.ready) == (0, 0)
    assert no_children_left()
    why = f"no sandbox can be started ahead ({type(error).__name__}: {error})"
    assert warm.failure == why
    assert capsys.readouterr().err.splitlines() == [
        f"mathrl: warning: sandbox: {why}: no sandbox is started ahead any more, each call "
        "starts its own"
    ]


@pytest.mark.slow
def test_a_call_in_flight_when_the_pool_closes_still_finishes(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its sandbox would die with the thread that started it: that thread waits for the call.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
    slow = "import time\ndef f():\n    time.sleep(1)\n    return 'finished'\n"
    with Workers(1) as pool:
        warm = primed(pool, 1)

        async def go() -> Outcome:
            call = asyncio.ensure_future(
                pool.run(functools.partial(call_function, slow, "f", [[]], FAST))
            )
            while warm.taken == 0:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(warm.close)
            return await call

        outcome = asyncio.run(go())
    assert outcome.results == ("finished",), outcome
    assert no_children_left()


@pytest.mark.slow
def test_a_fork_of_the_trainer_does_not_hold_up_a_sandbox_started_before_it(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task's call in a forked process (`work_in_processes`) holds a copy of every waiting
    # sandbox's stdin; the sandbox reads its call by length, so it need not see end-of-file.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 1)
    with Workers(2) as pool:
        warm = primed(pool, 1)

        async def go() -> Outcome:
            forked = asyncio.ensure_future(
                pool.run(in_process(functools.partial(time.sleep, FAST.wall_seconds + 1), 30))
            )
            await asyncio.sleep(0.3)  # the fork is made
            outcome = await pool.run(
                functools.partial(call_function, "def f():\n    return 2\n", "f", [[]], FAST)
            )
            await forked
            return outcome

        outcome = asyncio.run(go())
        assert warm.taken == 1
    assert outcome.results == (2,), outcome


@pytest.mark.slow
def test_a_fork_of_the_trainer_that_calls_the_sandbox_leaves_the_pools_alone(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task's call in a forked process has copies of the pool's sandboxes, which are not its
    # own: it starts its own sandbox, and the pool's, busy or waiting, go on.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 3)
    slow = "import time\ndef f():\n    time.sleep(1)\n    return 'finished'\n"
    quick = functools.partial(call_function, "def f():\n    return 7\n", "f", [[]], FAST)
    with Workers(2) as pool:
        warm = primed(pool, 3)

        async def go() -> tuple[Outcome, Outcome]:
            busy = asyncio.ensure_future(
                pool.run(functools.partial(call_function, slow, "f", [[]], FAST))
            )
            while warm.taken == 0:
                await asyncio.sleep(0.01)
            forked = await pool.run(in_process(quick, 30))
            return await busy, forked

        busy, forked = asyncio.run(go())
        assert (busy.results, forked.results) == (("finished",), (7,))
        assert warm.taken == 1
        assert all(started.child.poll() is None for started in warm._ready)
    assert no_children_left()


@pytest.mark.slow
def test_calls_that_may_start_processes_are_never_started_ahead(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As uid 65534 every waiting sandbox would count against such a call's process limit.
    limits = replace(FAST, processes=2)
    call = functools.partial(call_function, "def f():\n    return 7\n", "f", [[]], limits)
    with Workers(1) as pool:
        assert in_pool(pool, call, call)[1].results == (7,)
        assert pool.wait_idle(5)
        time.sleep(0.5)  # time enough to start some, were it asked to
        warm = open_warm(pool)
        assert (warm.ready, warm.taken) == (0, 0)


@pytest.mark.slow
def test_a_sandbox_waiting_for_its_call_holds_none_of_the_trainers_memory(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its first process is an interpreter of its own, not a copy of this process: what this
    # process writes while the sandbox waits is not kept a second time for it.
    monkeypatch.setattr(sandbox, "WARM_SANDBOXES", 2)
    ballast = bytearray(200 * 2**20)
    ballast[:: 2**12] = b"x" * len(ballast[:: 2**12])  # resident
    with Workers(1) as pool:
        warm = primed(pool, 2)
        for started in list(warm._ready):
            first, deadline = started.child.pid, time.monotonic() + 30
            while WAITER.encode() not in Path(f"/proc/{first}/cmdline").read_bytes().split(b"\0"):
                assert time.monotonic() < deadline, "its first process never became the waiter"
                time.sleep(0.01)  # it execs the waiter just after the child's exec
            assert resident_mb(first) < resident_mb(os.getpid()) / 4
            # Never a core (its exec made it dumpable again): 1, not 0, stops a piped one too.
            limits = Path(f"/proc/{first}/limits").read_text().splitlines()
            assert [line.split()[4:6] for line in limits if line.startswith("Max core")] == [
                ["1", "1"]
            ]
    del ballast


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_kill_is_reported_alike_by_either_sandbox(
    any_box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the hook the code may lower its own CPU limit to nothing: the kernel's SIGKILL,
    # early (not the CPU limit's), reads as that, from a sandbox started ahead too.
    use_layers("kernel", monkeypatch)
    source = (
        "import resource\n"
        "def f():\n"
        "    resource.setrlimit(resource.RLIMIT_CPU, (0, 0))\n"
        "    while True:\n"
        "        pass\n"
    )
    outcome = any_box.run(source)
    assert outcome == Outcome("crashed", (None,), "killed by SIGKILL: no result"), outcome


def test_the_audit_hook_reads_no_global_name_and_holds_no_closure_cell() -> None:
    # Compiled here, never run: a name the hook read from builtins at each event (str, int)
    # is one the completion could rebind to a class whose instances answer as it likes.
    module = compile(HARNESS, "<harness>", "exec")
    guard = next(c for c in module.co_consts if isinstance(c, CodeType) and c.co_name == "guard")
    hook = next(c for c in guard.co_consts if isinstance(c, CodeType) and c.co_name == "hook")
    globals_read = [
        i.argval for i in dis.get_instructions(hook) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    ]
    assert globals_read == []
    # Nor a closure cell, which a frame's f_locals write through to from Python 3.13 (PEP 667):
    # its state is its defaults, of which each call's frame has its own copy.
    assert (hook.co_freevars, hook.co_cellvars) == ((), ())
    assert guard.co_cellvars == ()
    # The check can fail: a hook that names `str` itself reads it from builtins.
    liar = compile("def hook(a):\n    return type(a) is str\n", "<liar>", "exec")
    (hook_of_liar,) = (c for c in liar.co_consts if isinstance(c, CodeType))
    assert [i.argval for i in dis.get_instructions(hook_of_liar) if i.opname == "LOAD_GLOBAL"]
