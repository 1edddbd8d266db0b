"""mathrl: a test-first reference implementation of GRPO on a verifiable task.

The pure core (problems, answer parsing, reward, advantages, datums) sits
behind the `Backend` protocol; `run_grpo` drives it. See README.md.
"""

from mathrl.adapter import Adapter
from mathrl.backend import (
    Backend,
    BackendError,
    BackendUnreachable,
    Completion,
    CredentialsRejected,
    SampleParams,
    Sampler,
    Tokenizer,
    TrainResult,
    TransientBackendError,
)
from mathrl.config import Config, ConfigError
from mathrl.grpo import Datum, build_datum, group_advantages, is_constant_group
from mathrl.loop import RunResult, StepMetrics, run_grpo, run_grpo_async
from mathrl.math_task import (
    AdditionProblem,
    MathAdapter,
    heldout_problems,
    make_problems,
    parse_answer,
    problem_rng,
    reward,
)

__all__ = [
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
