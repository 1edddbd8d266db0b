"""The system calls a sandbox's child makes once its seccomp filter is installed, measured.

For: `mathrl.tasks.code.kernel.ALLOWED`, the seccomp allow-list, which is measured with this.
Each interpreter named (the one running this, by default) runs `HONEST`, a corpus of honest
completions that use what a model's code may (the standard library's pure and native modules,
files in its folder, memory, time, randomness, exceptions), in a fresh sandbox and in one
started ahead, under `strace -f`. Each call the child made after `prctl(PR_SET_SECCOMP)` is
counted, with how it ended (a refusal included: the filter in force refused it). The report
lists, for each call, the interpreters that made it, and then what `ALLOWED` lacks of what was
made and what it allows that nothing here made (each has its reason in the table).

Usage: python tests/bench/sandbox_syscalls.py [PYTHON ...] (needs strace; run as root, or as
the user a trainer runs as). Each PYTHON must be a CPython 3.11 or newer outside /tmp.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

HONEST = {
    "arithmetic": "def f(x):\n    return [x * 2 + 1, 10 ** 40 // 7, x ** 0.5]\n",
    "modules": (
        "import bisect, collections, copy, dataclasses, datetime, decimal, enum, fractions\n"
        "import functools, hashlib, heapq, itertools, json, math, operator, random, re\n"
        "import statistics, string, struct, textwrap, typing, unicodedata, zlib, base64, array\n"
        "def f(x):\n"
        "    r = random.Random(x)\n"
        "    return [str(decimal.Decimal(x) / 7), hashlib.sha256(b'a').hexdigest()[:4],\n"
        "            str(fractions.Fraction(x, 3)), statistics.mean([1, 2, x]),\n"
        "            unicodedata.name('a'), len(zlib.compress(b'a' * 100)), r.random() < 1,\n"
        "            datetime.datetime(2020, 1, 1).isoformat(), json.dumps({'a': [x]}),\n"
        "            re.sub('a+', 'b', 'caaat'), random.SystemRandom().random() < 1]\n"
    ),
    "files": (
        "import os, tempfile, shutil, pathlib\n"
        "def f(x):\n"
        "    os.mkdir('d')\n"
        "    pathlib.Path('d/a.txt').write_text('hello')\n"
        "    with open('d/a.txt', 'a+') as file:\n"
        "        file.write('!')\n"
        "        file.seek(0)\n"
        "        text = file.read()\n"
        "    shutil.copyfile('d/a.txt', 'd/b.txt')  # not copy: the mode is not its to set\n"
        "    os.rename('d/b.txt', 'd/c.txt')\n"
        "    with tempfile.TemporaryDirectory() as scratch:\n"
        "        open(os.path.join(scratch, 'x'), 'wb').write(b'x' * 5000)\n"
        "    with tempfile.NamedTemporaryFile() as scratch:\n"
        "        scratch.write(b'y')\n"
        "    names = sorted(os.listdir('d')) + [e.name for e in os.scandir('.')]\n"
        "    names += [str(p) for p in pathlib.Path('.').glob('*/*')]\n"
        "    names += [top for top, _, _ in os.walk('.')]\n"
        "    with open('d/c.txt', 'r+b') as file:\n"
        "        file.truncate(2)\n"
        "    stat = os.stat('d/c.txt')\n"
        "    os.remove('d/a.txt')\n"
        "    shutil.rmtree('d')\n"
        "    return [text, names, stat.st_size, os.getcwd(), os.path.exists('/usr')]\n"
    ),
    "memory": (
        "import mmap, gc\n"
        "def f(x):\n"
        "    page = mmap.mmap(-1, 1 << 20)\n"
        "    page[:3] = b'abc'\n"
        "    big = bytearray(50 * 2**20)\n"
        "    big.extend(b'x' * 2**20)\n"
        "    lists = [[i] * 100 for i in range(10**5)]\n"
        "    del big, lists\n"
        "    gc.collect()\n"
        "    try:\n"
        "        bytearray(10 * 2**30)\n"
        "    except MemoryError:\n"
        "        pass\n"
        "    return page[:3].decode()\n"
    ),
    "time and identity": (
        "import os, time, resource, sys\n"
        "def f(x):\n"
        "    started = time.perf_counter()\n"
        "    time.sleep(0.01)\n"
        "    return [time.time() > 0, time.perf_counter() > started, time.process_time() >= 0,\n"
        "            time.thread_time() >= 0, os.getpid(), os.getuid() >= 0, os.times()[0] >= 0,\n"
        "            os.geteuid() >= 0, os.getgid() >= 0, os.getegid() >= 0, os.getgroups(),\n"
        "            os.getppid() >= 0, os.getresuid()[0] >= 0, os.getresgid()[0] >= 0,\n"
        "            os.getpgrp() >= 0, os.uname().sysname, sys.platform,\n"
        "            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0,\n"
        "            resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.cpu_count() is None,\n"
        "            sys.getrecursionlimit(), os.urandom(4) != b'', os.getloadavg is not None]\n"
    ),
    "errors": (
        "import traceback, sys, warnings\n"
        "def g(n):\n"
        "    return g(n + 1)\n"
        "def f(x):\n"
        "    try:\n"
        "        g(0)\n"
        "    except RecursionError:\n"
        "        text = traceback.format_exc()\n"
        "    warnings.warn('careful')\n"
        "    print('noise', file=sys.stderr)\n"
        "    return [len(text) > 0, 1 / x]\n"
    ),
    "refused": (
        "import os, socket\n"
        "def run():\n"
        "    import subprocess\n"
        "    subprocess.run(['true'])\n"
        "def f(x):\n"
        "    for attempt in (os.fork, lambda: socket.socket(), lambda: os.kill(1, 0), run):\n"
        "        try:\n"
        "            attempt()\n"
        "        except Exception:\n"
        "            pass\n"
        "    return x\n"
    ),
}
"""Honest completions, each a function `f(x)`, and one whose attempts are refused (the
calls it tries show as refused: they are not to be allowed)."""

MEASURE = r"""
import asyncio, functools, json, os, sys
from dataclasses import replace
from mathrl.tasks.code import kernel, sandbox
from mathrl.workers import Workers

