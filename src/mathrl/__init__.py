"""mathrl: a test-first reference implementation of GRPO on verifiable tasks.

The pure core (problems, answer parsing, reward, advantages, datums) sits
behind the `Backend` protocol; `run_grpo` drives it for any task that meets
the `Adapter` contract, which `mathrl.testing.check_adapter` checks. See
README.md.

A run from Python, on the fake backend (`Subtraction` is the README's task):

    from mathrl import TrainConfig, run_grpo, run_problems
    from mathrl_fakes import FakeBackend
    from subtraction import Subtraction

    config = TrainConfig(steps=20, eval_every=5)
    # The fake is told every problem the run draws, and learns their references.
    backend = FakeBackend.for_run(Subtraction(), run_problems(Subtraction(), config))
    result = run_grpo(backend, Subtraction(), config)
    print([m.accuracy for m in result.steps], result.saved_path)

The fake's checkpoints go to `mathrl-fake` in the temp folder (`checkpoint_dir=`
puts them elsewhere). Pass an `Observer` (`mathrl.report`) to see each step,
evaluation and checkpoint as it happens, or `RunFolder.for_python(path, task,
config)` (`mathrl.cli.run_folder`) to keep a run folder that `plot` draws. On
MinT, `mathrl.service.mint_backend` shows the same in asyncio.
"""

# First: on a Python older than 3.11, one line saying so, before anything else fails.
from mathrl.python_version import check_python  # noqa: F401

# isort: split

from importlib.metadata import version

from mathrl.adapter import Adapter, AdapterError, Feedback, Response
from mathrl.backend import (
    Backend,
    BackendError,
    BackendUnreachable,
    Completion,
    CredentialsRejected,
    Datum,
    SampleParams,
    Sampler,
    Tokenizer,
    TrainResult,
    TransientBackendError,
    WrongEndpoint,
)
from mathrl.checkpoints import Resume
from mathrl.config import Config, ConfigError, TrainConfig
from mathrl.grpo import build_datum, group_advantages, is_constant_group
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.pairwise import win_rates
from mathrl.report import Checkpoint, EvalMetrics, Observer, RunResult, StepMetrics
from mathrl.resolved import Task, as_task
from mathrl.rollout import RunProblems, run_problems
from mathrl.service.recovery import RetryingBackend
from mathrl.service.retry import RetriesExhausted, RetryPolicy
from mathrl.step import StepOutcome, grpo_step
from mathrl.tasks.addition import (
    AdditionProblem,
    MathAdapter,
    heldout_problems,
    make_problems,
    parse_answer,
    problem_rng,
    reward,
)
from mathrl.workers import Workers

__version__ = version("mathrl")

__all__ = [
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
