"""The code-writing task: its problems, its sandboxed partial-credit reward, its learning."""

from __future__ import annotations

import statistics
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


def test_an_outcome_is_counted_at_its_text_and_a_fixed_overhead() -> None:
    # 25 bytes of code; 8 results of 1,002 bytes of JSON each, 7 separators of 2, brackets 2:
    # 8,032; no detail; 256 for the entry: 8,313.
    outcome = Outcome("ok", ("x" * 1000,) * 8, "")
    assert outcome_bytes("def f(x): return 'x'*1000", outcome) == 25 + 8032 + ENTRY_BYTES
    assert outcome_bytes("", Outcome("crashed", (), "é")) == 2 + 2 + ENTRY_BYTES  # "é", "[]"


@given(code=st.text(max_size=40), outcome=strategies.sandbox_outcomes, more=strategies.json_values)
def test_an_outcome_counts_at_least_its_overhead_and_more_with_each_result(
    code: str, outcome: Outcome, more: JsonValue
) -> None:
    size = outcome_bytes(code, outcome)
    assert size >= ENTRY_BYTES + len(code.encode(errors="surrogatepass"))
    bigger = Outcome(outcome.status, (*outcome.results, more), outcome.detail)
    assert outcome_bytes(code, bigger) > size


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
    # "x" on 8 inputs: 8 x 3 + 7 x 2 + 2 = 40 bytes of JSON, + 1 of code + 256 = 297 bytes.
    cache, key = OutcomeCache(budget=1000), ("f", SQUARE_PLUS_3, False)
    cache.put(key, Outcome("ok", ("xx",) * 8, ""))
    cache.put(key, Outcome("ok", ("x",) * 8, ""))
    assert (cache.bytes, len(cache)) == (297, 1)
    assert cache.get(key) == Outcome("ok", ("x",) * 8, "")


def test_a_flood_of_large_distinct_outcomes_leaves_the_trainers_memory_bounded() -> None:
    # The review's completion, `def f(x): return 'B'*7900+'<n>'`, on 8 inputs: about 63 KB an
    # outcome, so 8,192 of them (the old cache's size) held about 520 MB. 2,048 of them (130
    # MB) into a cache of 1 MiB: its own count never passes its budget; the oldest go first.
    cache = OutcomeCache(budget=2**20)
    for n in range(2048):
        code = f"def f(x): return 'B'*7900+'{n}'"
        cache.put((code, SQUARE_PLUS_3, False), Outcome("ok", ("B" * 7900 + str(n),) * 8, ""))
        assert cache.bytes <= 2**20
    assert len(cache) == 2**20 // outcome_bytes(code, Outcome("ok", ("B" * 7904,) * 8, ""))
    assert cache.get((code, SQUARE_PLUS_3, False)) is not None  # the latest is kept
    assert cache.get(("def f(x): return 'B'*7900+'0'", SQUARE_PLUS_3, False)) is None
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
