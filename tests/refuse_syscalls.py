"""Run a command with some system calls refused, as a kernel or a container might refuse them.

Usage: python refuse_syscalls.py NUMBER[,NUMBER...] COMMAND [ARG...]

Installs a seccomp filter (x86-64 only) under which each listed call fails
with EPERM, then execs COMMAND, which inherits the filter with its children.
For tests that make a sandbox layer unavailable for real: with unshare (272)
refused, no namespace can be made, as in a container that forbids it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys


def refusing(numbers: list[int]) -> bytes:
    """Classic BPF: EPERM for `numbers`, every other x86-64 call allowed."""

    def op(code: int, k: int, if_true: int = 0, if_false: int = 0) -> bytes:
        return struct.pack("=HBBI", code, if_true, if_false, k)

    load, equal, give, allow, eperm = 0x20, 0x15, 0x06, 0x7FFF0000, 0x50001
    program = [op(load, 4), op(equal, 0xC000003E, 1), op(give, 0x80000000), op(load, 0)]
    for number in numbers:
        program += [op(equal, number, 0, 1), op(give, eperm)]
    return b"".join([*program, op(give, allow)])


def main() -> None:
    if platform.machine() != "x86_64":
        sys.exit("refuse_syscalls.py: x86-64 only")
    program = refusing([int(n) for n in sys.argv[1].split(",")])
    buffer = ctypes.create_string_buffer(program, len(program))
    header = ctypes.create_string_buffer(
        struct.pack("@HP", len(program) // 8, ctypes.addressof(buffer))
    )
    libc, word = ctypes.CDLL(None, use_errno=True), ctypes.c_ulong
    if libc.prctl(38, word(1), word(0), word(0), word(0)) or libc.prctl(
        22, word(2), header, word(0), word(0)
    ):
        sys.exit(f"refuse_syscalls.py: seccomp: {os.strerror(ctypes.get_errno())}")
    os.execvp(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()
