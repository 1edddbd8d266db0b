"""The records of a run folder: what each line of metrics.jsonl and samples.jsonl holds.

For: `mathrl.cli.run_folder.RunFolder`, which writes them as the run goes.
The README's "The run folder" describes each field.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from mathrl.report import EvalMetrics, SampleGroup, StepMetrics

SAMPLE_TEXT = 2_000
"""Characters of a prompt or completion kept in samples.jsonl."""


def step_record(m: StepMetrics) -> dict[str, Any]:
    """The metrics.jsonl record of one step (see the README for each field)."""
    return {
        "step": m.step,
        "accuracy": m.accuracy,
        "mean_reward": m.mean_reward,
        "datums": m.datums,
        "groups": m.groups,
        "groups_kept": m.groups_kept,
        "groups_dropped": m.constant_groups,
        "sampled_tokens": m.sampled_tokens,
        "mean_completion_tokens": m.mean_completion_tokens,
        "loss": m.loss,
        "backend_metrics": dict(m.backend_metrics),
        "seconds": m.seconds,
        "sampling_seconds": m.sampling_seconds,
        "training_seconds": m.training_seconds,
        "sampler_path": m.sampler_path,
        "reward_parts": dict(m.reward_parts),
        "truncated": m.truncated,
        "mean_abs_advantage": m.mean_abs_advantage,
        "kl": m.kl,
    }


def sample_record(group: SampleGroup) -> dict[str, Any]:
    """The samples.jsonl record of one group (texts cut at SAMPLE_TEXT characters)."""
    prompt = group.prompt
    return {
        "step": group.step,
        "problem": group.problem,
        "prompt": _cut(prompt)
        if isinstance(prompt, str)
        else [{**m, "content": _cut(m.get("content", ""))} for m in prompt],
        "completions": [
            {
                "text": _cut(s.text),
                "ended": s.ended,
                "stop": s.stop,
                "reward": s.reward,
                "parts": dict(s.parts),
                "advantage": s.advantage,
                "trained": s.trained,
                **(
                    {"earlier": [{"model": _cut(m), "reply": _cut(r)} for m, r in s.earlier]}
                    if s.earlier
                    else {}
                ),
            }
            for s in group.samples
        ],
    }


def _cut(text: str) -> str:
    return (
        text if len(text) <= SAMPLE_TEXT else f"{text[:SAMPLE_TEXT]}... ({len(text):,} characters)"
    )


def eval_record(m: EvalMetrics) -> dict[str, Any]:
    """The metrics.jsonl record of one held-out evaluation."""
    return {"eval": True, **asdict(m)}
