"""Shared fixtures: a FakeBackend factory writing checkpoints under tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mathrl.math_task import MathAdapter, all_problems
from mathrl_fakes import FakeBackend, reference_table


@cache
def math_references() -> Mapping[str, str]:
    """Prompt -> reference completion for every addition problem (built once)."""
    return reference_table(MathAdapter(), all_problems())


@pytest.fixture
def fake_backend_factory(tmp_path: Path) -> Callable[..., FakeBackend]:
    counter = iter(range(1_000_000))

    def make(**kwargs: Any) -> FakeBackend:
        kwargs.setdefault("checkpoint_dir", tmp_path / f"ckpt{next(counter)}")
        return FakeBackend(math_references(), **kwargs)

    return make
