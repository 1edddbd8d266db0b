"""The records of a run folder: what each line of metrics.jsonl and samples.jsonl holds.

For: `mathrl.cli.run_folder.RunFolder`, which writes them as the run goes.
This docstring is the reference for every field.

A step's record in metrics.jsonl (`step_record`):

    step                      the step, from 1
    accuracy                  as on the `Step` line: the task's `evaluate` over this
                              step's samples, at the sampling temperature
    mean_reward               the mean reward of the step's samples (partial credit counts)
    datums                    as on the `Step` line: completions trained on
    groups, groups_kept,      problems drawn (with fill_batch, up to `mathrl.config`'s
      groups_dropped          FILL_BATCH_CAP x batch); those whose rewards differed (trained
                              on); those whose rewards were all equal (trained on only with
                              kl_coef, for the KL penalty alone)
    sampled_tokens,           tokens sampled this step, and per completion
      mean_completion_tokens
    loss                      the loss summed over the step's datums; null when nothing trained
    backend_metrics           what the service reported (`loss:sum`; for ppo and cispo,
                              `clipped:frac`, the share of the model's tokens whose ratio
                              the clip bound, worked out from the learner's logprobs unless
                              the service reports it); with substeps, losses add up, clip
                              fractions are weighted by each minibatch's model tokens, and
                              the rest is averaged over the minibatches
    mean_abs_advantage        the mean |advantage| of the samples trained on
    kl                        with kl_coef: the mean over the model's tokens of every group
                              of sampler minus base-model logprob, an estimate of
                              KL(policy || base)
    approx_kl                 how far the learner's logprobs of the model's tokens trained on
                              were from the sampler's: the mean of (r - 1) - log r, log r the
                              learner's minus the sampler's logprob (CleanRL's approx_kl); 0
                              on-policy at temperature 1; null when nothing trained or the
                              backend gave no learner logprobs
    entropy                   the sampler's entropy per token, estimated from every token the
                              step sampled: the mean of -(the sampler's logprob)
    seconds, sampling_seconds, wall time since the previous step ended; of this step's
      training_seconds        sampling; from submitting its training to its result
    sampler_path              the checkpoint this step's samples were drawn from
    reward_parts              each named reward part's mean over the step's samples
    truncated                 samples that ran into the token limit
    metric/NAME               only for a task that reports metrics beside its reward
                              (`Adapter`'s `metrics`): metric NAME's mean over the step's
                              samples that report it

An evaluation's record (`eval_record`) has `"eval": true`, `step` (0: before
training), `accuracy`, `correct`, `problems`, `mean_reward`, `sampler_path`,
`seconds`, `reward_parts` and any `metric/NAME`: the greedy completions'. An
evaluation that also drew samples (`eval_k`) adds `samples` (drawn per problem at the
sampling temperature), `pass@K` for each K asked (the unbiased estimate of
Chen et al. 2021, averaged over the problems), `maj@K` for each K where the
task names its answers (`final_answer`), and `sampled_mean_reward`.

eval.jsonl (written by `python -m mathrl eval` into the run folder it
evaluates, one line per evaluation, `eval_file_record`) has the same fields,
less `eval` (`sampler_path` is the weights evaluated, `step` the step they
are from), plus `task`, `temperature` (of the samples; the greedy
completions' is 0), `seed` (of the held-out problems and of the requests)
and `at` (when the evaluation ended, UTC).

A samples.jsonl line (`sample_record`) is one group of a step: `step`,
`problem` (its place in the batch), `prompt` (text, or the conversation) and
`completions`, each with its `text`, how it `ended` (`stop`, `end_of_turn`,
`end_of_sequence`, `length`) and at which `stop`, its `reward` and reward
`parts`, its `advantage`, and whether it was `trained` on, and, for a task
that reports metrics, its `metrics` (names to numbers). For an episode of
several turns, `text` is its last turn and `earlier` lists the turns before
it, each the `model`'s text and the `reply` it got, and, for a turn that
called tools, its `calls`: each one's `name`, `arguments`, `result` (the
text the model got back) and whether it `failed` (an error); an episode's
metrics then hold `tool_calls` and `failed_tool_calls`. Texts are cut at
SAMPLE_TEXT characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from mathrl.report import EvalMetrics, Sample, SampleGroup, StepMetrics
from mathrl.tools import ToolCall

SAMPLE_TEXT = 2_000
"""Characters of a prompt or completion kept in samples.jsonl."""
METRIC = "metric/"
"""What starts the key of each of the task's metrics in a record (`metric/NAME`)."""


def step_record(m: StepMetrics) -> dict[str, Any]:
    """The metrics.jsonl record of one step (the module docstring says each field)."""
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
        "approx_kl": m.approx_kl,
        "entropy": m.entropy,
        **metric_keys(m.metrics),
    }


def metric_keys(metrics: Mapping[str, float]) -> dict[str, float]:
    """A record's keys for the task's metrics: `metric/NAME` each (none: no keys)."""
    return {f"{METRIC}{name}": value for name, value in metrics.items()}


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
                **({"earlier": _earlier(s)} if s.earlier else {}),
                **({"metrics": dict(s.metrics)} if s.metrics else {}),
            }
            for s in group.samples
        ],
    }


def _earlier(sample: Sample) -> list[dict[str, Any]]:
    """An episode's turns before its last: each the model's text and the reply, and a turn
    that called tools its `calls`, each with its `name`, `arguments`, `result` and whether
    it `failed`."""
    calls = sample.calls or ((),) * len(sample.earlier)
    return [
        {
            "model": _cut(model),
            "reply": _cut(reply),
            **({"calls": [_call(c) for c in made]} if made else {}),
        }
        for (model, reply), made in zip(sample.earlier, calls, strict=True)
    ]


def _call(call: ToolCall) -> dict[str, Any]:
    arguments = {k: _cut(v) if isinstance(v, str) else v for k, v in call.arguments.items()}
    return {"name": call.name, "arguments": arguments, "result": _cut(call.result),
            "failed": call.failed}  # fmt: skip


def _cut(text: str) -> str:
    return (
        text if len(text) <= SAMPLE_TEXT else f"{text[:SAMPLE_TEXT]}... ({len(text):,} characters)"
    )


def eval_record(m: EvalMetrics) -> dict[str, Any]:
    """The metrics.jsonl record of one held-out evaluation."""
    return {"eval": True, **metrics_of(m)}


def metrics_of(m: EvalMetrics) -> dict[str, Any]:
    """An evaluation's fields as records hold them: pass@k and maj@k one key each, and only
    when it drew samples; each of the task's metrics one key (`metric/NAME`)."""
    drawn = ("samples", "pass_at_k", "majority_at_k", "sampled_mean_reward")
    greedy = {
        **{name: value for name, value in asdict(m).items() if name not in (*drawn, "metrics")},
        **metric_keys(m.metrics),
    }
    if not m.samples:
        return greedy
    return {
        **greedy,
        "samples": m.samples,
        **{f"pass@{k}": value for k, value in m.pass_at_k.items()},
        **{f"maj@{k}": value for k, value in m.majority_at_k.items()},
        "sampled_mean_reward": m.sampled_mean_reward,
    }


def eval_file_record(
    m: EvalMetrics, task: str, temperature: float, seed: int, at: str
) -> dict[str, Any]:
    """The eval.jsonl record of one `python -m mathrl eval`."""
    return {"task": task, **metrics_of(m), "temperature": temperature, "seed": seed, "at": at}
