"""`python -m mathrl eval` on the mint backend: the real SDK, over HTTP, against the fake MinT.

Each test runs the command line in this process (`run_main`) with the real
`tinker.ServiceClient` talking to `fake_mint_http.FakeMintHTTP` on 127.0.0.1,
as tests/test_outage_sdk.py does; only the SDK's tokenizer download is
replaced, by the fake's tokenizer. The server holds every sample request
until all of an evaluation's have arrived (`hold_samples`): an evaluation that
sent them one round after another would never be answered, and `apart`
would say so. So "one round of requests" is checked without timing anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tinker.lib.public_interfaces import sampling_client, training_client

from cli_process import run_main
from conftest import math_references
from doubles.fake_mint import FakeHFTokenizer
from doubles.fake_mint_http import FakeMintHTTP
from test_outage_sdk import end_sessions

pytestmark = [
    # tinker 0.22.0 leaves a connection pool for the collector to close (see test_outage_sdk).
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
]

KEY = "sk-test-SECRET123"
PROBLEMS = 4


@pytest.fixture(autouse=True)
def offline_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK loads the fake's tokenizer instead of downloading the base model's."""
    for module in (training_client, sampling_client):
        monkeypatch.setattr(module, "_load_tokenizer_from_model_info", lambda *_: FakeHFTokenizer())


@pytest.fixture
def service(tmp_path: Path) -> Iterator[FakeMintHTTP]:
    """The fake MinT, on 127.0.0.1."""
    server = FakeMintHTTP(math_references(), tmp_path / "mint")
    yield server
    end_sessions(server.url)
    server.close()


@pytest.mark.slow
def test_eval_of_the_base_model_over_the_sdk_sends_every_request_at_once(
    tmp_path: Path, service: FakeMintHTTP
) -> None:
    service.hold_samples(2 * PROBLEMS)  # answered only once all have arrived
    done = run_main(
        tmp_path, "eval", "--problems", str(PROBLEMS), "--k", "1,4",
        MINT_API_KEY=KEY, MINT_BASE_URL=service.url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "Model: Qwen/Qwen3-0.6B, Vocab: 257",
        "Weights: the base model Qwen/Qwen3-0.6B",
        f"Problems: {PROBLEMS} held-out (seed 0), 4 samples each at temperature 1, and one greedy",
    ]
    assert [line.split()[0] for line in lines[3:]] == [
        "pass@1", "pass@4", "maj@1", "maj@4", "mean", "greedy"
    ]  # fmt: skip
    # One request a problem for its 4 samples, one for its greedy answer: all at once.
    assert [s.name for s in service.served].count("asample") == 2 * PROBLEMS
    assert not service.apart
    assert KEY not in done.stderr


@pytest.mark.slow  # a training run through the SDK first: a few seconds more
def test_eval_of_a_run_folder_over_the_sdk_writes_its_record(
    tmp_path: Path, service: FakeMintHTTP
) -> None:
    train = run_main(
        tmp_path, "--steps", "2", "--batch", "2", "--group", "2", "--log-dir", "run",
        MINT_API_KEY=KEY, MINT_BASE_URL=service.url,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr
    saved = train.stdout.splitlines()[-1].removeprefix("Saved: ")
    end_sessions(service.url)
    service.hold_samples(2 * PROBLEMS)  # answered only once all have arrived
    done = run_main(
        tmp_path, "eval", "--model-path", "run", "--problems", str(PROBLEMS), "--k", "2",
        MINT_API_KEY=KEY, MINT_BASE_URL=service.url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    step = int(saved.rsplit("step", 1)[1])  # the last step that trained
    assert done.stdout.splitlines()[1] == f"Weights: {saved} (step {step})"
    (line,) = (tmp_path / "run" / "eval.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert (record["sampler_path"], record["step"], record["samples"]) == (saved, step, 2)
    assert not service.apart
