"""What a sandbox layer's refusal looks like from the trainer: the evidence a test asserts.

For: tests/test_sandbox.py and tests/test_sandbox_layers.py, whose payloads each name the layer
that must stop them. A payload's `f` lets the refusal propagate, so `Outcome.detail` reads
`input 0: ` and one of these; an outcome without it (a child that crashed or exited before it
called `f`, say) is no evidence that any layer stopped anything. WORLD stands for the path of
the folder the payload must not touch.
"""

from __future__ import annotations


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
