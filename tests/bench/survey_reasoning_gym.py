"""Every reasoning-gym dataset through the reasoning-gym task: which can be used, and why not.

    python tests/bench/survey_reasoning_gym.py [--jobs 2] [--timeout 900] [--rows FILE] [NAME ...]

Not part of any test suite: it takes most of an hour on two cores. Each dataset, with
its default settings, runs in processes of its own with a time limit:

1. refused by the task (`settings.REFUSED`), or built (`ReasoningGym(dataset=NAME)`);
2. drawn: 8 training and 32 held-out problems, timed, and the same draws digested in
   two more processes with other PYTHONHASHSEEDs: the problems must be the same;
3. `check_adapter` without learning;
4. the slowest score of a hostile answer no longer than the task reads
   (`answers.answer_limit`): deep brackets, long numbers, repeated references; each
   runs in the task's scoring process, so at most `task.SCORE_SECONDS` (then 0);
5. for those that pass, a 20-step run on the fake (batch 8, group 4, greedy held-out
   evaluation of 32 problems at steps 0, 10 and 20): training accuracy at steps 1-5
   against 16-20 (check_adapter's learning rule: +10 points), held-out accuracy at
   step 0 against 20.

It prints one line per dataset as it finishes, then a Markdown table of them all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

LEARNS_BY = 0.10
"""check_adapter's rule: training accuracy (steps 16-20 against 1-5) rises by this much."""
SLOW_DRAW_SECONDS = 30.0
"""Drawing 8 + 32 problems slower than this is reported as slow."""
SLOW_SCORE_SECONDS = 1.0
"""A score of one hostile answer slower than this is reported as slow."""
MARK = "survey-row: "
"""Starts the child's result line: some generators print on stdout too."""


