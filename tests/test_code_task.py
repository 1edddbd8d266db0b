"""The code-writing task: its problems, its sandboxed partial-credit reward, its learning."""

from __future__ import annotations

import json
import statistics
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from conftest import checks_passed, examples
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.resolved import as_task
from mathrl.rollout import run_problems
from mathrl.tasks.code import task
from mathrl.tasks.code.sandbox import JsonValue, Outcome
from mathrl.tasks.code.task import (
    ALL,
    CACHE_BYTES,
    ENTRY_BYTES,
    FENCE,
    HELDOUT_POOL,
    TRAINING_POOL,
    CodeAdapter,
    CodeProblem,
    OutcomeCache,
    held_bytes,
    outcome_bytes,
    run,
    score,
)
from mathrl_fakes import FakeBackend

SQUARE_PLUS_3 = CodeProblem("square", 3)


def test_the_task_declares_a_fence_stop_and_a_larger_budget() -> None:
    task = as_task(CodeAdapter())
    assert (task.name, task.stop, task.max_tokens) == ("code", (FENCE,), 64)
    prompt = CodeAdapter().make_prompt(SQUARE_PLUS_3)
    assert prompt.endswith("Task: return x squared plus 3.\n```python\n")
    assert CodeAdapter().reference_completion(SQUARE_PLUS_3) == "def f(x):\n    return x * x + 3\n"


def test_held_out_problems_are_never_training_problems() -> None:
    assert set(TRAINING_POOL) | set(HELDOUT_POOL) == set(ALL)
    assert not set(TRAINING_POOL) & set(HELDOUT_POOL)
    assert set(CodeAdapter().heldout_dataset(0, 100)) <= set(HELDOUT_POOL)


@settings(max_examples=examples(3, 10), deadline=None)  # two sandboxes each
@given(st.sampled_from(ALL))
def test_every_reference_passes_all_its_tests(problem: CodeProblem) -> None:
    adapter = CodeAdapter()
    reference = adapter.reference_completion(problem)
    assert adapter.compute_reward(reference, problem) == 1.0
    assert adapter.compute_reward(reference + FENCE, problem) == 1.0


def test_reward_worked_examples() -> None:
    adapter = CodeAdapter()
    # x * |x| + 3 agrees with x * x + 3 on 0, 1, 2, 7, 10 and 25 but not on -3 and -11:
    # 6 of the 8 tests -> 0.75.
    assert adapter.compute_reward("def f(x):\n    return x * abs(x) + 3\n", SQUARE_PLUS_3) == 0.75
    # Text after the closing fence is not code: it cannot break a right answer.
    assert adapter.compute_reward("def f(x):\n    return x*x+3\n```\n1/0", SQUARE_PLUS_3) == 1.0
    # True == 1 in Python, but a bool is not the int the tests expect.
    assert adapter.compute_reward("def f(x):\n    return True\n", CodeProblem("mod", 2)) == 0.0
    assert adapter.compute_reward("", SQUARE_PLUS_3) == 0.0
    assert adapter.compute_reward("def f(x):\n    return 'x'\n", SQUARE_PLUS_3) == 0.0
    # 2 of 4 rewards are a full pass -> accuracy 0.5; partial credit is not a pass.
    assert adapter.evaluate([1.0, 0.75, 1.0, 0.0]) == 0.5


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos._exit(0)\n",
        pytest.param(  # seconds of CPU to its limit: test_sandbox has the limit in the fast suite
            "def f(x):\n    while True:\n        pass\n", marks=pytest.mark.slow
        ),
        "import os\nos.fork()\ndef f(x):\n    return x * x + 3\n",
        # /var/tmp and /dev/shm: world-writable (its own /tmp is its folder, a private tmpfs)
        "open('/var/tmp/escape-from-mathrl', 'w').write('x')\ndef f(x):\n    return x * x + 3\n",
        "open('/dev/shm/escape-from-mathrl', 'w').write('x')\ndef f(x):\n    return x * x + 3\n",
    ],
)
def test_code_that_misbehaves_scores_nothing(code: str) -> None:
    assert CodeAdapter().compute_reward(code, SQUARE_PLUS_3) == 0.0
    assert not Path("/var/tmp/escape-from-mathrl").exists()
    assert not Path("/dev/shm/escape-from-mathrl").exists()


@pytest.mark.slow  # ~75 sandboxes, 10-20 s; the checks run on the other tasks in the fast suite
def test_the_code_task_passes_check_adapter() -> None:
    # Its summary names the task and ends with the sandbox's own line (its preflight).
    checks_passed(CodeAdapter())


@pytest.mark.slow  # 5 s of training; the task's contract is checked in the fast suite
def test_the_code_task_learns_on_the_fake_at_its_defaults(tmp_path: Path) -> None:
    config = TrainConfig(steps=20)
    backend = FakeBackend.for_run(
        CodeAdapter(), run_problems(CodeAdapter(), config), checkpoint_dir=tmp_path
    )
    accuracy = [m.accuracy for m in run_grpo(backend, CodeAdapter(), config).steps]
    assert statistics.mean(accuracy[15:]) >= statistics.mean(accuracy[:5]) + 0.20


# --- the reward cache ------------------------------------------------------------------------


