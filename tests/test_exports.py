"""The public surface of `mathrl`, pinned."""

from __future__ import annotations

import ast
from pathlib import Path

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
        "RunProblems",
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
        "WrongEndpoint",
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
        "run_problems",
        "win_rates",
    ]
    for name in mathrl.__all__:
        assert getattr(mathrl, name) is not None


def test_the_fakes_and_the_conformance_kit_are_public_too() -> None:
    import mathrl.testing
    import mathrl_fakes

    assert sorted(mathrl_fakes.__all__) == [
        "ByteTokenizer", "CallLog", "CallRecord", "FakeBackend", "FakeModel", "FakeSampler",
        "PromptKey",
        "RecordingBackend", "RecordingSampler", "Reference", "RunProblems", "SampleCall",
        "references_for",
    ]  # fmt: skip
    assert sorted(mathrl.testing.__all__) == [
        "ADVERSARIAL", "BrokenRule", "LearnsOn", "WRONG", "check_adapter", "check_backend",
        "random_texts",
    ]  # fmt: skip


CONTRACT = {
    "mathrl.adapter", "mathrl.backend", "mathrl.losses", "mathrl.problem_keys", "mathrl.resolved"
}  # fmt: skip
"""What the fake may know of mathrl: the task and backend contracts and the types they use
(`mathrl.resolved` fills in the task contract's documented defaults; `mathrl.losses` is the
loss a backend computes; `mathrl.problem_keys` says which problems are one, for problems that
share a prompt)."""


def test_the_fake_knows_only_the_contract() -> None:
    # It is told what it needs about a run (`FakeBackend.for_run(task, run_problems(...))`);
    # it never imports how the loop draws, samples or scores.
    fakes = Path(mathrl_fakes_folder())
    imported = set()
    for path in fakes.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert {m for m in imported if m.split(".")[0] == "mathrl"} <= CONTRACT
    assert "mathrl_fakes.references" in imported  # the scan reads the package's own imports


def mathrl_fakes_folder() -> str:
    import mathrl_fakes

    return str(Path(mathrl_fakes.__file__).parent)


def test_the_pure_core_is_exported_under_its_issue_names() -> None:
    assert mathrl.parse_answer(" 42") == 42
    assert mathrl.group_advantages([1.0, 0.0]) == [0.5, -0.5]
