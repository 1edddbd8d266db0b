"""A minute of outage in the middle of a run through the real SDK: survived, same stdout.

Each test runs `python -m mathrl` in this process (`run_main`) on the mint
backend: the real `tinker.ServiceClient` (its retries, futures, heartbeats and
telemetry) over real httpx HTTP, against `doubles.fake_mint_http.FakeMintHTTP` on
127.0.0.1. Only the SDK's tokenizer download is replaced, by the fake's
tokenizer. First the run without faults, then the same run with the service
down for 60 s from step 2's forward_backward on (the state was saved at step 0
only, so a restore has to replay step 1): its stdout must be the same, byte
for byte.

- "503": every request is answered HTTP 503 for 60 s. At the default settings
  the SDK waits that out by itself (HTTP retries, then its own five-minute
  `execute_with_retries`), so mathrl is never told, and writes no retry line.
- "silent": every request is taken and never answered for 60 s. At the
  defaults the SDK waits that out too. With `--call-timeout 20` mathrl's own
  deadline fires first, so that case runs mathrl's recovery: it restores the
  step-0 state, replays step 1 and retries step 2, saying so on stderr.

Everything else is at its default, `--retry-delay` and the 600 s retry window
included. Each test takes a little over a minute: the outage, plus a few
seconds of runs.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tinker.lib.internal_client_holder import InternalClientHolder
from tinker.lib.public_interfaces import training_client

from cli_process import Result, run_main
from conftest import math_references
from doubles.fake_mint import FakeHFTokenizer
from doubles.fake_mint_http import FakeMintHTTP, OutageMode

pytestmark = [
    pytest.mark.slow,
    # tinker 0.22.0 drops the connection pool it fetches client/config with
    # (InternalClientHolder._fetch_client_config) without closing it, so the
    # garbage collector closes that connection, and asyncio and the socket
    # each report it as a ResourceWarning, whenever the collector runs.
    # `end_sessions` collects it before the test ends, and closes everything
    # of the SDK's it can reach properly.
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
]

KEY = "sk-test-SECRET123"
OUTAGE = 60.0
HANG_SECONDS = 600  # a run takes seconds, the one with the outage a little over a minute
RUN = ("--steps", "4", "--batch", "4", "--group", "4")
CASES: dict[str, tuple[OutageMode, tuple[str, ...]]] = {
    "503": ("503", ()),
    "silent": ("silent", ()),
    # mathrl's deadline (600 s by default) must fire within the silence for its
    # own recovery to run; at the defaults the SDK waits a silent minute out itself.
    "silent, --call-timeout 20": ("silent", ("--call-timeout", "20")),
}


def end_sessions(url: str) -> None:
    """End the SDK's sessions with `url` and close their connections, then collect garbage.

    A run leaves its ServiceClient behind: the heartbeat, telemetry and JWT
    refresh tasks on the SDK's event loop keep it alive, talking to the
    server, and tinker has no call that closes its connections. Left alone,
    they would be collected unclosed during some later test.
    """
    holders = [o for o in gc.get_objects() if isinstance(o, InternalClientHolder)]
    for holder in holders:
        if holder._constructor_kwargs.get("base_url") == url:
            asyncio.run_coroutine_threadsafe(_end(holder), holder.get_loop()).result(timeout=30)
    gc.collect()  # under this module's filter: the SDK's unclosed client-config pools


async def _end(holder: Any) -> None:  # Any: these are tinker's internals, mostly unannotated
    """On the SDK's loop: `holder.close()`, waited for, and its connections closed."""
    await holder._async_cleanup()  # cancels the heartbeat
    for task in (getattr(holder._telemetry, "_task", None),
                 getattr(holder._default_auth, "_refresh_task", None)):  # fmt: skip
        if task is not None:
            task.cancel()
    for pool in holder._client_pools.values():
        for client in pool._clients:
            await client.close()
    jwt_pool = getattr(holder._default_auth, "_aclient_fn", None)  # one client: the one it used
    if jwt_pool is not None:
        with jwt_pool() as client:
            await client.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeMintHTTP]:
    server = FakeMintHTTP(math_references(), tmp_path_factory.mktemp("mint"))
    yield server
    end_sessions(server.url)
    server.close()


@pytest.fixture(autouse=True)
def offline_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK loads the fake's tokenizer instead of downloading the base model's."""
    monkeypatch.setattr(
        training_client, "_load_tokenizer_from_model_info", lambda *_: FakeHFTokenizer()
    )


def train(folder: Path, service: FakeMintHTTP, settings: tuple[str, ...]) -> tuple[Result, float]:
    """`python -m mathrl` in `folder` against `service`, and how many seconds it took.

    A run that hangs (it never has, but the SDK's threads are not ours) ends the test
    process after HANG_SECONDS with every thread's traceback, rather than holding CI.
    """
    folder.mkdir()
    start = time.monotonic()
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        done = run_main(folder, *RUN, *settings, MINT_API_KEY=KEY, MINT_BASE_URL=service.url)
    finally:
        faulthandler.cancel_dump_traceback_later()
    took = time.monotonic() - start
    end_sessions(service.url)
    return done, took


@pytest.mark.parametrize("case", CASES)
def test_a_minute_of_outage_mid_run_is_survived_with_the_same_stdout(
    tmp_path: Path, service: FakeMintHTTP, case: str
) -> None:
    mode, settings = CASES[case]
    calm, _ = train(tmp_path / "calm", service, settings)
    assert calm.returncode == 0, calm.stderr
    assert calm.stdout.count("Step ") == 4

    outage = service.outage(mode, OUTAGE, at_forward_backward=2)
    since = time.monotonic()
    stormy, took = train(tmp_path / "outage", service, settings)

    assert stormy.returncode == 0, stormy.stderr
    assert stormy.stdout == calm.stdout
    assert "mathrl: error" not in stormy.stderr
    assert KEY not in stormy.stderr
    # The outage happened mid-run and lasted its minute: step 2's forward_backward
    # started it, and the service ran no forward_backward until it was over.
    assert took >= OUTAGE
    assert outage.started is not None
    assert outage.ends is not None
    forward = [s for s in service.served if s.name == "forward_backward" and s.at >= since]
    assert forward[0].answer == 200
    assert forward[1].answer == ("held" if mode == "silent" else 503)
    assert forward[1].at == pytest.approx(outage.started, abs=0.1)
    assert next(s for s in forward[1:] if s.answer == 200).at >= outage.ends
    assert service.seq_anomalies == []  # no training request ran twice or out of order
    restores = [s for s in service.served if s.name == "load_weights" and s.at >= since]
    retries = [line for line in stormy.stderr.splitlines() if line.startswith("mathrl: retry ")]
    if not settings:
        # At the defaults the SDK kept retrying (or waiting) longer than the outage
        # lasted: mathrl never knew.
        assert retries == []
        assert restores == []
    else:
        # mathrl gave up waiting after 20 s, restored the step-0 state once the
        # service was back, replayed step 1, and trained step 2 again.
        assert retries[0].startswith("mathrl: retry 1 of forward_backward/optim_step in ")
        assert all(line.endswith(": no answer within 20 s") for line in retries)
        assert restores
        assert all(s.answer == 200 and s.at >= outage.ends for s in restores)
