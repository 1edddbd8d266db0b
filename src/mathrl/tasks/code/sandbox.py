"""Run a model's Python in a locked-down child process and return what one function returned.

For: the code-writing task's reward, on Linux. Model output is untrusted, so it never runs in
the trainer's process: `call_function` starts a fresh interpreter, runs the completion there and
calls `function(*args)` once per input. Expected outputs never leave the parent, so a completion
scores only by computing them. Not for: trusted code, or code that needs subprocesses, the
network, or files outside its own empty temporary folder.

A call: `python -I -S -B`, with an empty environment, runs `harness.HARNESS` in a fresh
folder, removed afterwards (`remove_tree`, which survives whatever the child leaves there),
under the rlimits of `Limits`; its process group is killed at the wall-clock deadline or past
the output cap. The audit hook (`mathrl.tasks.code.harness`) and the kernel layers
(`mathrl.tasks.code.kernel`, entered between fork and exec) are around it. What each layer
stops, what is not isolated, and what it all costs: `mathrl.tasks.code`.

A call made on a worker pool's thread (`mathrl.workers`) takes a sandbox the pool started ahead
of it, if one is ready (`Warm`): set up in full, it waits for its call on stdin, and serves that
one call only. Starting a sandbox is most of a call's cost, so the loop's waits on the service
pay for it instead of the rewards.

Missing layers: a layer the machine cannot set up stops the call (`SandboxError`) and
`check_layers` refuses the machine (`SandboxUnavailable`), unless the caller passes
`allow_missing_layers=True`; then what can be set up is, and `check_layers` names what is
missing. Nothing here is process-wide: each call says which it wants, and a sandbox started
ahead serves only calls of its kind.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TypeAlias

from mathrl import workers
from mathrl.adapter import Unavailable
from mathrl.tasks.code import harness
from mathrl.tasks.code.kernel import (
    ALL_LAYERS,
    LAYERS,
    NOBODY,
    Kernel,
    bit,
    kernel_layers,
)
from mathrl.text import one_line

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
STATUSES = ("ok", "error", "timeout", "output_limit", "crashed")
"""ok: every call ran (a result is None where its call raised or returned non-JSON); error:
the source raised or defines no such function; timeout: the wall or CPU limit; output_limit:
too much output; crashed: the child ended without a result (exit, signal, out of memory)."""

_LAYERS = frozenset({"hook", "kernel"})
"""The optional layers in force. Tests narrow it to show that each layer holds on its own."""
STOP_SECONDS = 2.0
"""How long a stopped call's first process may take to kill and reap its child."""
WARM_SANDBOXES = 32
"""Sandboxes a worker pool keeps started ahead of their calls (see `Warm`); each holds about
8 MB while it waits. 0: none."""
CHECK_SECONDS = 0.25
"""How often a pool looks whether a sandbox it started ahead ended before its call."""
ALLOW_MISSING_LAYERS = "allow_missing_layers"
"""The option that runs with the layers this machine can set up: a keyword of `call_function`
and `check_layers`, and of the code tasks' constructors."""


class SandboxError(OSError):
    """A kernel layer could not be set up for a call, and missing layers are not allowed.

    The message is one line: what is missing and how to get it. `allowed_by` names the option
    that would run the call anyway, with less (`ALLOW_MISSING_LAYERS`), or is None where no
    option would (the child could not be set up at all).
    """

    def __init__(self, message: str, allowed_by: str | None = None) -> None:
        super().__init__(message)
        self.allowed_by = allowed_by


class SandboxUnavailable(Unavailable):
    """This machine cannot set up every layer (`check_layers`). One line: what and how.

    `allowed_by`: as `SandboxError`'s, the option that would run with what is there, if any.
    """

    def __init__(self, message: str, allowed_by: str | None = None) -> None:
        super().__init__(message)
        self.allowed_by = allowed_by


