"""Run a model's Python in a locked-down child process and return what one function returned.

For: the code-writing task's reward, on Linux. Model output is untrusted, so it never runs in
the trainer's process: `call_function` starts a fresh interpreter, runs the completion there and
calls `function(*args)` once per input. Expected outputs never leave the parent, so a completion
scores only by computing them. Not for: trusted code, or code that needs subprocesses, the
network, or files outside its own empty temporary folder.

Layers; tests/test_sandbox.py shows each one alone stopping the attacks it is meant for:
* Always: rlimits (CPU, address space, file size, open files, processes, no core); SIGKILL to
  the process group at the wall-clock deadline or past the output cap; `python -I -S -B` with
  an empty environment; a fresh cwd, removed afterwards.
* An audit hook, set before the completion runs: no processes, signals, sockets, ctypes or other
  escape-hatch modules, subinterpreters, tracing, hand-made code objects, rlimit changes, chdir
  or links; no write, removal or metadata change outside cwd. Unaudited escape routes
  (os.mkfifo, os.mknod, os.chroot, pidfd signals) are removed from the modules.
* Kernel layers, set between fork and exec and skipped silently where the kernel or a non-root
  trainer does not allow them: a network namespace (loopback only); a private tmpfs of
  `file_bytes` as cwd; Landlock (writes only in cwd, no TCP, no signals or ptrace out of the
  sandbox); on x86-64 a seccomp filter (no fork, exec*at, kill, ptrace, sockets, mknod, chmod,
  chown, utime, xattrs, mount); no capabilities, so even as root it cannot raise a hard rlimit
  or read other users' private files.

Not isolated: reads of files that are world-readable or root's own (a `.env` beside the trainer,
say: the code can return what it read as a result), CPU cores, memory bandwidth, and the kernel
itself. RLIMIT_NPROC does not bind root. With the hook alone, a memory-safety bug in CPython
could disarm the hook; with the kernel layers alone, the code may exec another program in place
(which stays confined).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TypeAlias

from mathrl.tasks.code.harness import HARNESS
from mathrl.tasks.code.kernel import Kernel, kernel_layers
from mathrl.text import one_line

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
STATUSES = ("ok", "error", "timeout", "output_limit", "crashed")
"""ok: every call ran (a result is None where its call raised or returned non-JSON); error:
the source raised or defines no such function; timeout: the wall or CPU limit; output_limit:
too much output; crashed: the child ended without a result (exit, signal, out of memory)."""

_LAYERS = frozenset({"hook", "kernel"})
"""The optional layers in force. Tests narrow it to show that each layer holds on its own."""


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
    source: str, function: str, inputs: Sequence[Sequence[JsonValue]], limits: Limits = Limits()
) -> Outcome:
    """Run `source` in a fresh sandboxed Python, call `function(*args)` for each args in `inputs`.

    Results come back through JSON: tuples as lists, dict keys as strings. Never raises because
    of `source`; raises ValueError for a bad `function` or `inputs`, OSError if no child starts.
    """
    if not isinstance(function, str) or not function.isidentifier():
        raise ValueError(f"function must be a Python identifier, got {function!r}")
    if any(isinstance(args, str | bytes) or not isinstance(args, Sequence) for args in inputs):
        raise ValueError(f"inputs must be a sequence of argument sequences, got {inputs!r:.80}")
    budget = (limits.output_bytes - 1024) // max(1, len(inputs))  # bytes per encoded result
    try:
        arguments = [list(args) for args in inputs]
        request = json.dumps(
            {"source": source, "function": function, "inputs": arguments, "budget": budget,
             "hook": "hook" in _LAYERS}
        ).encode()  # fmt: skip
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"inputs must hold JSON values only, got {exc}") from None
    workdir = tempfile.mkdtemp(prefix="mathrl-sandbox-")
    try:
        kernel = kernel_layers() if "kernel" in _LAYERS else None
        with subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", HARNESS], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env={}, close_fds=True,
            start_new_session=True, preexec_fn=_confine(limits, workdir, kernel),
        ) as child:  # fmt: skip
            return _collect(child, request, len(inputs), limits)
    finally:
        remove_tree(workdir)


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


def _collect(child: subprocess.Popen[bytes], request: bytes, n: int, limits: Limits) -> Outcome:
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
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(OSError):
                    kill(child.pid, signal.SIGKILL)
            child.wait()
    stdout, stderr = streams.values()
    nothing, code = (None,) * n, child.returncode
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


def _confine(limits: Limits, workdir: str, kernel: Kernel | None) -> Callable[[], None]:
    """The preexec_fn. It runs between fork and exec, so it gets everything ready-made."""

    def pair(what: int, soft: int, hard: int) -> tuple[int, tuple[int, int]]:
        ceiling = resource.getrlimit(what)[1]  # a non-root trainer cannot go above its own
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        return what, (soft, hard)

    rlimits = [  # address space last: the ones before it must not need new memory
        pair(resource.RLIMIT_CORE, 0, 0),
        pair(resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        pair(resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        pair(resource.RLIMIT_NPROC, limits.processes, limits.processes),
        pair(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),
        pair(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
    ]
    folder, tmpfs = os.fsencode(workdir), b"size=%d,nr_inodes=1024,mode=700" % limits.file_bytes

    def confine() -> None:
        if kernel is not None:
            kernel.enter(folder, tmpfs)
        for what, values in rlimits:
            resource.setrlimit(what, values)

    return confine
