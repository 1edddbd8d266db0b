"""The sandbox child's seccomp filters (x86-64): an allow-list of system calls, and the exec filter.

For: `mathrl.tasks.code.kernel`, which installs `SECCOMP` and `EXEC_FILTER` in the child
between fork and exec. Not for: deciding which files the child may touch (Landlock does that)
or what Python code may do (the audit hook: `mathrl.tasks.code.harness`).

`SECCOMP` lets through the calls of `ALLOWED` and refuses every other with EPERM: one the
kernel gained after this table was written is refused without a change here. `ALLOWED` was
measured: the calls the children of Python 3.11 (pyenv's and Debian's), 3.12 and 3.13 made,
with and without the audit hook, fresh and started ahead, running the harness and a corpus of
honest code (`tests/bench/sandbox_syscalls.py`, which prints what it made, and what the table
lacks or has beyond it). A few calls are in it that nothing measured made: the same call by
another number (what another libc or build makes of `stat` or `dup2`), each named in its group.

EPERM, not ENOSYS, for a call not in the table: it is the refusal a program reads as "not
allowed" and the one the rest of the sandbox gives (so a refusal reads alike, whichever layer
made it), and it is not what the kernel itself answers for a number it does not know (ENOSYS),
so a refusal is visibly the filter's. The cost: a library that would fall back from a newer call
to an older one only on ENOSYS does not fall back, so the newer call is in the table where one
was measured, and clone3 is answered ENOSYS (`RULES`): glibc's threads and posix_spawn then use
clone, whose flags the filter can read (clone3's are in memory it cannot).

The calls whose arguments decide (`RULES`): clone only for a thread; fcntl and ioctl only with
the commands of `FCNTL` and `IOCTL` (no command that has the kernel signal another process,
F_SETOWN and FIOSETOWN, or watch a folder, F_NOTIFY, or set a file's flags, FS_IOC_SETFLAGS);
and no memory that could hold code written at run time (systemd's MemoryDenyWriteExecute,
and more): no mapping that is executable and writable or shared, no mprotect (or
pkey_mprotect) that makes memory executable, and no mremap with old size 0 or
MREMAP_DONTUNMAP, either of which leaves a second view of the same pages. The interpreter maps
its own libraries executable, private and never writable, and has no JIT.

Built here, not with libseccomp (pyseccomp on PyPI, Debian's python3-seccomp), whose rule
objects read more clearly than jumps: pyseccomp's last release is of 2021, python3-seccomp is
for Debian's own Python only, and both need libseccomp.so on the machine, so the code task
would still need this for `pip install .` on a machine without it: two builders of one filter.
The table above is what would be the same either way; `tests/test_sandbox_seccomp.py` runs the
program this builds on any call number and arguments, and checks the numbers against the
kernel's header.

Left out, among others: processes (fork, vfork, execveat), signals to any process (kill,
tgkill, pidfd_*), sockets, mounts and namespaces (the new mount API, listmount, statmount),
ptrace and process_vm_*, io_uring, bpf, perf_event_open, userfaultfd, keys, memfd_create,
personality, chdir and chroot, every change of a file's metadata (chmod, chown, utimes,
xattrs, file_setattr: Landlock has no say over them), watches (inotify, fanotify), System V
and POSIX IPC, seccomp and prctl.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ARCH_X86_64 = 0xC000003E
"""AUDIT_ARCH_X86_64: a call made through another ABI (i386's int 0x80) kills the child."""
X32 = 0x40000000
"""__X32_SYSCALL_BIT: x32 calls, numbered from here, kill it too."""
KILL, ALLOW, NOTIFY = 0x80000000, 0x7FFF0000, 0x7FC00000
"""SECCOMP_RET_KILL_PROCESS, _ALLOW, _USER_NOTIF."""
EPERM, ENOSYS = 0x50000 | 1, 0x50000 | 38
"""SECCOMP_RET_ERRNO with EPERM, and with ENOSYS."""
LD_W_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
"""Classic BPF: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K,
BPF_JMP|BPF_JSET|BPF_K, BPF_RET|BPF_K."""
NR, ARCH = 0, 4
"""Offsets in struct seccomp_data of the call's number and its ABI."""


def arg(index: int, high: bool = False) -> int:
    """The offset of argument `index`'s low (or high) 32 bits in struct seccomp_data."""
    return 16 + 8 * index + 4 * high


@dataclass(frozen=True, slots=True)
class Allowed:
    """A group of system calls the child may make (name: x86-64 number), and why."""

    why: str
    calls: dict[str, int]


ALLOWED = (
    Allowed(
        "the loader and libc start the interpreter (execve: `EXEC_FILTER` decides which)",
        {"execve": 59, "arch_prctl": 158, "set_tid_address": 218, "set_robust_list": 273,
         "rseq": 334, "access": 21, "readlink": 89, "sysinfo": 99, "exit_group": 231},
    ),
    Allowed(
        "memory: its heap, the maps of its libraries and files, growing and freeing them "
        "(mmap, mprotect and mremap under `RULES`)",
        {"brk": 12, "mmap": 9, "munmap": 11, "mremap": 25, "mprotect": 10},
    ),
    Allowed(
        "files: open, read, write, list, make and remove them (Landlock decides where; "
        "fcntl and ioctl under `RULES`); stat, fstat, lstat, statx, faccessat(2), "
        "readlinkat, pwrite64, readv, writev, mkdirat, renameat(2), dup, dup3 and pipe are "
        "what other libcs and versions make of the calls measured",
        {"open": 2, "openat": 257, "close": 3, "close_range": 436, "read": 0, "write": 1,
         "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "lseek": 8,
         "newfstatat": 262, "stat": 4, "fstat": 5, "lstat": 6, "statx": 332,
         "faccessat": 269, "faccessat2": 439, "readlinkat": 267, "getdents64": 217,
         "getcwd": 79, "mkdir": 83, "mkdirat": 258, "rmdir": 84, "unlink": 87,
         "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316, "ftruncate": 77,
         "sendfile": 40, "fcntl": 72, "ioctl": 16, "dup": 32, "dup2": 33, "dup3": 292,
         "pipe": 22, "pipe2": 293},
    ),
    Allowed(
        "its own signal handling, and time: clocks, sleeps (restart_syscall resumes one a "
        "stop interrupted; rt_sigreturn returns from a handler)",
        {"rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "clock_gettime": 228,
         "clock_nanosleep": 230, "nanosleep": 35, "restart_syscall": 219},
    ),
    Allowed(
        "reads of its own process: ids (its user namespace's), the kernel's name (with its "
        "uts namespace's host name), limits (prlimit64 lowers them too: raising one needs a "
        "capability it has not), usage, randomness",
        {"getpid": 39, "getppid": 110, "gettid": 186, "getuid": 102, "geteuid": 107,
         "getgid": 104, "getegid": 108, "getgroups": 115, "getresuid": 118, "getresgid": 120,
         "getpgrp": 111, "uname": 63, "prlimit64": 302, "getrusage": 98, "times": 100,
         "getrandom": 318},
    ),
    Allowed(
        "threads, where the limits allow any (clone under `RULES`; madvise gives a thread's "
        "arena back); futex also serves locks in one thread",
        {"clone": 56, "futex": 202, "exit": 60, "sched_yield": 24, "madvise": 28},
    ),
)  # fmt: skip
"""Every system call the sandbox's child may make. The rest are refused with EPERM."""

FCNTL = {
    "F_DUPFD": 0, "F_GETFD": 1, "F_SETFD": 2, "F_GETFL": 3, "F_SETFL": 4, "F_GETLK": 5,
    "F_SETLK": 6, "F_SETLKW": 7, "F_OFD_GETLK": 36, "F_OFD_SETLK": 37, "F_OFD_SETLKW": 38,
    "F_DUPFD_CLOEXEC": 1030,
}  # fmt: skip
"""The fcntl commands allowed: descriptors, their flags, and locks on its own files."""
IOCTL = {"TCGETS": 0x5401, "TIOCGWINSZ": 0x5413, "FIONREAD": 0x541B, "FIONBIO": 0x5421,
         "FIONCLEX": 0x5450, "FIOCLEX": 0x5451}  # fmt: skip
"""The ioctl requests allowed: is it a terminal (Python asks of each file it opens), its size,
the bytes waiting, blocking, close-on-exec."""

PROT_WRITE, PROT_EXEC, MAP_SHARED, MREMAP_DONTUNMAP, CLONE_THREAD = 0x2, 0x4, 0x1, 0x4, 0x10000


def op(code: int, k: int, if_true: int = 0, if_false: int = 0) -> bytes:
    """One classic BPF instruction (struct sock_filter)."""
    return struct.pack("=HBBI", code, if_true, if_false, k)


def _one_of(offset: int, values: dict[str, int]) -> list[bytes]:
    """Allow if the 32 bits at `offset` are one of `values`, else EPERM."""
    n = len(values)
    return [
        op(LD_W_ABS, offset),
        *(op(JEQ, value, n - i, 0) for i, value in enumerate(values.values())),
        op(RET, EPERM),
        op(RET, ALLOW),
    ]


RULES: dict[str, list[bytes]] = {
    "clone3": [op(RET, ENOSYS)],
    "clone": [op(LD_W_ABS, arg(0)), op(JSET, CLONE_THREAD, 0, 1), op(RET, ALLOW), op(RET, EPERM)],
    "fcntl": _one_of(arg(1), FCNTL),
    "ioctl": _one_of(arg(1), IOCTL),
    "mmap": [  # executable, and writable or shared: EPERM
        op(LD_W_ABS, arg(2)), op(JSET, PROT_EXEC, 0, 3), op(JSET, PROT_WRITE, 3, 0),
        op(LD_W_ABS, arg(3)), op(JSET, MAP_SHARED, 1, 0), op(RET, ALLOW), op(RET, EPERM),
    ],
    "mprotect": [op(LD_W_ABS, arg(2)), op(JSET, PROT_EXEC, 1, 0), op(RET, ALLOW), op(RET, EPERM)],
    "pkey_mprotect": [
        op(LD_W_ABS, arg(2)), op(JSET, PROT_EXEC, 1, 0), op(RET, ALLOW), op(RET, EPERM)
    ],
    "mremap": [  # old size 0 (both halves), or MREMAP_DONTUNMAP: EPERM
        op(LD_W_ABS, arg(1)), op(JEQ, 0, 0, 2), op(LD_W_ABS, arg(1, high=True)),
        op(JEQ, 0, 3, 0), op(LD_W_ABS, arg(3)), op(JSET, MREMAP_DONTUNMAP, 1, 0),
        op(RET, ALLOW), op(RET, EPERM),
    ],
}  # fmt: skip
"""The calls whose arguments decide, each a program that returns its verdict. Those not in
`ALLOWED` (clone3, pkey_mprotect) are answered by their rule all the same."""
NUMBERS = {"clone3": 435, "pkey_mprotect": 329}
"""The numbers of the calls `RULES` answers that `ALLOWED` does not name."""


def allowed_numbers() -> dict[str, int]:
    """Every call `ALLOWED` names, by name."""
    return {name: number for group in ALLOWED for name, number in group.calls.items()}


def program() -> bytes:
    """`SECCOMP`: the ABI checked, then each call of `RULES`, then each of `ALLOWED`, then
    EPERM. The kernel caches, per call number, a verdict that reads no argument (Linux
    5.11), so a call of `ALLOWED` without a rule costs nothing after the first."""
    numbers = {**allowed_numbers(), **NUMBERS}
    instructions = [
        op(LD_W_ABS, ARCH), op(JEQ, ARCH_X86_64, 1, 0), op(RET, KILL),
        op(LD_W_ABS, NR), op(JGE, X32, 0, 1), op(RET, KILL),
    ]  # fmt: skip
    for name, rule in RULES.items():
        instructions += [op(JEQ, numbers[name], 0, len(rule)), *rule]
    for name, number in numbers.items():
        if name not in RULES:
            instructions += [op(JEQ, number, 0, 1), op(RET, ALLOW)]
    instructions.append(op(RET, EPERM))
    return b"".join(instructions)


SECCOMP = program()

EXEC_FILTER = b"".join(
    [
        op(LD_W_ABS, ARCH), op(JEQ, ARCH_X86_64, 1, 0), op(RET, KILL),
        op(LD_W_ABS, NR), op(JEQ, 59, 0, 1), op(RET, NOTIFY), op(RET, ALLOW),
    ]
)  # fmt: skip
"""The second filter: execve (59) waits for the first process's answer: the first one, the
interpreter's, goes through (`kernel._let_one_exec_through`), every later one fails with EPERM
(`kernel.refuse_execs`). Should the first process be gone, the kernel fails it with ENOSYS.
execveat is not in `ALLOWED`."""