def test_an_outcome_is_counted_at_what_python_holds_for_it() -> None:
    # On 64-bit CPython 3.11: 25 characters of code, 74 bytes; one string of 1,000 "x", 1,049
    # bytes, held once by a tuple of 8 (104 bytes); no detail, 49 bytes; 256 for the entry:
    # 1,532 bytes. Results decoded from a child are distinct objects: each counts.
    code = "def f(x): return 'x'*1000"
    size = sys.getsizeof
    once = Outcome("ok", ("x" * 1000,) * 8, "")
    assert (
        outcome_bytes(code, once)
        == size(code) + size("") + size(once.results) + size("x" * 1000) + ENTRY_BYTES
    )
    apart = Outcome("ok", tuple(json.loads(json.dumps(["x" * 1000] * 8))), "")
    assert outcome_bytes(code, apart) == outcome_bytes(code, once) + 7 * size("x" * 1000)


def test_containers_count_what_they_hold_not_their_text() -> None:
    # The second review's results: 8 lists of 2,015 empty dicts, 8,064 bytes of JSON each,
    # hold 8 x (2,015 x 64 + the list's 16,176) bytes on 64-bit CPython 3.11: 1.16 MB.
    results = tuple(json.loads(json.dumps([{}] * 2015)) for _ in range(8))
    assert held_bytes(results) == sys.getsizeof(results) + 8 * (
        sys.getsizeof(results[0]) + 2015 * sys.getsizeof({})
    )
    assert held_bytes(results) > 1_100_000


@given(code=st.text(max_size=40), outcome=strategies.sandbox_outcomes, more=strategies.json_values)
def test_an_outcome_counts_at_least_its_overhead_and_more_with_each_result(
    code: str, outcome: Outcome, more: JsonValue
) -> None:
    size = outcome_bytes(code, outcome)
    assert size >= ENTRY_BYTES + sys.getsizeof(code)
    bigger = Outcome(outcome.status, (*outcome.results, more), outcome.detail)
    assert outcome_bytes(code, bigger) > size  # a slot more in the tuple, at least


@given(puts=strategies.cache_puts, budget=st.integers(0, 4000), entries=st.integers(1, 8))
def test_the_cache_never_holds_more_than_its_bounds(
    puts: list[tuple[str, CodeProblem, bool, Outcome]], budget: int, entries: int
) -> None:
    cache = OutcomeCache(entries, budget)
    for code, problem, allowed, outcome in puts:
        cache.put((code, problem, allowed), outcome)
        assert cache.bytes <= budget
        assert len(cache) <= entries
        fits = outcome_bytes(code, outcome) <= budget
        assert (cache.get((code, problem, allowed)) == outcome) is fits  # the latest stays
    kept = [(key, cache.get(key)) for key in {(c, p, a) for c, p, a, _ in puts}]
    assert cache.bytes == sum(outcome_bytes(key[0], o) for key, o in kept if o is not None)
    cache.clear()
    assert (cache.bytes, len(cache)) == (0, 0)


def test_an_outcome_put_again_replaces_the_one_kept_and_its_count() -> None:
    cache, key = OutcomeCache(budget=2000), ("f", SQUARE_PLUS_3, False)
    cache.put(key, Outcome("ok", ("xx",) * 8, ""))
    cache.put(key, Outcome("ok", ("x",) * 8, ""))
    assert (cache.bytes, len(cache)) == (outcome_bytes("f", Outcome("ok", ("x",) * 8, "")), 1)
    assert cache.get(key) == Outcome("ok", ("x",) * 8, "")


@pytest.mark.parametrize(
    "result",
    [
        lambda n, i: "B" * 7900 + f"{n}/{i}",  # the first review's: long strings
        lambda n, i: [{} for _ in range(200)],  # the second's: containers, 18x their text
    ],
    ids=["strings", "containers"],
)
def test_a_flood_of_large_distinct_outcomes_leaves_the_trainers_memory_bounded(
    result: Callable[[int, int], JsonValue],
) -> None:
    # 64 distinct outcomes of 8 results (about 63 KB and 116 KB) into a cache of 1 MiB: its
    # own count never passes its budget, the oldest go first, and the memory they hold, as
    # Python's allocator traces it, stays within the budget and a tenth (the cache's links,
    # which it counts at 256 bytes an entry).
    cache = OutcomeCache(budget=2**20)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(64):
            code = f"def f(x): return ...  # {n}"
            cache.put(
                (code, SQUARE_PLUS_3, False),
                Outcome("ok", tuple(result(n, i) for i in range(8)), ""),
            )
            assert cache.bytes <= 2**20
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 1.1 * 2**20
    assert cache.get((code, SQUARE_PLUS_3, False)) is not None  # the latest is kept
    assert cache.get(("def f(x): return ...  # 0", SQUARE_PLUS_3, False)) is None
    assert CACHE_BYTES <= 32 * 2**20  # what the task's own cache may hold, at most


def test_the_reward_runs_each_code_once_and_keeps_its_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def counted(code: str, *args: object) -> Outcome:
        calls.append(code)
        return Outcome("ok", tuple(x * x + 3 for x in SQUARE_PLUS_3.spec.inputs), "")  # type: ignore[operator]

    monkeypatch.setattr(task, "call_function", counted)
    run.cache_clear()
    code = "def f(x):\n    return x * x + 3  # counted\n"
    assert [score(code, SQUARE_PLUS_3) for _ in range(3)] == [1.0, 1.0, 1.0]
    assert calls == [code]
    assert run.cache.bytes == outcome_bytes(code, run(code, SQUARE_PLUS_3))
    run.cache_clear()
    assert score(code, SQUARE_PLUS_3) == 1.0
    assert calls == [code, code]
    run.cache_clear()
