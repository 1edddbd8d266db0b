"""The sandbox's seccomp filter as a program: what it answers for each call and its arguments.

`verdict` runs the filter's classic BPF here, as the kernel would, on a call's number and
arguments, so every number can be asked, not only those a payload makes. The kernel's own
answers, in a child, are the payloads of tests/test_sandbox.py.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mathrl.tasks.code import seccomp
from mathrl.tasks.code.seccomp import (
    ALLOW,
    ALLOWED,
    ARCH_X86_64,
    ENOSYS,
    EPERM,
    EXEC_FILTER,
    KILL,
    NOTIFY,
    NUMBERS,
    RULES,
    SECCOMP,
    allowed_numbers,
)


def verdict(
    program: bytes, number: int, args: tuple[int, ...] = (), arch: int = ARCH_X86_64
) -> int:
    """What `program` returns for the call `number` with `args` (64-bit each, 0 if missing):
    struct seccomp_data laid out as the kernel does, on a little-endian machine."""
    data = struct.pack("=iIQ6Q", number, arch, 0, *(list(args) + [0] * 6)[:6])
    pc, accumulator = 0, 0
    while True:
        code, if_true, if_false, k = struct.unpack_from("=HBBI", program, 8 * pc)
        pc += 1
        if code == seccomp.LD_W_ABS:
            (accumulator,) = struct.unpack_from("=I", data, k)
        elif code in (seccomp.JEQ, seccomp.JGE, seccomp.JSET):
            taken = {
                seccomp.JEQ: accumulator == k,
                seccomp.JGE: accumulator >= k,
                seccomp.JSET: accumulator & k != 0,
            }[code]
            pc += if_true if taken else if_false
        elif code == seccomp.RET:
            return int(k)
        else:
            raise AssertionError(f"an instruction the filter should not hold: {code:#x}")


NAMED = {**allowed_numbers(), **NUMBERS}


@given(number=st.integers(0, 2**30 - 1))
def test_a_call_the_table_does_not_name_is_refused_with_eperm(number: int) -> None:
    answer = verdict(SECCOMP, number)
    if number not in NAMED.values():
        assert answer == EPERM
    elif number in (NAMED[name] for name in RULES):
        assert answer in (ALLOW, EPERM, ENOSYS)  # its arguments decide (0s here)
    else:
        assert answer == ALLOW


def test_the_calls_of_the_review_and_one_the_kernel_does_not_know_are_refused() -> None:
    # 600: no kernel knows it yet (6.18 ends at 469), so the kernel itself would say ENOSYS;
    # the filter's EPERM is its own. The others the running kernel knows, and the table omits.
    refused = {
        "a number no kernel knows yet": 600,
        "statmount": 457, "listmount": 458, "file_getattr": 468, "file_setattr": 469,
        "inotify_init1": 294, "inotify_add_watch": 254, "fanotify_init": 300,
        "fanotify_mark": 301, "kill": 62, "socket": 41, "execveat": 322, "fork": 57,
        "chmod": 90, "memfd_create": 319, "io_uring_setup": 425, "unshare": 272,
    }  # fmt: skip
    assert {name: verdict(SECCOMP, n) for name, n in refused.items()} == dict.fromkeys(
        refused, EPERM
    )
    assert verdict(SECCOMP, 0) == ALLOW  # read


# mmap(addr, length, prot, flags, fd, offset): PROT_READ 1, PROT_WRITE 2, PROT_EXEC 4;
# MAP_SHARED 1, MAP_PRIVATE 2, MAP_ANONYMOUS 0x20, MAP_SHARED_VALIDATE 3.
MMAP, MPROTECT, PKEY_MPROTECT, MREMAP = 9, 10, 329, 25


@pytest.mark.parametrize(
    ("call", "what", "answer"),
    [
        ((MMAP, (0, 4096, 1 | 4, 2 | 0x20)), "a library's code: read, exec, private", ALLOW),
        ((MMAP, (0, 4096, 1 | 2, 1 | 0x20)), "shared memory, read and write", ALLOW),
        ((MMAP, (0, 4096, 1 | 4, 1 | 0x20)), "the review's: exec and shared", EPERM),
        ((MMAP, (0, 4096, 1 | 4, 3)), "exec and MAP_SHARED_VALIDATE", EPERM),
        ((MMAP, (0, 4096, 1 | 2 | 4, 2 | 0x20)), "exec and write", EPERM),
        ((MPROTECT, (0, 4096, 1 | 2)), "read and write", ALLOW),
        ((MPROTECT, (0, 4096, 1 | 4)), "made executable", EPERM),
        ((PKEY_MPROTECT, (0, 4096, 4, 0)), "made executable, with a key", EPERM),
        ((MREMAP, (0, 4096, 8192, 1)), "grown, may move", ALLOW),
        ((MREMAP, (0, 0, 4096, 1)), "the review's: old size 0, a second view", EPERM),
        ((MREMAP, (0, 2**32, 2**33, 1)), "old size 4 GiB (its low half 0)", ALLOW),
        ((MREMAP, (0, 4096, 4096, 1 | 4)), "MREMAP_DONTUNMAP: the old view stays", EPERM),
        ((56, (0x10000 | 0x100 | 0x800,)), "clone: a thread", ALLOW),
        ((56, (17,)), "clone: a fork (SIGCHLD)", EPERM),
        ((435, ()), "clone3: glibc falls back to clone", ENOSYS),
        ((72, (3, 1)), "fcntl F_GETFD", ALLOW),
        ((72, (3, 8, 1)), "fcntl F_SETOWN", EPERM),
        ((72, (3, 1026, 1)), "fcntl F_NOTIFY", EPERM),
        ((16, (3, 0x5401)), "ioctl TCGETS", ALLOW),
        ((16, (3, 0x8901)), "ioctl FIOSETOWN", EPERM),
        ((16, (3, 0x40086602)), "ioctl FS_IOC_SETFLAGS", EPERM),
    ],
)
def test_the_argument_rules(call: tuple[int, tuple[int, ...]], what: str, answer: int) -> None:
    number, values = call
    assert verdict(SECCOMP, number, values) == answer, what


def test_another_abi_or_x32_kills_the_child() -> None:
    assert verdict(SECCOMP, 0, arch=0x40000003) == KILL  # i386's int 0x80
    assert verdict(SECCOMP, 0x40000000) == KILL  # x32's read
    assert verdict(EXEC_FILTER, 0, arch=0x40000003) == KILL


def test_the_exec_filter_asks_the_first_process_about_execve_only() -> None:
    assert verdict(EXEC_FILTER, 59) == NOTIFY
    assert [verdict(EXEC_FILTER, n) for n in (0, 322, 600)] == [ALLOW] * 3


def test_the_table_names_each_call_once_with_a_reason() -> None:
    names = [name for group in ALLOWED for name in group.calls]
    assert len(names) == len(set(names)) == len(allowed_numbers())
    assert all(group.why for group in ALLOWED)
    assert set(RULES) <= set(names) | set(NUMBERS)


HEADERS = ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h")


def test_the_tables_numbers_are_the_kernels() -> None:
    # The kernel's own header (linux-libc-dev, which gcc brings): a number mistyped would
    # let another call through, or keep this one out.
    header = next((Path(h) for h in HEADERS if Path(h).exists()), None)
    if header is None:
        pytest.skip("no kernel header for x86-64's call numbers here (linux-libc-dev)")
    known = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+) (\d+)", header.read_text())}
    assert {name: known.get(name) for name in NAMED} == NAMED
