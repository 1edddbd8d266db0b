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
        "Policy", "PromptKey",
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


def imports_of(path: Path, *, top_level_only: bool = False) -> set[str]:
    """The modules a source file imports (`from x import y` as x), at its top level or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    imported: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    return imported


def below(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_core_imports_no_task_and_no_command_line() -> None:
    # cli -> core <- tasks: the command line resolves task names (`mathrl.tasks.BUILT_IN`), and
    # no module directly in src/mathrl/ imports a task, anywhere in it. `__init__.py`, the
    # package's face, re-exports the addition task; `__main__.py` is the command line's door;
    # `plain.py`'s command (its `main`) loads a task as the command line does, inside the
    # function, as `python -m mathrl.plain` runs it.
    core = sorted(Path(mathrl.__file__).parent.glob("*.py"))
    assert len(core) > 20
    for path in core:
        if path.name in ("__init__.py", "__main__.py"):
            continue
        anywhere = imports_of(path)
        assert not {m for m in anywhere if below(m, "mathrl.tasks")}, path.name
        at_top = imports_of(path, top_level_only=True)
        assert not {m for m in at_top if below(m, "mathrl.cli")}, path.name
    assert "mathrl.tasks.addition" in imports_of(Path(mathrl.__file__))  # the scan reads imports
