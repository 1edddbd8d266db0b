"""The problems drawn again in a new interpreter, with another hash seed, and compared.

For: `check_adapter`'s check of determinism across processes. A task seeded
with `hash()` of a string (which differs from process to process), `id()`,
the time, or the order of a set of strings, draws the same problems twice in
one process and other problems in the next: two identical runs then differ,
and a resumed run trains on problems the first never drew. No check inside
one process can see that.

The new interpreter builds the task again as a resumed run does: its class,
imported by module name (or from the module's file, for a task loaded from a
path), called with the task's `options`. It makes every draw the checker made
(`Checker.draws`) and answers, for each problem, its prompt, its reference
and its fingerprint (`mathrl.problem_keys`: its value, canonical, so a set
of strings compares whatever the hash seed), which are compared with this
process's: problems that share a prompt (a game's hidden secret) differ in
their fingerprints. A problem without a fingerprint is compared by its
prompt and reference (the checker says why it has none). A task that
cannot be built again so (a class defined in a function, or in the script
being run) is not compared, with a warning that says why.

Run as `python -m mathrl.testing.new_interpreter REQUEST`: that is the child.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mathrl.problem_keys import Unfingerprintable, problem_fingerprint
from mathrl.resolved import as_task, prompt_key
from mathrl.testing.checker import Checker
from mathrl.text import apart, describe, one_line, shown

TIMEOUT = 300.0
"""Seconds the new interpreter may take to import the task and draw its problems."""

Drawn = tuple[str, str, str | None, str]
"""A problem as the two processes compare it: its prompt, its reference (each as text, or
what the call raised), its fingerprint (None if it has none) and how it is shown."""


def check_across_processes(checker: Checker) -> None:
    """Draw `checker.draws` again in a new interpreter with another hash seed; a violation
    for each draw that differs, or a warning if the task cannot be drawn there."""
    cls = type(checker.adapter)
    if "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        where = "in a function" if "<locals>" in cls.__qualname__ else "in the script being run"
        checker.warn(
            False,
            f"build_dataset was not drawn again in a new interpreter: {cls.__qualname__} is "
            f"defined {where}, where another process cannot import it; define the task in a "
            "module to have its problems compared across processes",
            key="new-interpreter",
        )
        return
    hash_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    there = _drawn_there(checker, hash_seed)
    if isinstance(there, str):
        checker.warn(
            False,
            f"build_dataset was not drawn again in a new interpreter: {there}",
            key="new-interpreter",
        )
        return
    for draw, answer in zip(checker.draws, there, strict=True):
        here = [drawn(checker.adapter, p) for p in draw.problems]
        checker.expect(
            isinstance(answer, list) and [d[:3] for d in here] == [d[:3] for d in answer],
            f"{draw.what} gave other problems in a new interpreter (PYTHONHASHSEED={hash_seed}): "
            f"{_difference(here, answer)}; a task must draw the same problems in "
            "every process (so a resumed run trains on what the first would have): seed a "
            "random.Random with a string or numbers, never hash() of a string, id(), the "
            "time or the order of a set",
            key="across-processes",
        )


def drawn(adapter: Any, problem: Any) -> Drawn:
    """`problem` as the two processes compare it."""
    try:
        prompt = prompt_key(adapter.make_prompt(problem))
    except Exception as exc:
        prompt = f"make_prompt raised {type(exc).__name__}: {describe(exc, 80)}"
    try:
        reference = str(adapter.reference_completion(problem))
    except Exception as exc:
        reference = f"reference_completion raised {type(exc).__name__}: {describe(exc, 80)}"
    try:
        fingerprint: str | None = problem_fingerprint(problem)
    except Unfingerprintable:  # compared by prompt and reference; the checker says why
        fingerprint = None
    return prompt, reference, fingerprint, shown(problem, 60)


def _difference(here: list[Drawn], there: object) -> str:
    """The first difference between this process's problems and the other's, in words."""
    if not isinstance(there, list):
        return f"there it {there}"
    if len(there) != len(here):
        return f"{len(here)} problems here, {len(there)} there"
    for i, ((prompt, reference, key, problem), (prompt2, reference2, key2, problem2)) in enumerate(
        zip(here, there, strict=True)
    ):
        if prompt != prompt2:
            ours, theirs = apart(prompt, prompt2)
            return f"problem {i}'s prompt is {ours} here, {theirs} there"
        if reference != reference2:
            ours, theirs = apart(reference, reference2)
            return f"problem {i}'s reference is {ours} here, {theirs} there"
        if key != key2:
            return f"problem {i} is {problem} here, {problem2} there"
    return "the same problems"  # unreachable when called on a difference


def _drawn_there(checker: Checker, hash_seed: str) -> list[list[Drawn] | str] | str:
    """What the new interpreter drew, draw by draw (a draw that raised: what it raised); or,
    if it could not draw, why not."""
    cls = type(checker.adapter)
    module = sys.modules.get(cls.__module__)
    with tempfile.TemporaryDirectory(prefix="mathrl-draws-") as folder:
        out = Path(folder) / "drawn.pickle"
        request = {
            "path": list(sys.path),
            "module": cls.__module__,
            "file": getattr(module, "__file__", None),
            "qualname": cls.__qualname__,
            "options": dict(checker.task.options),
            "draws": [(draw.method, draw.args) for draw in checker.draws],
            "out": str(out),
        }
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        command = [sys.executable, "-m", "mathrl.testing.new_interpreter", json.dumps(request)]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"it took more than {TIMEOUT:g} s"
        if done.returncode != 0 or not out.exists():
            said = done.stderr.strip().splitlines()
            return one_line(said[-1] if said else f"it exited with code {done.returncode}", 300)
        answer: list[list[Drawn] | str] = pickle.loads(out.read_bytes())
        return answer


def _child(request: dict[str, Any]) -> None:
    """In the new interpreter: build the task, make each draw, write what it gave."""
    sys.path[:] = request["path"]
    module = _module(request["module"], request["file"])
    target: Any = module
    for part in request["qualname"].split("."):
        target = getattr(target, part)
    try:
        task = as_task(target(**request["options"]))
    except Exception as exc:
        options = ", ".join(f"{k}={v!r}" for k, v in request["options"].items())
        raise SystemExit(
            f"{request['qualname']}({options}) could not be made there "
            f"({type(exc).__name__}: {describe(exc)})"
        ) from None
    answers: list[list[Drawn] | str] = []
    for method, args in request["draws"]:
        draw = task.heldout if method == "heldout" else task.adapter.build_dataset
        try:
            problems = draw(*args)
        except Exception as exc:
            answers.append(f"raised {type(exc).__name__}: {describe(exc, 80)}")
            continue
        answers.append([drawn(task.adapter, p) for p in problems])
    Path(request["out"]).write_bytes(pickle.dumps(answers))


def _module(name: str, file: str | None) -> Any:
    """The task's module: imported by name, or from its file where the name finds another
    module (or none), as for a task loaded from a path."""
    if file is not None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin != file:
            spec = importlib.util.spec_from_file_location(name, file)
            if spec is None or spec.loader is None:
                raise SystemExit(f"{file} cannot be imported as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
    return importlib.import_module(name)


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
