"""Write a small Python function: the second built-in task, of another shape.

The model completes a prompt that opens a code block with the body of a
function `f`, then closes the block. The reward is the share of hidden tests
`f` passes (partial credit): the completion runs in `mathrl.tasks.code.sandbox`, a
separate, locked-down Python process, never in the trainer, and only the
function's return values come back; the expected ones never leave this
process. (The seed's version of this task ran model output with `exec`
inside the trainer.)

Completions are multi-line, so the task stops at the closing fence instead
of a newline, and has a larger token budget; one cut off at that budget
never finished its function, and scores 0. Problems come from a few
families of one-line functions; a fixed tenth of them, by hash, is held out.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mathrl.adapter import Response, Reward
from mathrl.tasks.code.sandbox import JsonValue, Limits, Outcome, call_function, check_layers

FENCE = "```"
LIMITS = Limits(cpu_seconds=2, wall_seconds=5.0)
INTS: tuple[JsonValue, ...] = (0, 1, 2, -3, 7, 10, 25, -11)
LISTS: tuple[JsonValue, ...] = ([], [1], [1, 2, 3], [-5, 5, 9], [10, 20, 30, 40], [7, -7, 100])
TEXTS: tuple[JsonValue, ...] = (
    "",
    "banana",
    "the quick brown fox jumps over the lazy dog",
    "zzz yyy xxx",
    "Mississippi",
)


def _int(x: JsonValue) -> int:
    assert isinstance(x, int)
    return x


def _ints(xs: JsonValue) -> list[int]:
    assert isinstance(xs, list)
    return [_int(x) for x in xs]


@dataclass(frozen=True, slots=True)
class Family:
    """A kind of function: its argument and test inputs, its wording, its body, its truth."""

    argument: str
    inputs: tuple[JsonValue, ...]
    describe: Callable[[int], str]
    body: Callable[[int], str]
    truth: Callable[[int, JsonValue], JsonValue]
    params: range


# Each family's parameter p: "linear" reads it as two digits, "count" as a letter.
FAMILIES: dict[str, Family] = {
    "linear": Family(
        "x", INTS, lambda p: f"{p // 10} * x + {p % 10}", lambda p: f"{p // 10} * x + {p % 10}",
        lambda p, x: p // 10 * _int(x) + p % 10, range(20, 100),
    ),
    "mod": Family(
        "x", INTS, lambda p: f"x modulo {p}", lambda p: f"x % {p}",
        lambda p, x: _int(x) % p, range(2, 22),
    ),
    "square": Family(
        "x", INTS, lambda p: f"x squared plus {p}", lambda p: f"x * x + {p}",
        lambda p, x: _int(x) ** 2 + p, range(20),
    ),
    "sum": Family(
        "xs", LISTS, lambda p: f"the sum of the list xs plus {p}", lambda p: f"sum(xs) + {p}",
        lambda p, xs: sum(_ints(xs)) + p, range(1, 41),
    ),
    "count": Family(
        "s", TEXTS, lambda p: f"how many times {chr(p)!r} occurs in the string s",
        lambda p: f"s.count({chr(p)!r})", lambda p, s: str(s).count(chr(p)),
        range(ord("a"), ord("z") + 1),
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CodeProblem:
    """One function to write: a family and its parameter."""

    family: str
    param: int

    @property
    def spec(self) -> Family:
        return FAMILIES[self.family]

    def reference(self) -> str:
        return f"def f({self.spec.argument}):\n    return {self.spec.body(self.param)}\n"

    def expected(self) -> list[JsonValue]:
        return [self.spec.truth(self.param, x) for x in self.spec.inputs]


def _heldout(problem: CodeProblem) -> bool:
    digest = hashlib.blake2b(f"{problem.family}/{problem.param}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % 10 == 0


ALL = tuple(CodeProblem(name, p) for name, family in FAMILIES.items() for p in family.params)
TRAINING_POOL = tuple(p for p in ALL if not _heldout(p))
HELDOUT_POOL = tuple(p for p in ALL if _heldout(p))
EXAMPLE = CodeProblem("linear", 31)

PROMPT = """Complete the Python function `f` in the code block, then close the block.

Task: return {describe}.
```python
{example}```

