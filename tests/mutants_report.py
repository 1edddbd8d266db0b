"""What `nox -s mutants` reports after mutmut's run: each module's mutants by outcome, and
every survivor not listed as equivalent in tests/mutants_equivalent.txt, with its diff.

Run from the repository's root, where mutmut left `mutants/`, in an environment with
mutmut installed: `python tests/mutants_report.py [MODULE ...]`. The modules (dotted, e.g.
`mathrl.grpo`) are those whose survivors must all be killed or listed (the exit code is 1
if one is not); by default, every mutated module.

A survivor is listed as equivalent by its function and its change, not by mutmut's name for
it (`..._mutmut_12`, which shifts as the code around it changes): one line each,

    module.function | the line as written | the line as mutated | why no test can tell

with the lines stripped of their indentation (a change of several lines: each side's lines
joined by " / "; a line that holds " | " itself, as `Sampler | None` does, holds it on both
sides alike). Where the line is a zip whose lengths are equal by a check just before it
or by construction, the mutated side may be `STRICT`'s words: that entry stands for the
three mutants of its `strict=True` (False, None, left out). An entry that no mutant matches
any more is reported, to be removed.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

EQUIVALENT = Path(__file__).parent / "mutants_equivalent.txt"
Change = tuple[str, str, str]
"""(module.function, the lines as written, the lines as mutated)."""


MUTANT = re.compile(
    r"(?P<module>.+?)\.x(?:_(?P<function>.+)|ǁ(?P<cls>[^ǁ]+)ǁ(?P<method>.+))__mutmut_\d+"
)
"""mutmut's name of a mutant: its module, then `x_` and the function or `xǁClassǁ` and the
method, then `__mutmut_` and its number."""


def function_of(mutant: str) -> str:
    """`mathrl.grpo.x_kl_penalized__mutmut_6` -> `mathrl.grpo.kl_penalized`; a method's
    (`mathrl.evaluation.xǁSamplesǁpass_at__mutmut_1`) -> `mathrl.evaluation.Samples.pass_at`."""
    found = MUTANT.fullmatch(mutant)
    assert found is not None, f"not a mutant's name: {mutant!r}"
    if found["function"] is not None:
        return f"{found['module']}.{found['function']}"
    return f"{found['module']}.{found['cls']}.{found['method']}"


def module_of(mutant: str) -> str:
    found = MUTANT.fullmatch(mutant)
    assert found is not None, f"not a mutant's name: {mutant!r}"
    return found["module"]


def change_of(mutant: str, diff: str) -> Change:
    """The mutant's function, and its removed and added lines, each stripped."""
    lines = diff.splitlines()
    removed = [line[1:].strip() for line in lines if line.startswith("-") and line[1:].strip()]
    added = [line[1:].strip() for line in lines if line.startswith("+") and line[1:].strip()]
    removed = [line for line in removed if not line.startswith("--")]
    added = [line for line in added if not line.startswith("++")]
    return function_of(mutant), " / ".join(removed), " / ".join(added)


STRICT = "strict=True made False or None, or left out"
"""The mutated side of an entry for the three mutants of a zip's `strict=True`."""


def listed() -> dict[Change, str]:
    """The equivalents file's entries: each change, and why it is equivalent (an entry for a
    zip's `strict=True`, `STRICT`, as its three)."""
    entries: dict[Change, str] = {}
    for number, line in enumerate(EQUIVALENT.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        # A line of code may hold " | " itself (`Sampler | None`): the two lines between the
        # function and the reason hold it alike, so the middle splits in two equal halves.
        parts = [part.strip() for part in line.split(" | ")]
        middle = parts[1:-1]
        if len(parts) < 4 or len(middle) % 2 or not all(parts):
            raise SystemExit(f"{EQUIVALENT.name}:{number}: not 'function | as written | mutated "
                             f"| why' (got {line!r})")  # fmt: skip
        half = len(middle) // 2
        function, why = parts[0], parts[-1]
        written, mutated = " | ".join(middle[:half]), " | ".join(middle[half:])
        if mutated != STRICT:
            entries[function, written, mutated] = why
            continue
        if "strict=True" not in written:
            raise SystemExit(f"{EQUIVALENT.name}:{number}: no strict=True in {written!r}")
        for instead in ("strict=False", "strict=None", ""):
            entries[function, written, written.replace("strict=True", instead)] = why
    return entries


def main(argv: list[str]) -> int:
    mutmut: Any = importlib.import_module("mutmut.__main__")
    statuses: dict[str, str] = {}
    for path in mutmut.walk_mutatable_files():
        data = mutmut.SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            statuses[name] = mutmut.status_by_exit_code[code]
    modules = argv or sorted({module_of(name) for name in statuses})
    entries, matched = listed(), set()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    unlisted: list[tuple[str, str]] = []
    for name, status in sorted(statuses.items()):
        module = module_of(name)
        if status == "survived":
            diff = mutmut.get_diff_for_mutant(name)
            change = change_of(name, diff)
            if change in entries:
                matched.add(change)
                status = "equivalent"
            elif module in modules:
                unlisted.append((name, diff))
        counts[module][status] += 1
    for name, diff in unlisted:
        print(f"survived, not listed as equivalent: {name}\n{diff}")
    stale = {(f, w) for f, w, _ in entries} - {(f, w) for f, w, _ in matched}
    # An entry of a module not yet wholly run may match a mutant still to be checked.
    unchecked = {module for module, outcome in counts.items() if outcome["not checked"]}
    for function, written in sorted(stale):
        if any(function.startswith(f"{module}.") for module in unchecked):
            continue
        print(f"{EQUIVALENT.name}: no mutant matches any more, remove it: {function} | {written}")
    total: Counter[str] = sum(counts.values(), Counter())
    for module, outcome in [*sorted(counts.items()), ("total", total)]:
        others = {k: v for k, v in sorted(outcome.items()) if k not in MAIN}
        line = ", ".join(f"{outcome[k]} {k}" for k in MAIN)
        print(f"{module}: {line}" + (f" ({others})" if others else ""))
    return 1 if unlisted else 0


MAIN = ("killed", "survived", "equivalent")
"""The outcomes every module's line gives; others (timeout, no tests, ...) follow."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
