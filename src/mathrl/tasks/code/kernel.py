"""The sandbox's kernel layers: who the child is, what it sees, what it may do.

For: `mathrl.tasks.code.sandbox`, which builds a `Kernel` in the trainer
(`kernel_layers`, cached) and enters it in the child between fork and exec
(`Kernel.enter`, its preexec function), where nothing may import anything.

The layers, each a bit of the mask the child reports (`LAYERS`):

- identity: never real root. A root trainer's child switches to uid and gid
  65534 (nobody) with no groups; a non-root trainer's child runs in a new
  user namespace as the trainer's own, unprivileged uid.
- pid, net, mount: its own namespaces. In the pid namespace it is process 1
  and its /proc shows only itself (its mount tables, `/proc/1/mountinfo`,
  `mounts` and `mountstats`, read empty: they would show the host's devices
  and paths); the network has only a loopback.
- tmpfs: its folder is a private tmpfs of `file_bytes` in total, mounted
  `noexec` over /tmp (so the host's /tmp is out of sight, every path to it
  can be entered, and nothing written there can be mapped as code: a `.so`
  it writes will not load). Without it, the folder the trainer made is its
  cwd. An interpreter under /tmp would be hidden by it: that is a set-up
  step that fails (`tmpfs:interpreter`), with what to do.
- capabilities: none, and none to gain (the bounding set is emptied).
- landlock: writes only beneath its folder, no TCP, no signals out.
- seccomp (x86-64 only; `mathrl.tasks.code.seccomp`): an allow-list of the
  calls the interpreter needs (`seccomp.ALLOWED`), every other refused, with
  rules on the arguments of a few (no fork, no `fcntl`/`ioctl` command but
  those listed, no memory that is executable and writable or shared, or made
  so later); and a second filter (`EXEC_FILTER`) that
  lets exactly one execve through, the interpreter's own: the first process
  answers each execve (seccomp's user notification), lets that one through
  and refuses every later one, from native code or not, with EPERM, until
  the child is gone (`refuse_execs`). (A filter installed by the harness
  itself would need `ctypes` in the child, whose types stay reachable there
  through `object.__subclasses__()` however it is unloaded.)

A step the kernel refuses stops the child before it runs anything, with a
`sandbox-missing` line naming it, unless the trainer allowed missing layers;
then that step is skipped and the others still hold. The pid namespace needs
one more process: the child forks once after `unshare`, and the first process
(outside the namespace) waits and exits as its child did: as a copy of the
trainer, or (`lean`, for a sandbox started ahead of its call, which may wait
long) as a small interpreter of its own running `WAITER`, whose loader is told
the interpreter's folder (`Kernel.origin`): outside the pid namespace, under
its /proc, /proc/self/exe cannot be read, and a relocatable interpreter finds
its libpython through it ($ORIGIN).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import os
import platform
import resource
import select
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mathrl.tasks.code.seccomp import EXEC_FILTER, SECCOMP

LAYERS = (
    "identity", "pid", "net", "ipc", "mount", "tmpfs", "capabilities", "landlock", "seccomp"
)  # fmt: skip
"""Bit i of a child's layer mask is LAYERS[i]."""
ALL_LAYERS = (1 << len(LAYERS)) - 1
NOBODY = 65534
"""The uid and gid a root trainer's child runs as."""
SETUP_FAILED = 121
"""The exit code of a child that stopped because a required layer failed."""
READS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
"""System folders the child may read and execute from, besides its interpreter's prefix."""
READ_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/zero", "/dev/urandom")
"""Single files it may read."""

