"""The public surface of `mathrl`, pinned."""

from __future__ import annotations

import mathrl


def test_all_is_pinned() -> None:
    assert sorted(mathrl.__all__) == [
        "Adapter",
        "AdditionProblem",
        "Backend",
        "BackendError",
        "BackendUnreachable",
        "Completion",
        "Config",
        "ConfigError",
        "CredentialsRejected",
        "Datum",
        "MathAdapter",
        "RunResult",
        "SampleParams",
        "Sampler",
        "StepMetrics",
        "Tokenizer",
        "TrainResult",
        "TransientBackendError",
        "build_datum",
        "group_advantages",
        "heldout_problems",
        "is_constant_group",
        "make_problems",
        "parse_answer",
        "problem_rng",
        "reward",
        "run_grpo",
        "run_grpo_async",
    ]
    for name in mathrl.__all__:
        assert getattr(mathrl, name) is not None


def test_the_pure_core_is_exported_under_its_issue_names() -> None:
    assert mathrl.parse_answer(" 42") == 42
    assert mathrl.group_advantages([1.0, 0.0]) == [0.5, -0.5]
