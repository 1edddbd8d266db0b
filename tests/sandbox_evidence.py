"""What a sandbox layer's refusal looks like from the trainer: the evidence a test asserts; and
the interpreters the sandbox's tests run the child on.

For: tests/test_sandbox.py and tests/test_sandbox_layers.py, whose payloads each name the layer
that must stop them. A payload's `f` lets the refusal propagate, so `Outcome.detail` reads
`input 0: ` and one of these; an outcome without it (a child that crashed or exited before it
called `f`, say) is no evidence that any layer stopped anything. WORLD stands for the path of
the folder the payload must not touch.
"""

from __future__ import annotations

import base64
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REQUIRE_EXTRAS


def refused(event: str) -> str:
    """The audit hook's refusal of `event`."""
    return f"PermissionError: sandbox: {event} is not allowed"


def refused_outside(event: str) -> str:
    """The audit hook's refusal of `event` on a path outside the child's folder."""
    return f"PermissionError: sandbox: {event} outside its folder is not allowed"


def removed(module: str, name: str) -> str:
    """Using a function that the hook's set-up removed from `module`."""
    return f"AttributeError: module {module!r} has no attribute {name!r}"


SECCOMP = "PermissionError: [Errno 1] Operation not permitted"
"""seccomp's EPERM. Each payload it is the evidence for makes a call that would otherwise
succeed, or fail with another error (ESRCH, EINVAL, or EAGAIN from the process limit)."""


def denied(*paths: str) -> str:
    """EACCES on `paths` (two for a rename or a link). Landlock's, where the file's mode lets
    the child's uid in (the tests' world is open to every user); else the mode's, which the
    kernel checks first: the identity layer's, that the child is not the file's owner."""
    return "PermissionError: [Errno 13] Permission denied: " + " -> ".join(map(repr, paths))


EXEC = SECCOMP
"""seccomp's exec filter: an execve after the interpreter's own, refused by the first process
with EPERM (the first filter lets execve through: it is the second's)."""

UNMAPPABLE = "ImportError: /tmp/evil.so: failed to map segment from shared object"
"""The tmpfs's noexec: a library the child wrote into its folder cannot be mapped as code."""


# --- the review's payloads (bodies of `f`, after "import os\ndef f():\n    ") ----------------

NUL_NAME = "\n    ".join(
    [  # the review's exact payload, then native code's way out: an exec
        "import _imp, sys, os",
        "class S: pass",
        'd = [p for p in sys.path if p.endswith("lib-dynload")][0]',
        's = S(); s.name = "_ctypes\\x00"; s.origin = d + "/" + [n for n in os.listdir(d) '
        'if n.startswith("_ctypes.")][0]',
        "m = _imp.create_dynamic(s)",
        "import ctypes",
        "libc = ctypes.CDLL(None, use_errno=True)",
        "if libc.execv(b'/usr/bin/id', (ctypes.c_char_p * 2)(b'id', None)) < 0:",
        "    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))",
        "return 'escaped'",
    ]
)
"""A banned module loaded by a name with a NUL, which the C loader reads only up to."""

NATIVE_LIBRARY = "\n    ".join(
    [  # LIBRARY stands for `native_library()`, in base64
        "import _imp, base64",
        "with open('evil.so', 'wb') as file:",
        "    file.write(base64.b64decode(LIBRARY))",
        "class S: pass",
        "s = S(); s.name = 'evil'; s.origin = os.path.abspath('evil.so')",
        "try:",
        "    _imp.create_dynamic(s)",
        "except SystemError:  # its PyInit_evil ran: it loaded",
        "    return 'escaped'",
        "return 'not loaded'",
    ]
)
"""A library the code wrote into its own folder, loaded under a harmless name."""

LYING_NAME = "\n    ".join(
    [  # the second review's: a str subclass that answers as one of the interpreter's modules
        "import _imp, base64, builtins, sys",
        "with open('evil.so', 'wb') as file:",
        "    file.write(base64.b64decode(LIBRARY))",
        "d = [p for p in sys.path if p.endswith('lib-dynload')][0]",
        "mine = sorted(n for n in os.listdir(d) if n.startswith(('math.', 'array.', 'audioop.')))",
        "own = (mine[0].partition('.')[0], d + '/' + mine[0])  # one of the interpreter's own",
        "class Liar(str):",
        "    def __hash__(self):",
        "        return hash(self.pose)",
        "    def __eq__(self, other):",
        "        return other == self.pose",
        "def lying(text, pose):",
        "    liar = Liar(text)",
        "    liar.pose = pose",
        "    return liar",
        "class S: pass",
        "s = S(); s.name = lying('evil', own[0])",
        "s.origin = lying(os.path.abspath('evil.so'), own[1])",
        "real, builtins.str = builtins.str, Liar  # a hook that reads str from builtins: Liar",
        "try:",
        "    _imp.create_dynamic(s)",
        "except SystemError:  # its PyInit_evil ran: it loaded",
        "    return 'escaped'",
        "finally:",
        "    builtins.str = real",
        "return 'not loaded'",
    ]
)
"""A library the code wrote, by a name and file that answer comparisons as one of the
interpreter's own modules, with `builtins.str` rebound to their class."""