Task: return {task}.
```python
"""


CACHE_ENTRIES = 8192
CACHE_BYTES = 32 * 2**20
"""The reward cache's bounds: outcomes kept, and the memory they hold (`outcome_bytes`)."""
ENTRY_BYTES = 256
"""What `outcome_bytes` counts for an entry besides its values: the key, the tuples, the links."""

Key = tuple[str, CodeProblem, bool]


def outcome_bytes(code: str, outcome: Outcome) -> int:
    """The memory a kept outcome is counted at: what Python holds for its code, detail and
    results (`held_bytes`), plus `ENTRY_BYTES`. Deterministic for an interpreter build.

    E.g. on 64-bit CPython 3.11, `def f(x): return 'x'*1000` (25 characters: 74 bytes) whose
    8 results are one string of 1,000 `x` (1,049 bytes, held once) in a tuple of 8 (104
    bytes), with no detail (49 bytes): 74 + 49 + 104 + 1,049 + 256 = 1,532 bytes. Results
    that came back from a child are distinct objects: 8 such strings hold 8 x 1,049.
    """
    values = held_bytes(code) + held_bytes(outcome.detail) + held_bytes(outcome.results)
    return values + ENTRY_BYTES


def held_bytes(value: object) -> int:
    """The bytes Python holds for `value` and the values in it (a JSON value's lists,
    dicts, strings and numbers), each object once (`sys.getsizeof`)."""
    seen: set[int] = set()
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, list | tuple):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
    return total


class OutcomeCache:
    """The outcomes of the latest runs, least recently used dropped first, within
    `entries` outcomes and `budget` bytes (`outcome_bytes`): a long run's distinct
    completions, however large their results, hold at most `budget` of the trainer's memory.
    An outcome larger than the whole budget is not kept. Safe across threads."""

    def __init__(self, entries: int = CACHE_ENTRIES, budget: int = CACHE_BYTES) -> None:
        self.entries, self.budget = entries, budget
        self.bytes = 0
        """What the outcomes kept now count, in bytes."""
        self._kept: OrderedDict[Key, tuple[Outcome, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: Key) -> Outcome | None:
        with self._lock:
            found = self._kept.get(key)
            if found is None:
                return None
            self._kept.move_to_end(key)
            return found[0]

    def put(self, key: Key, outcome: Outcome) -> None:
        size = outcome_bytes(key[0], outcome)
        with self._lock:
            if key in self._kept:
                self.bytes -= self._kept.pop(key)[1]
            if size > self.budget:
                return
            self._kept[key] = (outcome, size)
            self.bytes += size
            while self.bytes > self.budget or len(self._kept) > self.entries:
                self.bytes -= self._kept.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self.bytes = 0


class CachedRun:
    """`run`: a sandbox call per distinct (code, problem, policy), its outcome kept in
    `cache`."""

    def __init__(self, cache: OutcomeCache) -> None:
        self.cache = cache

    def __call__(
        self, code: str, problem: CodeProblem, allow_missing_layers: bool = False
    ) -> Outcome:
        """`code`'s `f` on each of `problem`'s hidden test inputs, in the sandbox (once per
        pair and policy: an outcome run with missing layers allowed is never a strict
        task's)."""
        key = (code, problem, allow_missing_layers)
        outcome = self.cache.get(key)
        if outcome is None:
            inputs = [[x] for x in problem.spec.inputs]
            outcome = call_function(code, "f", inputs, LIMITS, allow_missing_layers)
            self.cache.put(key, outcome)
        return outcome

    def cache_clear(self) -> None:
        self.cache.clear()


run = CachedRun(OutcomeCache())


def passes(got: JsonValue | None, want: JsonValue) -> bool:
    """One test: the same value, of the same type (True is not 1)."""
    return got == want and type(got) is type(want)


def score(code: str, problem: CodeProblem, allow_missing_layers: bool = False) -> float:
    """The share of `problem`'s hidden tests that `code`'s `f` passes, run in the sandbox."""
    expected = problem.expected()
    results = run(code, problem, allow_missing_layers).results
    return sum(map(passes, results, expected)) / len(expected)


def code_of(completion: str) -> str:
    """The code of a completion: the text before the closing fence (the stop)."""
    return completion.split(FENCE, 1)[0]


class CodeAdapter:
    """Write `f` for a small spec; the reward is the share of hidden tests it passes.

    `allow_missing_layers`: run the code with the sandbox layers this machine can set up,
    instead of refusing to (`preflight` then warns, naming what is missing). Default False:
    the task fails closed. It holds for every sandbox this task's calls use, and for no other
    task's (see `mathrl.tasks.code`).
    """

    name = "code"
    stop = (FENCE,)
    """The closing fence ends the completion; the code itself spans several lines."""
    max_tokens = 64

    def __init__(self, allow_missing_layers: bool = False) -> None:
        self.allow_missing_layers = allow_missing_layers

    def build_dataset(self, seed: int, step: int, size: int) -> list[CodeProblem]:
        rng = random.Random(f"mathrl/code/seed={seed}/step={step}")
        return [rng.choice(TRAINING_POOL) for _ in range(size)]

    def heldout_dataset(self, seed: int, size: int) -> list[CodeProblem]:
        pool = list(HELDOUT_POOL)
        random.Random(f"mathrl/code/heldout/seed={seed}").shuffle(pool)
        return [pool[i % len(pool)] for i in range(size)]

    def make_prompt(self, problem: CodeProblem) -> str:
        return PROMPT.format(
            describe=EXAMPLE.spec.describe(EXAMPLE.param),
            example=EXAMPLE.reference(),
            task=problem.spec.describe(problem.param),
        )

    def compute_reward(self, completion: str, problem: CodeProblem) -> Reward:
        """The share of the hidden tests `f` passes (a number; a subclass may name parts); 0 for
        a completion cut off at the token limit, whose function was never finished."""
        if isinstance(completion, Response) and completion.ended == "length":
            return 0.0
        code = code_of(completion)  # the stop, and anything after it, is not code
        return score(code, problem, self.allow_missing_layers) if code.strip() else 0.0

    def reference_completion(self, problem: CodeProblem) -> str:
        return problem.reference()

    def preflight(self) -> str:
        """The sandbox's layers on this machine; SandboxUnavailable if one is missing (unless
        `allow_missing_layers`: then a warning naming what is)."""
        return check_layers(LIMITS, self.allow_missing_layers).describe()

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of completions that pass every test."""
        return sum(1 for r in rewards if r == 1.0) / len(rewards) if rewards else 0.0
