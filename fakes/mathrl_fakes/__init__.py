"""Test doubles for mathrl: an in-memory backend that really learns.

`FakeBackend` implements `mathrl.backend.Backend` without a network: the
contract alone (calls recorded, misuse refused, order, faults, checkpoint
files), serving a `Policy`. `FakeModel` (`mathrl_fakes.model`) is the policy
that learns, with no I/O: it knows the task through the Adapter contract
alone, and a run through what it is told, the problems the run draws.
`FakeBackend.for_run(task, mathrl.run_problems(task, config))` pairs them for
any task. The loop, the CLI (its fake backend) and the test suite all use it.
"""

from mathrl_fakes.fake_backend import FakeBackend, Policy
from mathrl_fakes.model import FakeModel
from mathrl_fakes.policy import ByteTokenizer
from mathrl_fakes.recording import RecordingBackend, RecordingSampler, SampleCall
from mathrl_fakes.references import PromptKey, Reference, RunProblems, references_for
from mathrl_fakes.sampler import FakeSampler
from mathrl_fakes.service import CallLog, CallRecord

__all__ = [
    "ByteTokenizer",
    "CallLog",
    "CallRecord",
    "FakeBackend",
    "FakeModel",
    "FakeSampler",
    "Policy",
    "PromptKey",
    "RecordingBackend",
    "RecordingSampler",
    "Reference",
    "RunProblems",
    "SampleCall",
    "references_for",
]