corpus, pythons = json.loads(sys.argv[1]), json.loads(sys.argv[2])
found = kernel.kernel_layers()
for python, prefix in pythons:
    sandbox.kernel_layers = functools.partial(replace, found, executable=python,
        prefix=os.fsencode(prefix), exposed=kernel._exposed(prefix) if found.root else None)
    print("measure", python, file=sys.stderr, flush=True)
    os.write(2, b"")
    for layers in ({"hook", "kernel"}, {"kernel"}):
        sandbox._LAYERS = frozenset(layers)
        for name, source in corpus.items():
            outcome = sandbox.call_function(source, "f", [[3]])
            assert outcome.status == "ok" and not outcome.detail, (python, name, outcome)
    sandbox._LAYERS = frozenset({"hook", "kernel"})

    async def ahead(pool):
        await pool.run(lambda: sandbox.call_function("def f(x):\n    return x\n", "f", [[1]]))
        warm = sandbox.warm_of(pool)
        for name, source in corpus.items():
            while warm.ready < 1:
                await asyncio.sleep(0.01)
            outcome = await pool.run(lambda: sandbox.call_function(source, "f", [[3]]))
            assert outcome.status == "ok" and not outcome.detail, (python, name, outcome)

    with Workers(1) as pool:
        asyncio.run(ahead(pool))
"""

LINE = re.compile(
    r"^(\d+) +(?:<\.\.\. )?([a-z_0-9]+)(?:\(| resumed>)(.*?)(?:= (-?\w+)(?: (E\w+))?.*)?$"
)


def base_prefix(python: str) -> str:
    return subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def measure(pythons: Sequence[str]) -> dict[str, dict[str, collections.Counter[str]]]:
    """For each interpreter: each call its children made under the filter, and how each
    ended ("ok" or the errno's name), counted."""
    import json

    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("sandbox_syscalls.py: needs strace")
    seen: dict[str, dict[str, collections.Counter[str]]] = {}
    for python in pythons:
        real = os.path.realpath(python)
        with tempfile.NamedTemporaryFile(prefix="mathrl-strace-", suffix=".txt") as out:
            subprocess.run(
                [strace, "-f", "-qq", "-s", "0", "-o", out.name, sys.executable, "-c", MEASURE,
                 json.dumps(HONEST), json.dumps([[real, base_prefix(real)]])],
                check=True,
            )  # fmt: skip
            seen[python] = calls_after_filter(out.read().decode(errors="replace"))
    return seen


def calls_after_filter(trace: str) -> dict[str, collections.Counter[str]]:
    """The calls each process made after its `prctl(PR_SET_SECCOMP, ...) = 0`, by name."""
    filtered: set[str] = set()
    calls: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in trace.splitlines():
        if line.endswith("<unfinished ...>"):
            continue
        match = LINE.match(line)
        if match is None:
            continue
        pid, name, _, result, errno = match.groups()
        if pid in filtered:
            calls[name][errno or "ok"] += 1
        elif name == "prctl" and "PR_SET_SECCOMP" in line and result == "0":
            filtered.add(pid)
    return dict(calls)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("pythons", nargs="*", default=[sys.executable], metavar="PYTHON")
    args = parser.parse_args(argv)
    from mathrl.tasks.code.seccomp import ALLOWED

    seen = measure(args.pythons)
    names = sorted(set().union(*seen.values()))
    for i, python in enumerate(args.pythons, 1):
        print(f"{i}: {python}")
    for name in names:  # how each call ended, on each interpreter: ok, an errno, or not made
        ended = ["/".join(sorted(seen[python].get(name, {})) or ["-"]) for python in args.pythons]
        print(f"{name:20s} " + "  ".join(f"{i}:{how}" for i, how in enumerate(ended, 1)))
    allowed = {name for group in ALLOWED for name in group.calls}
    made = {n for n in names if any(how == "ok" for s in seen.values() for how in s.get(n, {}))}
    print("made, and not allowed:", ", ".join(sorted(made - allowed)) or "none")
    print("allowed, and not made here:", ", ".join(sorted(allowed - set(names))) or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