@dataclass(frozen=True, slots=True)
class Limits:
    """What one call may use. Integers >= 1, except `processes` (>= 0) and `wall_seconds`."""

    cpu_seconds: int = 2  # RLIMIT_CPU: SIGXCPU at this, SIGKILL a second later
    memory_bytes: int = 256 * 2**20  # RLIMIT_AS; the interpreter itself starts within 16 MiB
    file_bytes: int = 2**20  # RLIMIT_FSIZE, and the size of the tmpfs cwd
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 0  # RLIMIT_NPROC: processes or threads it may start (root is exempt)
    wall_seconds: float = 5.0  # then the process group is killed
    output_bytes: int = 64 * 2**10  # stdout + stderr read; the results must fit in it

    def __post_init__(self) -> None:
        for field in fields(self):
            value, wall = getattr(self, field.name), field.name == "wall_seconds"
            least = 0 if field.name == "processes" else 1e-3 if wall else 1
            kinds = (int, float) if wall else int
            if isinstance(value, bool) or not isinstance(value, kinds) or not value >= least:
                raise ValueError(f"Limits.{field.name} must be a number >= {least}, got {value!r}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came back: a status from STATUSES, one result per input, one line for humans.

    Results are the completion's data: compare them, do not trust them (e.g. do not log them raw).
    """

    status: str
    results: tuple[JsonValue | None, ...]
    detail: str


def call_function(
    source: str,
    function: str,
    inputs: Sequence[Sequence[JsonValue]],
    limits: Limits = Limits(),
    allow_missing_layers: bool = False,
) -> Outcome:
    """Run `source` in a fresh sandboxed Python, call `function(*args)` for each args in `inputs`.

    Results come back through JSON: tuples as lists, dict keys as strings. Never raises because
    of `source`; raises ValueError for a bad `function` or `inputs`, OSError if no child starts,
    and SandboxError (an OSError) if a kernel layer cannot be set up, unless
    `allow_missing_layers`: then the call runs with the layers that can be.
    """
    outcome, _ = _call(source, function, inputs, limits, strict=not allow_missing_layers)
    return outcome


def _call(
    source: str,
    function: str,
    inputs: Sequence[Sequence[JsonValue]],
    limits: Limits,
    strict: bool,
) -> tuple[Outcome, Setup]:
    if not isinstance(function, str) or not function.isidentifier():
        raise ValueError(f"function must be a Python identifier, got {function!r}")
    if any(isinstance(args, str | bytes) or not isinstance(args, Sequence) for args in inputs):
        raise ValueError(f"inputs must be a sequence of argument sequences, got {inputs!r:.80}")
    budget = (limits.output_bytes - 1024) // max(1, len(inputs))  # bytes per encoded result
    try:
        arguments = [list(args) for args in inputs]
        request = json.dumps(
            {"source": source, "function": function, "inputs": arguments, "budget": budget}
        ).encode()
        request = b"%d\n%s" % (len(request), request)  # its length first: see harness.HARNESS
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"inputs must hold JSON values only, got {exc}") from None
    kernel = kernel_layers() if "kernel" in _LAYERS else None
    if kernel is None and "kernel" in _LAYERS and strict:
        raise SandboxError(
            f"sandbox: the kernel layers need Linux, not {sys.platform}", ALLOW_MISSING_LAYERS
        )
    kind = Kind(limits, kernel, strict, "hook" in _LAYERS)
    started = _warm(kind) or _start(kind)
    try:
        with started.child as child:
            outcome, setup = _collect(child, request, len(inputs), limits)
    finally:
        remove_tree(started.workdir)
    if strict and kernel is not None and setup.missing:
        raise SandboxError(f"sandbox: {setup.advice(kernel)}", ALLOW_MISSING_LAYERS)
    return outcome, setup


@dataclass(frozen=True, slots=True)
class Kind:
    """What a sandbox is started with; a call may use a sandbox started ahead of it only if
    that sandbox is of the call's kind."""

    limits: Limits
    kernel: Kernel | None
    strict: bool
    hook: bool


@dataclass(frozen=True, slots=True)
class Started:
    """A sandbox's child, started and waiting for its call on stdin, and its host folder."""

    child: subprocess.Popen[bytes]
    workdir: str
    kind: Kind


def _start(kind: Kind, lean: bool = False) -> Started:
    """Start a sandbox of `kind`: it sets itself up, then waits to read its call. `lean`: its
    first process waits in an interpreter of its own, not as a copy of the trainer (for a
    sandbox that may wait long; it costs a small interpreter's start)."""
    workdir = tempfile.mkdtemp(prefix="mathrl-sandbox-")
    try:
        if kind.kernel is not None and kind.kernel.root:  # its own folder, should no tmpfs cover it
            os.chown(workdir, NOBODY, NOBODY)
        executable = kind.kernel.executable if kind.kernel else sys.executable
        child = subprocess.Popen(
            [executable, "-I", "-S", "-B", *harness.arguments(), *(["hook"] if kind.hook else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir,
            env={}, close_fds=True, start_new_session=True,
            preexec_fn=_confine(kind.limits, kind.kernel, kind.strict, lean),
        )  # fmt: skip
    except BaseException as exc:
        remove_tree(workdir)
        if isinstance(exc, subprocess.SubprocessError):  # the set-up raised before exec
            raise SandboxError(f"sandbox: the child could not be set up ({exc})") from None
        raise
    return Started(child, workdir, kind)


def _warm(kind: Kind) -> Started | None:
    """A sandbox of `kind` started ahead, if this call runs on a worker pool that has one.

    Never for calls that may start processes: as uid 65534 every sandbox counts against
    each one's limit on processes, so those waiting would use it up."""
    pool = workers.current()
    if pool is None or kind.limits.processes > 0:
        return None
    warm = warm_of(pool)
    return warm.take(kind) if warm is not None else None


def warm_of(pool: workers.Workers) -> Warm | None:
    """The sandboxes `pool` keeps started ahead of its calls (made on first use); None while
    the pool is closed."""
    return pool.kept("sandbox", lambda: Warm(pool, WARM_SANDBOXES))


class Warm:
    """Sandboxes started ahead of their calls, for the calls a worker pool runs.

    A thread starts them while the pool has no call queued or running (the
    loop waits on sampling or training), up to `size`, of the kind of the
    pool's latest call. Each serves one call, exactly as a sandbox started for
    it would: the same layers, set up before anything of the call's exists. A
    call that finds none ready starts its own. `close` ends those not used.

    A sandbox dies with the thread that started it (its death signal, which
    ends it if the trainer dies), so that thread ends only once every sandbox
    it handed out has finished its call.

    When one cannot be started ahead, or one dies before its call (an
    interpreter that cannot start again outside its pid namespace, a layer
    that a strict call's set-up lacks, a kill from outside), the pool says so
    once, with the cause (`failure`, and a line to `report`: by default on
    stderr), and starts none ahead any more: each call starts its own, as
    without a pool.
    """

    def __init__(
        self, pool: workers.Workers, size: int, report: Callable[[str], None] | None = None
    ) -> None:
        self._size = size
        self.taken = 0
        """How many calls found a sandbox ready."""
        self.failure: str | None = None
        """Why it starts none ahead any more (one line), or None."""
        self._report = report or _warn
        self._pool = pool
        self._ready: list[Started] = []
        self._serving: list[Started] = []  # handed out, maybe still at their call
        self._kind: Kind | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._fill, name="mathrl-sandboxes", daemon=True)
        self._thread.start()

    @property
    def size(self) -> int:
        """How many sandboxes it keeps started ahead; set it to start more, or none."""
        return self._size

    @size.setter
    def size(self, size: int) -> None:
        with self._changed:
            self._size = size
            self._changed.notify()  # the thread that starts them may be waiting for room

    @property
    def ready(self) -> int:
        """How many sandboxes wait for a call now."""
        with self._changed:
            return len(self._ready)

    def take(self, kind: Kind) -> Started | None:
        """A ready sandbox of `kind`, or None. Asks for more of `kind` from now on."""
        found, dropped = None, []
        with self._changed:
            if self._closed:
                return None
            if kind != self._kind:
                self._kind, dropped, self._ready = kind, self._ready, []
            while self._ready and found is None:
                started = self._ready.pop(0)  # oldest first
                if started.child.poll() is None:
                    found = started
                else:  # it ended while waiting: it failed, or was killed from outside
                    dropped.append(started)
            if found is not None:
                self.taken += 1
                self._serving = [s for s in self._serving if s.child.returncode is None]
                self._serving.append(found)
            self._changed.notify()
        dead = [started for started in dropped if started.child.poll() is not None]
        if dead:
            self._fail(f"a sandbox started ahead ended before its call ({_cause(dead[0])})")
        for started in dropped:
            _end(started)
        return found

    def close(self) -> None:
        """End the sandboxes not used, then the thread that starts them (once every sandbox
        it handed out has finished its call)."""
        self._stop_filling()
        self._thread.join()

    def _stop_filling(self) -> None:
        with self._changed:
            self._closed, dropped, self._ready = True, self._ready, []
            self._changed.notify()
        for started in dropped:
            _end(started)

    def _fail(self, why: str) -> None:
        """Start none ahead any more, and say why, once."""
        with self._changed:
            first, self.failure = self.failure is None, self.failure or why
        self._stop_filling()
        if first:
            self._report(f"{why}: no sandbox is started ahead any more, each call starts its own")

    def _fill(self) -> None:
        try:
            self._fill_while_open()
        finally:
            self._wait_served()

    def _fill_while_open(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(  # a while at most: those waiting may end meanwhile
                    lambda: (
                        self._closed or (self._kind is not None and len(self._ready) < self.size)
                    ),
                    timeout=CHECK_SECONDS,
                )
                if self._closed:
                    return
                kind, room = self._kind, len(self._ready) < self.size
                dead = next((s for s in self._ready if s.child.poll() is not None), None)
            if dead is not None:  # one ended before its call: so would the next
                self._fail(f"a sandbox started ahead ended before its call ({_cause(dead)})")
                return
            if kind is None or not room or not self._pool.wait_idle(0.05):
                continue  # (only while the pool would wait anyway)
            try:
                started = _start(kind, lean=True)
            except Exception as exc:  # out of processes, say: the calls start their own
                self._fail(f"no sandbox can be started ahead ({type(exc).__name__}: {exc})")
                return
            with self._changed:
                fresh = kind == self._kind and not self._closed
                if fresh:
                    self._ready.append(started)
            if not fresh:
                _end(started)

    def _wait_served(self) -> None:
        """Until each sandbox handed out is reaped by its call (which never takes longer than
        its wall limit and the stop), without reaping it here: its pid stays its own."""
        with self._changed:
            serving = list(self._serving)
        if serving:
            longest = max(s.kind.limits.wall_seconds for s in serving)
            deadline = time.monotonic() + longest + STOP_SECONDS + 1.0
            while any(s.child.returncode is None for s in serving):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)


def _warn(line: str) -> None:
    print(f"mathrl: warning: sandbox: {line}", file=sys.stderr, flush=True)


def _cause(started: Started) -> str:
    """How a sandbox that was never given its call ended: its exit, and the set-up's report
    of the layer it lacked, or else the last line it wrote (a loader's error, say)."""
    code = started.child.returncode
    how = f"exited with code {code}" if code >= 0 else f"killed by {_signal_name(-code)}"
    assert started.child.stderr is not None
    stderr, written = started.child.stderr.fileno(), b""
    os.set_blocking(stderr, False)
    with contextlib.suppress(OSError):  # nothing to read yet: its child still holds the pipe
        written = os.read(stderr, 2**16)
    setup, rest = _setup(written)
    if setup.missing and started.kind.kernel is not None:
        return f"{how}: {setup.advice(started.kind.kernel)}"
    last = rest.decode(errors="replace").strip().rpartition("\n")[2]
    return f"{how}: {one_line(last)}" if last else how


def _end(started: Started) -> None:
    """Stop a sandbox that was never given its call."""
    mask = bit("pid") if started.kind.kernel is not None else 0  # SIGTERM: first process ends
    with started.child as child:
        _stop(child, Setup(mask))
    remove_tree(started.workdir)


@dataclass(frozen=True, slots=True)
class Setup:
    """What the child's set-up reported: the layers it has (a mask of LAYERS), and the
    error number of each layer that failed."""

    mask: int = 0
    missing: tuple[tuple[str, int], ...] = ()

    def advice(self, kernel: Kernel) -> str:
        """One line: the first layer that failed (or is missing), and how to get it."""
        unreported = [(name, 0) for name in LAYERS if not self.mask & bit(name)]
        return _advice(*[*self.missing, *unreported, ("", 0)][0], kernel)


def _advice(step: str, errno: int, kernel: Kernel) -> str:
    """What a failed set-up step (`layer` or `layer:detail`) means, and how to get it."""
    why = f" ({os.strerror(errno)})" if errno else ""
    unprivileged = (
        "unprivileged user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1 "
        "and user.max_user_namespaces=10000 (on Ubuntu also "
        "kernel.apparmor_restrict_unprivileged_userns=0), or run as root"
    )
    container = (
        "in a container, allow unshare and mount (for Docker: --cap-add SYS_ADMIN "
        "--security-opt seccomp=unconfined --security-opt apparmor=unconfined "
        "--security-opt systempaths=unconfined)"
    )
    layer = step.split(":")[0]
    advice = {
        "identity:userns": f"no user namespace for the child{why}: {unprivileged}",
        "identity:map": f"cannot map the child's uid in its user namespace{why}",
        "identity:expose": (
            f"cannot let uid {NOBODY} reach the interpreter {kernel.executable}{why}: install "
            "Python where other users can read it"
        ),
        "identity:setuid": f"cannot switch the child to uid {NOBODY}{why}",
        "pid:fork": f"cannot start the child in its pid namespace{why}",
        "pid:proc": (
            f"cannot mount /proc for the child's pid namespace{why}: /proc must not be "
            "partly hidden (for Docker: --security-opt systempaths=unconfined)"
        ),
        "pid:mountinfo": f"cannot hide the host's mount table from the child{why}",
        "mount:private": (
            f"the child has its own mount namespace, but mount is refused in it{why}: a "
            f"seccomp filter or security module around the trainer refuses it; {container}"
        ),
        "tmpfs:interpreter": (
            f"the interpreter {kernel.executable} (or its installation, "
            f"{os.fsdecode(kernel.prefix)}) is under /tmp, which the child's private tmpfs "
            "covers: install Python outside /tmp"
        ),
        "seccomp:prctl": (
            f"the seccomp filter cannot be installed: prctl is refused{why}, as by a seccomp "
            f"filter around the trainer; {container}"
        ),
        "seccomp:exec": (
            "the exec filter needs the child's pid namespace"
            if errno == 0
            else f"the exec filter cannot be installed{why}"
        ),
        "landlock": (
            f"Landlock is off{why}: Linux >= 5.13 with landlock in the lsm= boot parameter"
        ),
        "seccomp": (
            f"no seccomp filter for {platform.machine()}: only x86-64 has one"
            if kernel.seccomp is None
            else f"the seccomp filter cannot be installed{why}"
        ),
        "capabilities": f"cannot drop the child's capabilities{why}",
        "tmpfs": f"cannot mount a tmpfs as the child's folder{why}",
    }.get(step, f"no {layer} namespace for the child{why}")
    if layer in ("net", "ipc", "mount", "pid", "tmpfs") and ":" not in step and errno == 1:
        # Without a user namespace a non-root child stops at identity:userns first: one
        # refused here had its user namespace, so the refusal comes from around the trainer.
        advice += f"; {container}"
    return advice


@dataclass(frozen=True, slots=True)
class Layers:
    """The kernel layers a child gets on this machine (`check_layers`)."""

    setup: Setup
    root: bool
    landlock_abi: int
    file_bytes: int

    @property
    def complete(self) -> bool:
        return self.setup.mask == ALL_LAYERS

    def describe(self) -> str:
        """One line, e.g. "sandbox: uid 65534, pid+net+ipc+mount namespaces, tmpfs 1 MiB, no
        capabilities, Landlock ABI 7, seccomp x86-64"; a warning naming what is missing."""
        mask, parts = self.setup.mask, []
        namespaces = [name for name in ("pid", "net", "ipc", "mount") if mask & bit(name)]
        if mask & bit("identity") and not self.root:
            namespaces.insert(0, "user")
        if mask & bit("identity") and self.root:
            parts.append(f"uid {NOBODY}")
        if namespaces:
            parts.append("+".join(namespaces) + " namespaces")
        if mask & bit("tmpfs"):
            parts.append(f"tmpfs {_size(self.file_bytes)}")
        if mask & bit("capabilities"):
            parts.append("no capabilities")
        if mask & bit("landlock"):
            parts.append(f"Landlock ABI {self.landlock_abi}")
        if mask & bit("seccomp"):
            parts.append("seccomp x86-64")
        layers = ", ".join(parts) or "no kernel layers"
        missing = ", ".join(name for name in LAYERS if not mask & bit(name))
        if missing:
            return f"warning: sandbox without {missing} (missing layers allowed): {layers}"
        return f"sandbox: {layers}"


def _size(n: int) -> str:
    return (
        f"{n // 2**20} MiB"
        if n % 2**20 == 0
        else f"{n // 2**10} KiB"
        if n % 1024 == 0
        else f"{n} B"
    )


def check_layers(limits: Limits = Limits(), allow_missing_layers: bool = False) -> Layers:
    """Set up a child once and report its kernel layers; raise SandboxUnavailable (one line:
    what is missing and how to get it) if any is, unless `allow_missing_layers`."""
    kernel = kernel_layers()
    if kernel is None:
        raise SandboxUnavailable(f"sandbox: the kernel layers need Linux, not {sys.platform}")
    strict = not allow_missing_layers
    try:  # strict: the first layer missing stops the child, and is named
        outcome, setup = _call("def f():\n    return 1\n", "f", [[]], limits, strict)
    except SandboxError as exc:
        raise SandboxUnavailable(str(exc), exc.allowed_by) from None
    except OSError as exc:
        raise SandboxUnavailable(f"sandbox: no child could start ({exc})") from None
    if outcome.results != (1,):
        raise SandboxUnavailable(f"sandbox: a test call failed: {outcome.detail}")
    layers = Layers(setup, kernel.root, kernel.landlock_abi, limits.file_bytes)
    if strict and not layers.complete:  # a layer missing that no set-up step reported
        raise SandboxUnavailable(f"sandbox: {setup.advice(kernel)}", ALLOW_MISSING_LAYERS)
    return layers


def remove_tree(top: str) -> None:
    """Remove `top` and all under it, as far as possible; never raise.

    Whatever the child left: a tree deeper than Python's recursion limit or
    longer than a path may be (folders are moved up into `top` as they are
    met, so no path grows), folders it made unreadable, links (removed, never
    followed), entries that will not go (those stay, with the folders holding
    them). Every round removes or moves something, or it stops. The child's
    whole process group is dead by now, so nothing changes under it.
    """
    with contextlib.suppress(OSError):
        os.rmdir(top)  # the usual case: empty (a private tmpfs took the child's files)
        return
    try:
        root = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    moved = itertools.count()
    try:
        while _empty_one_level(root, moved):
            pass
    finally:
        os.close(root)
    with contextlib.suppress(OSError):
        os.rmdir(top)


def _empty_one_level(root: int, moved: Iterator[int]) -> bool:
    """Remove `root`'s files, move its folders' folders up into it, remove its emptied
    folders; True if anything changed."""
    changed = False
    try:
        entries = list(os.scandir(root))
    except OSError:
        return False
    for entry in entries:
        if not _is_folder(entry):
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=root)
                changed = True
            continue
        with contextlib.suppress(OSError):
            os.chmod(entry.name, 0o700, dir_fd=root)  # a folder, not a link: seen above
        try:
            inner = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        except OSError:
            continue
        try:
            for item in list(os.scandir(inner)):
                with contextlib.suppress(OSError):
                    if _is_folder(item):
                        up = f".up{next(moved)}"
                        os.rename(item.name, up, src_dir_fd=inner, dst_dir_fd=root)
                    else:
                        os.unlink(item.name, dir_fd=inner)
                    changed = True
        except OSError:
            pass
        finally:
            os.close(inner)
        with contextlib.suppress(OSError):
            os.rmdir(entry.name, dir_fd=root)
            changed = True
    return changed


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _collect(
    child: subprocess.Popen[bytes], request: bytes, n: int, limits: Limits
) -> tuple[Outcome, Setup]:
    assert child.stdin is not None
    assert child.stdout is not None
    assert child.stderr is not None
    stdin, streams = child.stdin.fileno(), {child.stdout.fileno(): b"", child.stderr.fileno(): b""}
    pending, killed = memoryview(request), ""
    deadline = time.monotonic() + limits.wall_seconds
    with selectors.DefaultSelector() as selector:
        try:
            os.set_blocking(stdin, False)
            selector.register(stdin, selectors.EVENT_WRITE)
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            while not killed:
                if (remaining := deadline - time.monotonic()) <= 0:
                    killed = f"killed after {limits.wall_seconds:g} s (wall-clock limit)"
                elif not selector.get_map():  # both pipes closed: wait for the exit itself
                    if os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                        break
                    time.sleep(min(remaining, 0.002))
                else:
                    for key, _ in selector.select(remaining):
                        if key.fd != stdin:
                            chunk = os.read(key.fd, 2**16)
                            streams[key.fd] += chunk
                            if not chunk:
                                selector.unregister(key.fd)
                            elif sum(map(len, streams.values())) > limits.output_bytes:
                                killed = f"more than {limits.output_bytes} bytes of output"
                            continue
                        try:
                            pending = pending[os.write(stdin, pending[: 2**16]) :]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:  # it died before reading everything
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(stdin)
                            child.stdin.close()
        finally:  # kill before reaping: until then neither its pid nor its group id is reused
            _stop(child, _setup(streams[child.stderr.fileno()])[0])
    stdout, stderr = streams.values()
    setup, stderr = _setup(stderr)
    return _outcome(stdout, stderr, child.returncode, killed, n, limits), setup


def _stop(child: subprocess.Popen[bytes], setup: Setup) -> None:
    """End the call's processes and reap the first. With a pid namespace, SIGTERM asks the
    first process (trusted: the trainer's fork) to kill the child and reap it, so nothing is
    left for a trainer that is process 1 of a container to reap; SIGKILL to the process
    group, then, for whatever did not end."""
    if setup.mask & bit("pid"):
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=STOP_SECONDS)
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(child.pid, signal.SIGKILL)
    child.wait()