_PROC_TABLES = (
    *(b"/proc/1/" + name for name in (b"mountinfo", b"mounts", b"mountstats")),
    *(b"/proc/1/task/1/" + name for name in (b"mountinfo", b"mounts")),
)
"""The child's mount tables (it is process 1), which would show the host's layout."""
_NEWNS, _NEWUTS, _NEWIPC, _NEWUSER, _NEWPID, _NEWNET = (
    0x20000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
)  # fmt: skip
_NOSUID_NODEV, _NOEXEC, _BIND, _REC, _PRIVATE = 6, 8, 0x1000, 0x4000, 0x40000
_EXECUTE, _READ_FILE, _READ_DIR = 0x1, 0x4, 0x8  # Landlock's access rights to read
_STOP: list[int] = []
"""In the first process of a call: the pid of the child it waits for (see `_stop`)."""


def bit(layer: str) -> int:
    return 1 << LAYERS.index(layer)


@dataclass(frozen=True, slots=True)
class Kernel:
    """The kernel layers, ready to enter in a child between fork and exec."""

    libc: Any
    root: bool  # the trainer is root: switch the child to NOBODY, no user namespace
    executable: str  # the interpreter the child runs, as a real path
    prefix: bytes  # the interpreter's installation (sys.base_prefix), as a real path
    exposed: bytes | None  # the folder above `prefix` that NOBODY cannot enter, if any
    landlock: tuple[Any, int, int] | None  # ruleset attribute, its size, rights in cwd
    landlock_abi: int
    seccomp: tuple[Any, Any] | None  # sock_fprog, and the program it points at (kept alive)
    exec_filter: tuple[Any, Any] | None  # the same for EXEC_FILTER
    # The interpreter's folder, for a lean first process's loader to find what the interpreter
    # links through $ORIGIN (LD_ORIGIN_PATH): outside the child's pid namespace, under its
    # /proc, /proc/self/exe cannot be read. None: the loader is not told.
    origin: str | None = None

    def enter(
        self, tmpfs: bytes, cpu_seconds: int, strict: bool, lean: bool = False
    ) -> int:  # pragma: no cover - in the sandbox's child, before exec
        """Set up every layer in this child, or stop it (`strict`) at the first that fails;
        return the layers' mask.

        `lean`: the first process, once the child is set up, becomes a small interpreter that
        waits (`WAITER`), instead of waiting as a copy of the trainer, whose memory it would
        otherwise share, copy-on-write, for as long as it waits (a sandbox started ahead of
        its call waits long).

        Writes `sandbox-missing STEP ERRNO` for each failed step (STEP is a layer, or
        `layer:detail`) and, last, `sandbox-layers MASK` to fd 2 (the parent's stderr
        pipe): the child's untrusted code never holds fd 2's pipe, so these lines cannot
        be forged.

        This, `_landlock`, `_expose`, `_map_self`, `_stop` and `_wait_and_exit_alike` run
        only in the child, between fork and exec, where coverage cannot record them (each
        is marked "no cover - in the sandbox's child"): tests/test_sandbox.py and
        test_sandbox_layers.py check what each step does, from inside the child and from
        the trainer.
        """
        libc, word = self.libc, ctypes.c_ulong
        done, reachable = 0, self.exposed is None  # can NOBODY run the interpreter?
        first_process: socket.socket | None = None  # to hand the exec filter's listener to

        def failed(step: str, errno: int) -> None:
            os.write(2, b"sandbox-missing %s %d\n" % (step.encode(), errno))
            if strict:
                os._exit(SETUP_FAILED)

        def call(step: str, result: int) -> bool:
            if result != 0:
                failed(step, ctypes.get_errno())
            return result == 0

        def prctl(option: int, *arguments: Any) -> int:
            return int(libc.prctl(option, *arguments, *[word(0)] * (4 - len(arguments))))

        def mount(source: bytes, target: bytes, kind: bytes | None, flags: int) -> int:
            return int(libc.mount(source, target, kind, word(flags), None))

        if prctl(1, word(signal.SIGKILL)) != 0:  # PR_SET_PDEATHSIG: die with the trainer
            failed("seccomp:prctl", ctypes.get_errno())  # refused from outside: no filter either
        signal.signal(signal.SIGTERM, _stop)  # the trainer's "stop now": see _stop
        if not self.root and call("identity:userns", libc.unshare(_NEWUSER)):
            try:
                _map_self()
                done |= bit("identity")
            except OSError as exc:
                failed("identity:map", exc.errno or 0)
        for layer, flag in (("net", _NEWNET), ("ipc", _NEWIPC | _NEWUTS), ("mount", _NEWNS)):
            if call(layer, libc.unshare(flag)):
                done |= bit(layer)
        if call("pid", libc.unshare(_NEWPID)):
            # Closed when the child execs (or dies): by then its mounts are made, and the
            # interpreter is where a lean first process can start it.
            set_up = os.pipe2(os.O_CLOEXEC) if lean else None
            # The child hands the exec filter's listener over it (see EXEC_FILTER).
            listener = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                child = os.fork()
            except OSError as exc:
                failed("pid:fork", exc.errno or 0)
                child = -1
            if child > 0:
                _STOP.append(child)
                listener[1].close()
                execs = _let_one_exec_through(listener[0])
                if set_up is not None:  # if it can:
                    _become_waiter(self, child, cpu_seconds, set_up, execs)
                _wait_and_exit_alike(libc, child, cpu_seconds, execs)  # never returns
            if child == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                prctl(1, word(signal.SIGKILL))  # die with the first process
                if set_up is not None:
                    os.close(set_up[0])
                listener[0].close()
                first_process = listener[1]
        private = b"none", b"/", None, _REC | _PRIVATE
        if done & bit("mount") and not call("mount:private", mount(*private)):
            done &= ~bit("mount")
        if done & bit("mount"):  # else no tmpfs, and /proc stays the host's: their bits stay 0
            if hidden_by(b"/tmp", self.prefix, os.fsencode(self.executable)):
                failed("tmpfs:interpreter", 0)  # a tmpfs over /tmp would hide it: none
            elif call(
                "tmpfs",
                libc.mount(b"tmpfs", b"/tmp", b"tmpfs", word(_NOSUID_NODEV | _NOEXEC), tmpfs),
            ):
                try:
                    os.chdir(b"/tmp")
                    done |= bit("tmpfs")
                except OSError as exc:
                    failed("tmpfs", exc.errno or 0)
            if self.root and self.exposed is not None:
                reachable = self._expose(self.exposed, self.prefix, failed)
            proc = os.getpid() == 1  # its own /proc, which shows only its own processes
            if proc and call(
                "pid:proc", mount(b"proc", b"/proc", b"proc", _NOSUID_NODEV | _NOEXEC)
            ):
                hidden = True
                for table in _PROC_TABLES:  # the mount tables, empty
                    hidden = hidden and call(
                        "pid:mountinfo", mount(b"/dev/null", table, None, _BIND)
                    )
                if hidden:
                    done |= bit("pid")
        # Early, so the first process is waiting for the interpreter's exec by the time it
        # comes (the rest of the set-up execs nothing); after the mounts, whose failures come
        # first. No new privileges: it may install a filter without CAP_SYS_ADMIN, too.
        no_new_privileges = call("seccomp", prctl(38, word(1)))  # PR_SET_NO_NEW_PRIVS
        execs_filtered = (
            no_new_privileges
            and self.seccomp is not None  # else seccomp is missing: see below
            and self.exec_filter is not None
            and self._exec_filter(first_process, failed)
        )
        capabilities = True
        for capability in (*range(8), *range(9, 64), 8):  # CAP_SETPCAP (8), needed to drop, last
            result = prctl(24, word(capability))  # PR_CAPBSET_DROP
            capabilities &= result == 0 or ctypes.get_errno() == 22  # EINVAL: no such capability
        if self.root and not reachable:  # the weak set-up goes on as root, with no capabilities
            failed("identity:expose", 13)  # EACCES
        elif self.root:
            try:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)  # clears every capability too
                done |= bit("identity")
            except OSError as exc:
                failed("identity:setuid", exc.errno or 0)
            prctl(1, word(signal.SIGKILL))  # a change of uid cleared the death signal
        if capabilities:
            done |= bit("capabilities")
        else:
            failed("capabilities", ctypes.get_errno())
        if self.landlock is None:
            failed("landlock", 38)  # ENOSYS
        elif no_new_privileges and self._landlock(failed):
            done |= bit("landlock")
        if self.seccomp is None or self.exec_filter is None:
            failed("seccomp", 38)
        elif (
            no_new_privileges
            and call("seccomp", prctl(22, word(2), self.seccomp[0]))
            and execs_filtered
        ):
            done |= bit("seccomp")
        if first_process is not None:
            first_process.close()  # nothing sent: the first process lets nothing through
        os.write(2, b"sandbox-layers %d\n" % done)
        return done

    def _exec_filter(
        self, first_process: socket.socket | None, failed: Any
    ) -> bool:  # pragma: no cover - in the sandbox's child, before exec
        """Install EXEC_FILTER and hand its listener to the first process, which lets this
        child's next execve (the interpreter's) through and no other."""
        assert self.exec_filter is not None
        if first_process is None:  # no first process to answer it: no exec would pass
            failed("seccomp:exec", 0)
            return False
        word = ctypes.c_ulong
        # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, program)
        listener = int(self.libc.syscall(word(317), word(1), word(8), self.exec_filter[0]))
        if listener < 0:
            failed("seccomp:exec", ctypes.get_errno())
            return False
        try:
            socket.send_fds(first_process, [b"L"], [listener])
        except OSError as exc:
            failed("seccomp:exec", exc.errno or 0)
            return False
        finally:
            os.close(listener)
        return True

    def _landlock(
        self, failed: Any
    ) -> bool:  # pragma: no cover - in the sandbox's child, before exec
        """Writes only beneath cwd; reads only there, in the system folders and the
        interpreter's prefix, /proc (its own) and a few files; no TCP, no signals out."""
        assert self.landlock is not None
        libc, word = self.libc, ctypes.c_ulong
        attribute, size, rights = self.landlock
        ruleset = int(libc.syscall(word(444), attribute, word(size), word(0)))
        if ruleset < 0:
            failed("landlock", ctypes.get_errno())
            return False
        read = _EXECUTE | _READ_FILE | _READ_DIR
        allowed = [
            (b".", rights),
            (self.prefix, read),
            (os.fsencode(self.executable), _EXECUTE | _READ_FILE),  # should it be outside prefix
            *((os.fsencode(p), read) for p in READS),
            (b"/proc", _READ_FILE | _READ_DIR),
            *((os.fsencode(p), _READ_FILE) for p in READ_FILES),
        ]
        try:
            for path, access in allowed:
                try:
                    where = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:  # a system folder this machine does not have
                    continue
                rule = struct.pack("=Qi", access, where)
                added = libc.syscall(word(445), word(ruleset), word(1), rule, word(0))
                os.close(where)
                if added != 0:
                    failed("landlock", ctypes.get_errno())
                    return False
            if libc.syscall(word(446), word(ruleset), word(0)) != 0:
                failed("landlock", ctypes.get_errno())
                return False
            return True
        finally:
            os.close(ruleset)

    def _expose(
        self, hider: bytes, prefix: bytes, failed: Any
    ) -> bool:  # pragma: no cover - in the sandbox's child, before exec
        """Let NOBODY reach the interpreter's prefix inside `hider` (say /root, mode 700):
        a tmpfs over `hider` hides the rest of it, and the prefix is bound back in."""
        libc, word = self.libc, ctypes.c_ulong
        try:
            original = os.open(prefix, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            failed("identity:expose", exc.errno or 0)
            return False
        mounted = False
        try:
            if libc.mount(b"tmpfs", hider, b"tmpfs", word(_NOSUID_NODEV), b"size=65536,mode=755"):
                failed("identity:expose", ctypes.get_errno())
                return False
            mounted = True
            path = hider
            for part in prefix[len(hider) :].strip(b"/").split(b"/"):
                path += b"/" + part
                os.mkdir(path, 0o755)
            source = b"/proc/self/fd/%d" % original
            if libc.mount(source, prefix, None, word(_BIND | _REC), None):
                failed("identity:expose", ctypes.get_errno())
                return False
            mounted = False  # done: keep it
            return True
        except OSError as exc:
            failed("identity:expose", exc.errno or 0)
            return False
        finally:
            os.close(original)
            if mounted:  # half done: put `hider` back as it was, for the weak set-up
                libc.umount2(hider, 2)  # MNT_DETACH


def hidden_by(mount_point: bytes, *paths: bytes) -> bool:
    """Whether a mount over `mount_point` hides any of `paths` (real, absolute paths)."""
    top = mount_point.rstrip(b"/") + b"/"
    return any(path == mount_point or path.startswith(top) for path in paths)


def _let_one_exec_through(
    channel: socket.socket,
) -> int | None:  # pragma: no cover - in the sandbox's child, before exec
    """In the first process: take the child's exec filter listener and let the child's first
    execve (the interpreter's) through; return the listener, to refuse every later one with
    (`refuse_execs`). None if the child sent none (it stopped, or has no filter: its set-up
    reports that) or died meanwhile."""
    try:
        _, fds, _, _ = socket.recv_fds(channel, 1, 1)
    except OSError:
        fds = []
    finally:
        channel.close()
    for listener in fds:
        with contextlib.suppress(OSError):  # Linux 6.6: the answer on the child's own CPU
            fcntl.ioctl(listener, _NOTIF_SET_FLAGS, 1)  # SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
        try:
            waiting = select.poll()
            waiting.register(listener, select.POLLIN)
            if any(event & select.POLLIN for _, event in waiting.poll()):
                notice = bytearray(80)  # struct seccomp_notif
                fcntl.ioctl(listener, _NOTIF_RECV, notice, True)
                # struct seccomp_notif_resp: its id, val 0, error 0, FLAG_CONTINUE
                fcntl.ioctl(listener, _NOTIF_SEND, bytes(notice[:8]) + _CONTINUE)
                return listener
        except OSError:
            pass  # the child died meanwhile
        os.close(listener)
    return None


_NOTIF_RECV, _NOTIF_SEND, _NOTIF_SET_FLAGS = 0xC0502100, 0xC0182101, 0x40082104
"""SECCOMP_IOCTL_NOTIF_RECV, _SEND, _SET_FLAGS."""
# The tail of a struct seccomp_notif_resp after its id: val 0, error 0, and the flag CONTINUE
# (let the call through); val 0, error -EPERM, no flags (refuse it).
_CONTINUE = bytes(12) + (1).to_bytes(4, "little")
_EPERM = bytes(8) + (-1).to_bytes(4, "little", signed=True) + bytes(4)


REFUSE_EXECS = r"""
def refuse_execs(listener):
    # Answer each exec the child tries with EPERM, until it is gone (the listener hangs up).
    import fcntl, select
    waiting = select.poll()
    waiting.register(listener, select.POLLIN)
    while any(event & select.POLLIN for _, event in waiting.poll()):
        notice = bytearray(80)
        try:
            fcntl.ioctl(listener, 0xC0502100, notice, True)
            fcntl.ioctl(listener, 0xC0182101, bytes(notice[:8]) + EPERM)
        except OSError:  # the child died meanwhile
            pass
    os.close(listener)
"""
"""`refuse_execs(listener)`, run by the first process, as a copy of the trainer or in `WAITER`."""
_REFUSE: dict[str, Any] = {"os": os, "EPERM": _EPERM}
exec(REFUSE_EXECS, _REFUSE)
refuse_execs = _REFUSE["refuse_execs"]


def _map_self() -> None:  # pragma: no cover - in the sandbox's child, before exec
    """In a new user namespace: be the trainer's own uid and gid there too."""
    uid, gid = os.geteuid(), os.getegid()
    maps = (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _stop(
    signum: int, frame: object
) -> None:  # pragma: no cover - in the sandbox's child, before exec
    """SIGTERM in the first process: kill the child (which `_wait_and_exit_alike` then
    reaps and mirrors), or end at once if there is none yet. The trainer stops a call
    this way, so the child is always reaped by its own parent, never left to a trainer
    that is process 1 of a container."""
    if _STOP:
        os.kill(_STOP[0], signal.SIGKILL)  # not reaped yet, so this pid is still the child's
    else:
        os._exit(128 + signum)


WAITER = r"""
import _signal, os, sys
os.close(2)  # it started: stderr, kept for the loader's error, is the child's alone
child, cpu_seconds, listener = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
EPERM = bytes(8) + (-1).to_bytes(4, "little", signed=True) + bytes(4)
try:
    handle = os.pidfd_open(child)  # once the child is reaped, its pid may be another's
except OSError:
    handle = None


def stop(signum, frame):  # see _stop
    try:
        if handle is None:
            os.kill(child, _signal.SIGKILL)
        else:
            _signal.pidfd_send_signal(handle, _signal.SIGKILL)
    except OSError:
        pass


_signal.signal(_signal.SIGTERM, stop)
_signal.pthread_sigmask(_signal.SIG_UNBLOCK, [_signal.SIGTERM])  # one sent meanwhile comes now
code = 121
try:
    if listener >= 0:
        refuse_execs(listener)
    _, status, usage = os.wait4(child, 0)
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
    else:
        number = os.WTERMSIG(status)
        if number == _signal.SIGKILL and usage.ru_utime + usage.ru_stime >= 0.5 * cpu_seconds:
            number = _signal.SIGXCPU  # as _wait_and_exit_alike says why
        code = 128 + number
        try:
            _signal.signal(number, _signal.SIG_DFL)
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [number])
        except (OSError, ValueError):  # SIGKILL's action cannot be set, and needs no setting
            pass
        os.kill(os.getpid(), number)
finally:
    os._exit(code)
"""
WAITER = WAITER.replace("code = 121\n", REFUSE_EXECS + "\n\ncode = 121\n", 1)
"""What a lean first process runs (`python -I -S -B -c WAITER CHILD CPU_SECONDS LISTENER`,
LISTENER -1 for none): the same as `_wait_and_exit_alike`, in an interpreter of its own. It
imports built-in modules only, and `fcntl` and `select` where the child has an exec filter."""


def _become_waiter(
    kernel: Kernel, child: int, cpu_seconds: int, set_up: tuple[int, int], execs: int | None
) -> None:  # pragma: no cover - in the sandbox's child, before exec
    """Exec `WAITER` once the child is set up; return only if that cannot be done."""
    ready, _ = set_up
    try:
        # Nothing of the trainer's, nor the child's pipes, but stderr: what the interpreter
        # says if it cannot start (a library not found) reaches the trainer. WAITER closes it.
        _close_all_but(2, ready, execs)
        if execs is not None:
            os.set_inheritable(execs, True)
        while os.read(ready, 1):  # until the child execs or dies; _stop may kill it meanwhile
            pass
        os.close(ready)
        # Never a core: an exec makes it dumpable again, and a limit of 0 does not stop a
        # core_pattern that pipes to a program; 1 stops both.
        resource.setrlimit(resource.RLIMIT_CORE, (1, 1))
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # until WAITER handles it
        listener = str(-1 if execs is None else execs)
        arguments = [kernel.executable, "-I", "-S", "-B", "-c", WAITER, str(child)]
        arguments += [str(cpu_seconds), listener]
        origin = {} if kernel.origin is None else {"LD_ORIGIN_PATH": kernel.origin}
        os.execve(kernel.executable, arguments, origin)
    except OSError:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])


