"""The public surface of `mathrl`, pinned."""

from __future__ import annotations

import mathrl


def test_all_is_pinned() -> None:
    assert sorted(mathrl.__all__) == [
        "Adapter",
        "AdapterError",
        "AdditionProblem",
        "Backend",
        "BackendError",
        "BackendUnreachable",
        "Checkpoint",
        "Completion",
        "Config",
        "ConfigError",
        "CredentialsRejected",
        "Datum",
        "EvalMetrics",
        "Feedback",
        "MathAdapter",
        "Observer",
        "Response",
        "Resume",
        "RetriesExhausted",
        "RetryPolicy",
        "RetryingBackend",
        "RunResult",
        "SampleParams",
        "Sampler",
        "StepMetrics",
        "StepOutcome",
        "Task",
        "Tokenizer",
        "TrainConfig",
        "TrainResult",
        "TransientBackendError",
        "Workers",
        "__version__",
        "as_task",
        "build_datum",
        "group_advantages",
        "grpo_step",
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


def test_the_fakes_and_the_conformance_kit_are_public_too() -> None:
    import mathrl.testing
    import mathrl_fakes

    assert sorted(mathrl_fakes.__all__) == [
        "ByteTokenizer", "CallLog", "CallRecord", "FakeBackend", "FakeModel", "FakeSampler",
        "PromptKey",
        "RecordingBackend", "RecordingSampler", "Reference", "SampleCall", "references_for",
        "run_problems",
    ]  # fmt: skip
    assert callable(mathrl.testing.check_adapter)


def test_the_pure_core_is_exported_under_its_issue_names() -> None:
    assert mathrl.parse_answer(" 42") == 42
    assert mathrl.group_advantages([1.0, 0.0]) == [0.5, -0.5]