EXEC_UNDER_USR = "os.execv('/usr/bin/id', ['id'])\n    return 'escaped'"
"""Replace the interpreter with a binary of the system's."""

LIBRARY_SOURCE = (
    "static void loaded(void) __attribute__((constructor));\n"
    "static void loaded(void) {}\n"
    "void *PyInit_evil(void) { return 0; }\n"
)
"""A library with a constructor and a module init that fails without an exception (so a
load that worked reads as SystemError), and no libc: 5 KB."""


@functools.cache
def native_library() -> bytes:
    """`LIBRARY_SOURCE` built with the system's C compiler, `cc` (the same bytes each time).
    A machine without one fails the tests that need it: CI installs it (.ci/run)."""
    compiler = shutil.which("cc")
    assert compiler is not None, "the native-library payloads need a C compiler: cc"
    with tempfile.TemporaryDirectory() as folder:
        source, library = Path(folder, "evil.c"), Path(folder, "evil.so")
        source.write_text(LIBRARY_SOURCE)
        flags = ["-shared", "-fPIC", "-nostdlib", "-s", "-Wl,-z,max-page-size=4096"]
        subprocess.run([compiler, *flags, "-o", str(library), str(source)], check=True)
        return library.read_bytes()


def with_library(source: str) -> str:
    """`source` with LIBRARY replaced by `native_library()`'s bytes, in base64."""
    if "LIBRARY" not in source:
        return source
    return source.replace("LIBRARY", repr(base64.b64encode(native_library()).decode()))


# --- the interpreters the project supports, besides the one running the tests -----------------

PYTHON_3_13 = "3.13"
"""The newest Python the project supports: from it a frame's locals write through to its
closure cells (PEP 667), which the hook must survive."""


@functools.cache
def pyenv_python(version: str) -> str | None:
    """pyenv's newest Python `version` ("3.13") here, else `python3.13` on PATH, else None."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
    which = shutil.which(f"python{version}")
    for candidate in [*map(str, found), *([which] if which else [])]:
        if subprocess.run([candidate, "-c", "pass"], check=False).returncode == 0:
            return os.path.realpath(candidate)
    return None


def needs_python(version: str) -> str:
    """`pyenv_python(version)`; where there is none, the test skips, saying so, but under nox
    (CI), which must run it, it fails: CI's machines have pyenv's 3.13."""
    python = pyenv_python(version)
    if python is None:
        where = f"pyenv install {version}, or python{version} on PATH"
        if REQUIRE_EXTRAS:
            pytest.fail(
                f"no Python {version} here ({where}), which nox needs (MATHRL_REQUIRE_EXTRAS=1)"
            )
        # A developer's machine without it: the 3.11 tests still run; CI runs these.
        pytest.skip(reason=f"no Python {version} here ({where}): nox, as CI, runs this test")
    return python


def base_prefix(python: str) -> str:
    """`python`'s installation (sys.base_prefix)."""
    return subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@contextmanager
def relocatable(python: str) -> Iterator[Path]:
    """A copy of pyenv's `python` that finds its libpython through $ORIGIN, as conda's and
    other relocatable builds do, in a folder of /var/tmp that every user may read: its binary,
    its RUNPATH rewritten to `$ORIGIN/../lib` in place, and its libpython and standard library
    as hard links (copies across file systems), site-packages and tests left out. Yields the
    copy's interpreter. Skips (fails under nox) where `python` has no RUNPATH of its own library."""
    prefix = Path(base_prefix(python))
    version = Path(python).name.removeprefix("python")
    library = prefix / "lib" / f"libpython{version}.so.1.0"
    binary = Path(python).read_bytes()
    old = b"\0" + bytes(prefix / "lib") + b"\0"
    if not library.exists() or binary.count(old) != 1:
        # A static build (pyenv's without --enable-shared) has nothing to relocate: the
        # test skips there, saying so; under nox (CI, whose pyenv builds are shared) it fails.
        why = f"{python} finds no libpython of its own through a RUNPATH"
        if REQUIRE_EXTRAS:
            pytest.fail(f"{why} (MATHRL_REQUIRE_EXTRAS=1)")
        pytest.skip(reason=f"{why}: a static build, nothing to relocate; nox, as CI, runs it")
    top = Path(tempfile.mkdtemp(prefix="mathrl-relocatable-", dir="/var/tmp"))
    try:
        top.chmod(0o755)
        (top / "bin").mkdir()
        new = b"\0$ORIGIN/../lib"
        copy = top / "bin" / f"python{version}"
        copy.write_bytes(binary.replace(old, new + bytes(len(old) - len(new))))
        copy.chmod(0o755)

        def link(source: str, target: str) -> None:
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)

        (top / "lib").mkdir()
        link(str(library), str(top / "lib" / library.name))
        standard = prefix / "lib" / f"python{version}"
        shutil.copytree(
            standard, top / "lib" / standard.name, copy_function=link,
            ignore=lambda folder, names: {"site-packages", "test"} & set(names)
            if folder == str(standard) else set(),
        )  # fmt: skip
        yield copy
    finally:
        shutil.rmtree(top)
