"""Benchmark: what a tool call costs, on the real clock (not part of the test suite).

- the `python` tool of math-python (`mathrl.tasks.math_python.python_tool`), one call at a
  time: in a sandbox started for the call (fresh), and in sandboxes a worker pool started
  ahead of the calls (what a call costs once its sandbox is ready: `mathrl.tasks.code.sandbox`'s
  `Warm`), the code printing one number;
- the machinery around any call, with a tool that costs nothing (the README's calculator):
  reading the call from the turn (Hermes), checking its arguments and calling the tool
  (`Session.run`), the hand-over to a worker thread and back (`Workers.run`), and the chat
  template's tokens of the result (the fake's, and a Hugging Face one built offline).

Run: `python tests/bench/bench_tools.py [--calls N]`. It prints a markdown table; each row is
the median of N calls (default 40), after one call to warm up.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' folder

from mathrl.episodes import message_tokens
from mathrl.resolved import as_task
from mathrl.tasks.code.sandbox import WARM_SANDBOXES, warm_of
from mathrl.tasks.math_python import MathPython
from mathrl.tasks.math_python.python_tool import python_tool
from mathrl.tools import FORMATS
from mathrl.workers import Workers
from mathrl_fakes import ByteTokenizer

CODE = "print({k} * 7 + 1)"


def median_ms(fn: Callable[[int], Any], calls: int) -> float:
    fn(-1)  # the first call pays for what is built once
    times = []
    for k in range(calls):
        started = time.perf_counter()
        fn(k)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def python_fresh(calls: int) -> float:
    tool = python_tool(5.0, 1000)
    return median_ms(lambda k: tool(CODE.format(k=k)), calls)


def python_ahead(calls: int) -> float:
    """Each call in a sandbox the pool started ahead, all of them ready (set up, waiting) before
    the first call and none started during the calls: what a call costs once its sandbox is
    ready (as `bench_rewards.warm_cost` measures the code task's), in rounds of the pool's
    `WARM_SANDBOXES`."""
    tool = python_tool(5.0, 1000)

    async def round_of(pool: Workers, count: int) -> list[float]:
        await pool.run(lambda: tool("print(1)"))  # tells the pool which kind to start
        warm = warm_of(pool)
        assert warm is not None
        warm.size = count
        while warm.ready < count:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # their set-up done: each waits on its stdin
        warm.size = 0  # none started between the calls: the call's own cost
        times = []
        for k in range(count):
            taken = warm.taken
            started = time.perf_counter()
            await pool.run(functools.partial(tool, CODE.format(k=k)))
            times.append(time.perf_counter() - started)
            assert warm.taken == taken + 1, "the call found no sandbox ready"
        return times

    times: list[float] = []
    while len(times) < calls:
        with Workers(1) as pool:
            times += asyncio.run(round_of(pool, min(WARM_SANDBOXES, calls - len(times))))
    return statistics.median(times) * 1e3


def machinery(calls: int, tokenizer: Any) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_readme import block_after

    namespace: dict[str, Any] = {}
    exec(compile(block_after("`calculator.py`, on the bundled", "python"), "calculator", "exec"),
         namespace)  # fmt: skip
    task = as_task(namespace["Calculator"]())
    toolbox = task.toolbox
    assert toolbox is not None
    turn = FORMATS["hermes"].write([("calculate", {"expression": "247 - 2"})])
    session = toolbox.open(None)
    (call,) = toolbox.parse(turn)
    answered = session.run(call)

    async def handed(pool: Workers, k: int) -> Any:
        return await pool.run(lambda: session.run(call), 1, toolbox.seconds)

    with Workers(1) as pool:
        loop = asyncio.new_event_loop()
        try:
            pooled = median_ms(lambda k: loop.run_until_complete(handed(pool, k)), calls)
        finally:
            loop.close()
    return {
        "read the call (Hermes)": median_ms(lambda k: toolbox.parse(turn), calls),
        "check and call the tool (`Session.run`)": median_ms(lambda k: session.run(call), calls),
        "the same on a worker thread, and back": pooled,
        "the result's tokens (chat template)": median_ms(
            lambda k: message_tokens(tokenizer, task, [], toolbox.messages([answered])), calls
        ),
    }


def hf_tokenizer() -> Any:
    """Qwen3's tool template (as the tests write it) on a byte-level tokenizer: no download."""
    from doubles.chatml import byte_level_chatml
    from mathrl.service.hf_tokenizer import HFTokenizer
    from test_tools import QWEN3_TOOLS

    return HFTokenizer(byte_level_chatml(QWEN3_TOOLS))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=40, help="calls per row (the median)")
    calls = parser.parse_args(argv).calls
    MathPython()  # (its preflight is the checks': not timed)
    rows = [
        ("`python` tool, a sandbox started for the call", python_fresh(calls)),
        ("`python` tool, a sandbox started ahead", python_ahead(calls)),
    ]
    for name, ms in machinery(calls, ByteTokenizer()).items():
        rows.append((f"{name}, fake tokenizer" if "tokens" in name else name, ms))
    qwen3 = machinery(calls, hf_tokenizer())["the result's tokens (chat template)"]
    rows.append(("the result's tokens, Qwen3's template (transformers)", qwen3))
    print("| a tool call | median ms |\n| --- | ---: |")
    for name, ms in rows:
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
