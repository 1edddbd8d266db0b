"""The sandbox's kernel layers: namespaces, a tmpfs, Landlock, seccomp, no capabilities.

For: `mathrl.tasks.code.sandbox`, which builds a `Kernel` in the trainer (`kernel_layers`,
cached) and enters it in the child between fork and exec (`Kernel.enter`, its
preexec function), where nothing may allocate much or import anything. Each
step that the kernel or a non-root trainer refuses is skipped, and the other
layers still hold. Linux only; seccomp on x86-64 only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import signal
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Kernel:
    """The kernel layers, ready to enter. A step that fails is skipped; the others still hold."""

    libc: Any
    landlock: tuple[Any, int, int] | None  # ruleset attribute, its size, rights in cwd
    seccomp: tuple[Any, Any] | None  # sock_fprog, and the program it points at (kept alive)

    def enter(self, folder: bytes, tmpfs: bytes) -> None:
        libc, word = self.libc, ctypes.c_ulong
        libc.prctl(1, word(signal.SIGKILL), word(0), word(0), word(0))  # die with the trainer
        libc.unshare(0x40000000)  # CLONE_NEWNET
        if (
            libc.unshare(0x20000) == 0  # CLONE_NEWNS, MS_REC | MS_PRIVATE, then tmpfs on cwd
            and libc.mount(b"none", b"/", None, word(0x44000), None) == 0
            and libc.mount(b"tmpfs", folder, b"tmpfs", word(6), tmpfs) == 0  # nosuid, nodev
        ):
            with contextlib.suppress(OSError):
                os.chdir(folder)
        libc.prctl(38, word(1), word(0), word(0), word(0))  # PR_SET_NO_NEW_PRIVS
        if self.landlock is not None:
            attribute, size, rights = self.landlock
            ruleset = libc.syscall(word(444), attribute, word(size), word(0))
            if ruleset >= 0:
                rule = struct.pack("=Qi", rights, os.open(".", os.O_PATH | os.O_CLOEXEC))
                libc.syscall(word(445), word(ruleset), word(1), rule, word(0))  # path beneath
                libc.syscall(word(446), word(ruleset), word(0))  # restrict self
        for capability in (*range(8), *range(9, 64), 8):  # CAP_SETPCAP (8), needed to drop, last
            libc.prctl(24, word(capability), word(0), word(0), word(0))  # PR_CAPBSET_DROP
        if self.seccomp is not None:
            libc.prctl(22, word(2), self.seccomp[0], word(0), word(0))  # PR_SET_SECCOMP


@functools.cache
def kernel_layers() -> Kernel | None:
    if sys.platform != "linux":
        return None
    libc, word = ctypes.CDLL(None, use_errno=True), ctypes.c_ulong
    abi = int(libc.syscall(word(444), None, word(0), word(1)))  # Landlock's ABI version, or -1
    landlock = None
    if abi >= 1:  # handle writes, makes, removes (+ refer, truncate, device ioctl), TCP, scopes
        handled = 0x1FF2 | 0x2000 * (abi >= 2) | 0x4000 * (abi >= 3) | 0x8000 * (abi >= 5)
        size = 8 if abi < 4 else 16 if abi < 6 else 24
        attribute = ctypes.create_string_buffer(struct.pack("=QQQ", handled, 3, 3)[:size], size)
        landlock = (attribute, size, 0x1B2 | 0x4000 * (abi >= 3))  # cwd: files and folders
    seccomp = None
    if platform.machine() == "x86_64":
        program = ctypes.create_string_buffer(SECCOMP, len(SECCOMP))
        header = struct.pack("@HP", len(SECCOMP) // 8, ctypes.addressof(program))
        seccomp = (ctypes.create_string_buffer(header, len(header)), program)
    return Kernel(libc, landlock, seccomp)


def seccomp_program(denied: Sequence[int]) -> bytes:
    """Classic BPF for x86-64: EPERM for `denied`, for clones other than threads, and for
    the fcntl and ioctl commands that make the kernel signal another process (F_SETOWN,
    F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY; FIOSETOWN, SIOCSPGRP)."""

    def op(code: int, k: int, if_true: int = 0, if_false: int = 0) -> bytes:
        return struct.pack("=HBBI", code, if_true, if_false, k)

    load, equal, at_least, any_bit, give = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x50001
    program = [
        *(op(load, 4), op(equal, 0xC000003E, 1), op(give, kill)),  # x86-64 calls only
        *(op(load, 0), op(at_least, 0x40000000, 0, 1), op(give, kill)),  # and no x32 ones
        *(op(equal, 435, 0, 1), op(give, 0x50026)),  # clone3: ENOSYS, so glibc uses clone
        *(op(equal, 56, 0, 4), op(load, 16), op(any_bit, 0x10000, 0, 1)),  # CLONE_THREAD?
        *(op(give, allow), op(give, eperm)),
        *(op(equal, 72, 0, 8), op(load, 24)),  # fcntl: its command (the low 32 bits)
        *(op(equal, 8, 5), op(equal, 10, 4), op(equal, 15, 3), op(equal, 1024, 2)),
        *(op(equal, 1026, 1), op(give, allow), op(give, eperm)),
        *(op(equal, 16, 0, 5), op(load, 24)),  # ioctl: its request
        *(op(equal, 0x8901, 2), op(equal, 0x8902, 1), op(give, allow), op(give, eperm)),
    ]
    for number in denied:
        program += [op(equal, number, 0, 1), op(give, eperm)]
    return b"".join([*program, op(give, allow)])


SECCOMP = seccomp_program(
    # fork vfork execveat kill tkill tgkill rt_(tg)sigqueueinfo pidfd_send_signal/open/getfd
    # ptrace process_vm_readv/writev socket socketpair io_uring_setup mknod(at) chmod fchmod
    # fchmodat(2) chown fchown lchown fchownat utime utimes futimesat utimensat (l/f)setxattr
    # (l/f)removexattr setxattrat removexattrat mount umount2 unshare setns chroot setpriority
    # bpf userfaultfd perf_event_open add_key request_key keyctl
    (57, 58, 322, 62, 200, 234, 129, 297, 424, 434, 438, 101, 310, 311, 41, 53, 425, 133, 259,
     90, 91, 268, 452, 92, 93, 94, 260, 132, 235, 261, 280, 188, 189, 190, 197, 198, 199, 463,
     466, 165, 166, 272, 308, 161, 141, 321, 323, 298, 248, 249, 250)
)  # fmt: skip
