"""The `python` tool: run the model's code in the code task's sandbox, return what it printed.

For: the math-python task, whose tool this is (`python_tool` makes it, with the task's
limits). The code is untrusted: it runs only in `mathrl.tasks.code.sandbox`, a fresh
locked-down interpreter per call (one started ahead when the call runs on a worker pool's
thread), never in the trainer. Not for: code that keeps state between calls (each call
is a new interpreter: a variable of one call is gone in the next).

In the sandbox, `RUNNER` runs the code with its output (stdout and stderr) caught, and
returns it cut to `output_chars`, with the exception that ended the code, if one did. The
tool returns the output; code that raised, ran past its time or memory, or printed past the
sandbox's output cap is a failed call (`ToolFailed`), whose reply says why, after what it
printed. A sandbox layer this machine lacks stops the run (`SandboxUnavailable`), unless
the task allows missing layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mathrl.tasks.code.sandbox import (
    Limits,
    SandboxError,
    SandboxUnavailable,
    call_function,
)
from mathrl.tools import ToolFailed

RUNNER = """
def run(code, limit):
    import io, sys
    out = io.StringIO()
    sys.stdout = sys.stderr = out
    error = None
    try:
        exec(compile(code, "<python>", "exec"), {"__name__": "__main__"})
    except BaseException as exc:
        import traceback  # only now: its imports are a third of a call that succeeds
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:limit]
    text = out.getvalue()
    return [text[:limit], len(text), error]
"""
"""Runs in the sandbox: `run(code, limit)` is [the output's first `limit` characters, its
length, the exception that ended the code (one line) or None]."""
NOTHING = "(the code printed nothing: print what you want to see)"


def limits_for(seconds: float, output_chars: int) -> Limits:
    """A call's sandbox limits: `seconds` of CPU time, a second more of wall time (the
    interpreter's start is in it), and room for the output."""
    return Limits(
        cpu_seconds=max(1, math.ceil(seconds)),
        wall_seconds=seconds + 1.0,
        output_bytes=max(64 * 2**10, 16 * output_chars + 4096),  # escaped as JSON, twice
    )


def python_tool(
    seconds: float, output_chars: int, allow_missing_layers: bool = False
) -> Callable[[str], str]:
    """The `python` tool, with its limits (see the module docstring)."""
    limits = limits_for(seconds, output_chars)

    def python(code: str) -> str:
        """Run Python 3 code in a fresh interpreter and return what it prints.

        Each call starts afresh: define and print everything it needs in one call. The
        standard library is there (math, fractions, itertools); files and the network
        are not.

        Args:
            code: the program; print the values you want to see.
        """
        try:
            outcome = call_function(RUNNER, "run", [[code, output_chars]], limits,
                                    allow_missing_layers)  # fmt: skip
        except SandboxError as exc:  # a layer this machine lacks: not the model's doing
            raise SandboxUnavailable(str(exc), exc.allowed_by) from None
        result = outcome.results[0] if outcome.results else None
        if outcome.status != "ok":
            why = {"timeout": "the code ran past its time limit",
                   "output_limit": "the code printed too much",
                   "crashed": "the code's process ended without a result"}  # fmt: skip
            raise ToolFailed(
                f"{why.get(outcome.status, 'the code did not run')} ({outcome.detail})"
            )
        # What came back is the code's doing as much as the runner's: read it with care.
        if not (isinstance(result, list) and len(result) == 3):
            raise ToolFailed("the code's output could not be read back")
        text, length, error = result
        text = text if isinstance(text, str) else ""
        length = length if isinstance(length, int) else len(text)
        printed = text + (f"... ({length:,} characters)" if length > len(text) else "")
        if error is not None:
            raise ToolFailed(f"{printed}{chr(10) if printed else ''}{error}")
        return printed or NOTHING

    return python