def hostile_answers(reference: str | None, limit: int) -> list[tuple[str, str]]:
    """(what, text): answers no longer than `limit` that a scorer could choke on."""
    ref = reference or "x"
    return [
        ("9" * limit, "a long number"),
        ("(" * limit, "open parentheses"),
        ("[" * (limit // 2) + "]" * (limit // 2), "nested brackets"),
        ("{" * limit, "open braces"),
        ("-" * limit, "dashes"),
        ("1," * (limit // 2), "a long list"),
        ("0." + "9" * (limit - 2), "a long decimal"),
        ("a " * (limit // 2), "many words"),
        ("\n".join([ref] * max(1, limit // (len(ref) + 1))), "the reference repeated"),
        ("R2 U' F " * (limit // 8), "many moves"),
        ("1e999999", "a huge exponent"),
    ]


def draws_digest(task: Any) -> str:
    """Digests of a few draws' questions, then answers: equal in every process if pure."""
    items = [*task.build_dataset(0, 1, 8), *task.build_dataset(1, 2, 8)]
    items += task.heldout_dataset(0, 8)
    questions = json.dumps([i.question for i in items]).encode()
    answers = json.dumps([i.answer for i in items]).encode()
    return " ".join(hashlib.blake2b(t, digest_size=8).hexdigest() for t in (questions, answers))


def survey_one(name: str, learn: bool) -> dict[str, Any]:
    """What happens to dataset `name` at each stage (see the module docstring)."""
    from mathrl.adapter import OptionError
    from mathrl.tasks.reasoning_gym import ReasoningGym
    from mathrl.tasks.reasoning_gym.answers import answer_limit, in_asked_form
    from mathrl.testing import check_adapter

    out: dict[str, Any] = {"name": name}
    try:
        task = ReasoningGym(dataset=name)
    except OptionError as exc:
        out["refused"] = str(exc)
        return out
    start = time.perf_counter()
    try:
        train = task.build_dataset(0, 1, 8)
        held = task.heldout_dataset(0, 32)
    except Exception as exc:
        out["draw_error"] = f"{type(exc).__name__}: {exc}"[:200]
        return out
    out["draw_seconds"] = round(time.perf_counter() - start, 2)
    out["digest"] = draws_digest(task)
    references = [task.reference_completion(p) for p in [*train, *held]]
    out["no_answer"] = sum(p.answer is None for p in [*train, *held])
    out["longest_reference"] = max(len(r.encode()) for r in references)
    out["max_tokens"] = task.max_tokens
    worst = 0.0
    for problem in train[:3]:
        for text, _ in hostile_answers(problem.answer, answer_limit(problem.answer)):
            began = time.perf_counter()
            task.compute_reward(in_asked_form(text), problem)
            worst = max(worst, time.perf_counter() - began)
    out["worst_score_ms"] = round(worst * 1000, 1)
    try:
        check_adapter(task)
        out["check"] = "ok"
    except AssertionError as exc:
        lines = str(exc).splitlines()
        out["check"] = f"{len(lines) - 1} violation(s): " + " | ".join(lines[1:3])[:400]
    if learn and out["check"] == "ok":
        out.update(learning(task))
    return out


def learning(task: Any) -> dict[str, Any]:
    """A 20-step run on the fake: training and held-out accuracy, before and after."""
    from mathrl.config import TrainConfig
    from mathrl.loop import run_grpo
    from mathrl.rollout import run_problems
    from mathrl_fakes import FakeBackend

    config = TrainConfig(steps=20, batch=8, group=4, eval_every=10, eval_problems=32)
    with tempfile.TemporaryDirectory(prefix="survey-rg-") as folder:
        backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=Path(folder))
        result = run_grpo(backend, task, config)
    accuracy = [m.accuracy for m in result.steps]
    evals = {e.step: e.accuracy for e in result.evaluations}
    return {
        "train": (round(sum(accuracy[:5]) / 5, 3), round(sum(accuracy[-5:]) / 5, 3)),
        "heldout": (evals.get(0), evals.get(20)),
    }


def verdict(row: dict[str, Any]) -> str:
    """One phrase: usable, or why not."""
    return str(_verdict(row))


def _verdict(row: dict[str, Any]) -> Any:
    if "refused" in row:
        why = row["refused"].split("cannot be used: ", 1)[-1].removesuffix("; choose another one")
        return f"refused: {why}"
    if "timeout" in row:
        return f"too slow: no result within {row['timeout']} s"
    if "crash" in row:
        return "crashed: " + row["crash"]
    if "draw_error" in row:
        return "cannot draw: " + row["draw_error"]
    digests = [d.split() for d in row.get("digests", [])]
    if len({d[0] for d in digests}) > 1:
        return "not deterministic: other questions in another process (PYTHONHASHSEED)"
    if row["check"] != "ok" and row.get("no_answer"):
        return "no reference answer (scored by simulation): the fake cannot learn it"
    if row["check"] != "ok":
        return "fails check_adapter: " + row["check"]
    if row["longest_reference"] + 1 > row["max_tokens"]:
        return f"references of up to {row['longest_reference']} bytes: past max_tokens on the fake"
    if row.get("draw_seconds", 0) > SLOW_DRAW_SECONDS or row["worst_score_ms"] > (
        SLOW_SCORE_SECONDS * 1000
    ):
        return "slow"
    if "train" not in row:
        return "passes check_adapter (learning not run)"
    varies = len({tuple(d[1:]) for d in digests}) > 1
    if varies and row["train"][1] >= row["train"][0] + LEARNS_BY:
        return "usable; its reference answers (one of several right ones) vary by process"
    before, after = row["train"]
    if after < before + LEARNS_BY:
        return f"does not learn on the fake: training accuracy {before:.0%} -> {after:.0%}"
    return "usable"


def run_child(args: list[str], seed: str, timeout: float) -> tuple[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, __file__, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout, done.stderr


def survey(name: str, timeout: float, learn: bool) -> dict[str, Any]:
    """Dataset `name` in three processes: the survey, and two more draws to compare."""
    try:
        stdout, stderr = run_child(["--one", name] + (["--learn"] if learn else []), "3", timeout)
    except subprocess.TimeoutExpired:
        return {"name": name, "timeout": timeout}
    found = [line for line in stdout.splitlines() if line.startswith(MARK)]
    if not found:
        return {"name": name, "crash": (stderr.strip().splitlines() or ["no output"])[-1][:200]}
    row: dict[str, Any] = json.loads(found[-1].removeprefix(MARK))
    if "digest" in row:
        row["digests"] = [row["digest"]]
        for seed in ("1", "2"):
            try:
                digest, _ = run_child(["--digest", name], seed, timeout)
            except subprocess.TimeoutExpired:
                digest = "timeout"
            row["digests"].append((digest.strip().splitlines() or ["none"])[-1])
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = "dataset | verdict | draw s | longest ref (bytes) | worst score ms | train | held-out"
    lines = [f"| {head} |", "|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: r["name"]):
        train = "{:.0%} → {:.0%}".format(*row["train"]) if "train" in row else ""
        held = row.get("heldout")
        shown = f"{held[0]:.0%} → {held[1]:.0%}" if held and None not in held else ""
        lines.append(
            f"| {row['name']} | {verdict(row)} | {row.get('draw_seconds', '')} | "
            f"{row.get('longest_reference', '')} | {row.get('worst_score_ms', '')} | "
            f"{train} | {shown} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="datasets (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--no-learn", action="store_true", help="skip the runs on the fake")
    parser.add_argument("--rows", help="a JSONL file of finished rows: read, skipped, appended")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--digest", help=argparse.SUPPRESS)
    parser.add_argument("--learn", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(MARK + json.dumps(survey_one(args.one, args.learn)))
        return
    if args.digest:
        from mathrl.tasks.reasoning_gym import ReasoningGym

        print(draws_digest(ReasoningGym(dataset=args.digest)))
        return
    from reasoning_gym.factory import DATASETS

    rows_file = Path(args.rows) if args.rows else None
    rows: list[dict[str, Any]] = []
    if rows_file is not None and rows_file.exists():
        rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line]
    done = {row["name"] for row in rows}
    names = [n for n in args.names or sorted(DATASETS) if n not in done]
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(lambda n: survey(n, args.timeout, not args.no_learn), names):
            rows.append(row)
            print(f"{row['name']}: {verdict(row)}", flush=True)
            if rows_file is not None:
                with rows_file.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    print()
    print(table(rows))
    counts: dict[str, int] = {}
    for row in rows:
        kind = verdict(row).split(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    print()
    print(", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items())))


if __name__ == "__main__":
    main()