def _setup(stderr: bytes) -> tuple[Setup, bytes]:
    """The set-up's lines at the start of stderr, parsed, and the rest of stderr."""
    mask, missing = 0, []
    while stderr.startswith(b"sandbox-"):
        line, _, stderr = stderr.partition(b"\n")
        what, _, value = line.rpartition(b" ")
        if what == b"sandbox-layers" and value.isdigit():
            mask = int(value)
        elif what.startswith(b"sandbox-missing ") and value.isdigit():
            missing.append((what.split()[1].decode(errors="replace"), int(value)))
    return Setup(mask, tuple(missing)), stderr


def _outcome(
    stdout: bytes, stderr: bytes, code: int, killed: str, n: int, limits: Limits
) -> Outcome:
    nothing = (None,) * n
    if killed:
        return Outcome("timeout" if "wall" in killed else "output_limit", nothing, killed)
    if code == -signal.SIGXCPU:
        return Outcome("timeout", nothing, f"cpu limit of {limits.cpu_seconds} s exceeded")
    try:
        reply = json.loads(stdout.rstrip().rpartition(b"\n")[2])
    except (ValueError, RecursionError):
        reply = None
    if (
        code == 0 and isinstance(reply, dict) and reply.get("status") in ("ok", "error")
        and isinstance(reply.get("results"), list) and len(reply["results"]) == n
        and isinstance(reply.get("detail"), str)
    ):  # fmt: skip
        results = tuple(reply["results"]) if reply["status"] == "ok" else nothing
        return Outcome(reply["status"], results, one_line(reply["detail"]))
    how = f"exited with code {code}" if code >= 0 else f"killed by {_signal_name(-code)}"
    last = stderr.decode(errors="replace").strip().rpartition("\n")[2]
    return Outcome("crashed", nothing, one_line(f"{how}: {last or 'no result'}"))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _confine(
    limits: Limits, kernel: Kernel | None, strict: bool, lean: bool = False
) -> Callable[[], None]:
    """The preexec_fn. It runs between fork and exec, so it gets everything ready-made."""

    def pair(what: int, soft: int, hard: int) -> tuple[int, tuple[int, int]]:
        ceiling = resource.getrlimit(what)[1]  # a non-root trainer cannot go above its own
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        return what, (soft, hard)

    def rlimits(cpu_hard: int) -> list[tuple[int, tuple[int, int]]]:
        return [  # address space last: the ones before it must not need new memory
            pair(resource.RLIMIT_CORE, 1, 1),  # no core: 0 would not stop a piped core_pattern
            pair(resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
            pair(resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
            pair(resource.RLIMIT_NPROC, limits.processes, limits.processes),
            pair(resource.RLIMIT_CPU, limits.cpu_seconds, cpu_hard),
            pair(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
        ]

    # Process 1 of a pid namespace ignores SIGXCPU, so there the hard limit is the limit (its
    # first process reports the SIGKILL as SIGXCPU); elsewhere SIGXCPU comes first.
    as_process_1, otherwise = rlimits(limits.cpu_seconds), rlimits(limits.cpu_seconds + 1)
    tmpfs = b"size=%d,nr_inodes=1024,mode=700" % limits.file_bytes
    if kernel is not None and kernel.root:
        tmpfs += b",uid=%d,gid=%d" % (NOBODY, NOBODY)

    def confine() -> None:  # pragma: no cover - in the sandbox's child, before exec
        layers = kernel.enter(tmpfs, limits.cpu_seconds, strict, lean) if kernel else 0
        for what, values in as_process_1 if layers & bit("pid") else otherwise:
            resource.setrlimit(what, values)

    return confine
