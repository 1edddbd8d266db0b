"""Test doubles for mathrl: an in-memory backend that really learns.

`FakeBackend` implements `mathrl.backend.Backend` without a network. The
loop, the CLI (`--backend fake`) and the test suite all use it.
"""

from collections.abc import Iterable, Mapping
from typing import TypeVar

from mathrl.adapter import Adapter
from mathrl_fakes.fake_backend import CallLog, CallRecord, FakeBackend, FakeSampler
from mathrl_fakes.policy import CharTokenizer
from mathrl_fakes.recording import RecordingBackend, RecordingSampler, SampleCall

__all__ = [
    "CallLog",
    "CallRecord",
    "CharTokenizer",
    "FakeBackend",
    "FakeSampler",
    "RecordingBackend",
    "RecordingSampler",
    "SampleCall",
    "reference_table",
]

P = TypeVar("P")


def reference_table(adapter: Adapter[P], problems: Iterable[P]) -> Mapping[str, str]:
    """Prompt text -> reference completion, through the adapter's own methods."""
    return {adapter.make_prompt(p): adapter.reference_completion(p) for p in problems}
