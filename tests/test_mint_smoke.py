"""One real GRPO step, and the Backend contract, against the MinT API.

Runs only on request: `nox -s smoke` (or `pytest -m smoke`), with MINT_API_KEY
set (MINT_BASE_URL and MINT_CONNECT_TIMEOUT are honoured too). An exported key
alone never runs it: `nox -s tests` deselects it. Each test creates a LoRA
training client on the service, so it costs a little real compute.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from mathrl.cli.settings import api_key
from mathrl.config import Config, TrainConfig
from mathrl.loop import run_grpo_async
from mathrl.report import RunResult
from mathrl.tasks.addition import MathAdapter
from mathrl.testing import check_backend

pytestmark = [
    pytest.mark.smoke,
    # tinker 0.22.0 leaves the sockets of its one-off connection pools unclosed, and
    # Python reports each as a ResourceWarning (seen against a loopback server).
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture(autouse=True)
def key() -> str:
    """The smoke tests were asked for: a missing or malformed key is a failure, not a skip."""
    return api_key(os.environ)


def smoke_config() -> Config:
    # The defaults' MINT_SETUP_TIMEOUT (600 s) covers a cold service's LoRA creation.
    return Config(train=TrainConfig(steps=1, batch=2, group=2))


def endpoint() -> Any:
    """The service and key this machine's environment names, as the command line reads them."""
    from mathrl.cli.settings import api_key, base_url
    from mathrl.service.mint_backend import Endpoint

    return Endpoint(api_key(os.environ), base_url(os.environ))


def test_one_real_step() -> None:
    from mathrl.service.mint_backend import open_backend

    config = smoke_config()

    async def step() -> RunResult:
        backend = await open_backend(config, endpoint())
        assert backend.tokenizer.vocab_size > 0
        return await run_grpo_async(backend, MathAdapter(), config.train)

    result = asyncio.run(step())
    assert [m.step for m in result.steps] == [1]
    assert result.saved_path


def test_the_real_backend_passes_the_contract() -> None:
    from mathrl.service.mint_backend import open_backend

    check_backend(lambda: asyncio.run(open_backend(smoke_config(), endpoint())))