def _close_all_but(*kept: int | None) -> None:  # pragma: no cover - in the sandbox's child
    """Close every descriptor but `kept` (None: none)."""
    low = 0
    for fd in sorted(fd for fd in kept if fd is not None):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 2**31 - 1)


def _wait_and_exit_alike(
    libc: Any, child: int, cpu_seconds: int, execs: int | None
) -> None:  # pragma: no cover - in the sandbox's child, before exec
    """The first process, outside the pid namespace: hold nothing, wait, end as `child` did.

    As process 1 of its namespace the child ignores SIGXCPU, so the CPU limit
    ends it with the hard limit's SIGKILL; that is reported as SIGXCPU here.
    """
    word, code = ctypes.c_ulong, SETUP_FAILED
    try:
        # Its pipes and the trainer's descriptors are the child's alone: close them all (but
        # the exec filter's listener).
        if execs is not None:
            _close_all_but(execs)
        elif libc.syscall(word(436), word(0), word(0xFFFFFFFF), word(0)) != 0:  # close_range
            os.closerange(0, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        libc.prctl(4, word(0), word(0), word(0), word(0))  # PR_SET_DUMPABLE: never a core
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if execs is not None:
            refuse_execs(execs)
        _, status, usage = os.wait4(child, 0)
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
        else:
            number = os.WTERMSIG(status)
            # Nothing else here sends SIGKILL (the trainer's own kill is known to it), and the
            # usage reported falls short of the limit by up to a few percent: half will do.
            spent = usage.ru_utime + usage.ru_stime
            if number == signal.SIGKILL and spent >= 0.5 * cpu_seconds:
                number = signal.SIGXCPU
            code = 128 + number
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
            os.kill(os.getpid(), number)
    finally:
        os._exit(code)


def _exposed(prefix: str) -> bytes | None:
    """The topmost folder above `prefix` that other users cannot enter, if any."""
    for folder in reversed(Path(prefix).parents):
        with contextlib.suppress(OSError):
            if not folder.stat().st_mode & 0o001:
                return os.fsencode(folder)
    return None


@functools.cache
def kernel_layers() -> Kernel | None:
    if sys.platform != "linux":
        return None
    libc, word = ctypes.CDLL(None, use_errno=True), ctypes.c_ulong
    abi = int(libc.syscall(word(444), None, word(0), word(1)))  # Landlock's ABI version, or -1
    landlock = None
    if abi >= 1:  # handle reads, writes, makes, removes (+ refer, truncate, ioctl), TCP, scopes
        handled = 0x1FFF | 0x2000 * (abi >= 2) | 0x4000 * (abi >= 3) | 0x8000 * (abi >= 5)
        size = 8 if abi < 4 else 16 if abi < 6 else 24
        attribute = ctypes.create_string_buffer(struct.pack("=QQQ", handled, 3, 3)[:size], size)
        landlock = (attribute, size, 0x1BE | 0x4000 * (abi >= 3))  # cwd: read, write, make
    seccomp = exec_filter = None
    if platform.machine() == "x86_64":
        seccomp, exec_filter = _fprog(SECCOMP), _fprog(EXEC_FILTER)
    root = os.geteuid() == 0
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    exposed = _exposed(prefix) if root else None
    return Kernel(
        libc,
        root,
        executable,
        os.fsencode(prefix),
        exposed,
        landlock,
        max(abi, 0),
        seccomp,
        exec_filter,
        os.path.dirname(executable),
    )


def _fprog(program: bytes) -> tuple[Any, Any]:
    """A sock_fprog for `program`, and the buffer it points at (to keep alive)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    header = struct.pack("@HP", len(program) // 8, ctypes.addressof(buffer))
    return ctypes.create_string_buffer(header, len(header)), buffer
