"""`python -m mathrl` on the real mint path, against loopback servers this test starts.

Each test calls the entry point in this process (`run_main`), in a clean folder
(no `.env`), with the environment a user has minus any MINT_*/TINKER_* variables;
the servers answer from threads. The probe's pauses between tries are recorded,
not waited.
Nothing leaves 127.0.0.1. The only timing checks are generous upper bounds on
how long a deadline of 1 s may take to end the process.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import mathrl.service.mint_backend
from cli_process import Result, run_main, user_env
from conftest import math_references
from doubles.fake_mint import FakeMintServer
from doubles.fake_mint_http import FakeMintHTTP
from mathrl.cli.loader import load_task
from mathrl.cli.train import check_prompts
from mathrl.config import Config, ConfigError
from mathrl.service.probe import probe_service
from mathrl_fakes import ByteTokenizer

KEY = "sk-test-SECRET123"
README = (Path(__file__).parents[1] / "README.md").read_text()
COMMANDS = {
    "train": ("--steps", "1"),
    "sample": ("sample", "--model-path", "tinker://run/sampler_weights/x", "--problems", "1"),
    "eval": ("eval", "--problems", "1", "--k", "1"),
}


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers; counts what it accepted."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.socket.close()
        for conn in self.accepted:
            conn.close()


class Answering(BaseHTTPRequestHandler):
    """Answers every request with one HTTP status (401: as MinT does for a bad key)."""

    protocol_version = "HTTP/1.1"
    status = 401

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"detail": f"status {self.status}"}).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


class QuietServer(ThreadingHTTPServer):
    """A loopback HTTP server that prints no traceback when a client hangs up early."""

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class Sleeps(list[float]):
    """A stand-in for time.sleep: it records the pauses it is asked for, and returns at once."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def probe_sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    """The pauses the CLI's probe makes between tries, recorded instead of waited."""
    sleeps = Sleeps()
    defaults = probe_service.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "sleep", sleeps)
    return sleeps


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def answering(status: int) -> Iterator[str]:
    handler = type(f"Answering{status}", (Answering,), {"status": status})
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def rejecting_url() -> Iterator[str]:
    yield from answering(401)


@pytest.fixture(params=[404, 429, 503])
def status_url(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    for url in answering(request.param):
        yield request.param, url


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def assert_one_error_line(done: Result) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mathrl: error: ")
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_key_exits_2_with_advice_and_no_network(
    tmp_path: Path, silent_server: SilentServer, command: str
) -> None:
    done = run_main(tmp_path, *COMMANDS[command], MINT_BASE_URL=silent_server.url)
    assert done.returncode == 2
    line = assert_one_error_line(done)
    for hint in ("MINT_API_KEY", ".env", "--backend fake"):
        assert hint in line
    assert done.stdout == ""
    assert silent_server.accepted == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_silent_service_exits_1_by_the_deadline(
    tmp_path: Path, silent_server: SilentServer, command: str
) -> None:
    url = silent_server.url
    start = time.monotonic()
    done = run_main(
        tmp_path, *COMMANDS[command], MINT_API_KEY=KEY, MINT_BASE_URL=url,
        MINT_CONNECT_TIMEOUT="0.3",
    )  # fmt: skip
    assert time.monotonic() - start < 60  # generous: the deadline is 0.3 s, plus imports
    assert done.returncode == 1, done.stderr
    line = assert_one_error_line(done)
    assert f"could not reach MinT at {url} within 0.3 s: it never answered" in line
    assert done.stdout == ""
    assert KEY not in done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_refused_connection_fails_within_seconds_saying_refused(
    tmp_path: Path, command: str, probe_sleeps: Sleeps
) -> None:
    url = closed_port_url()
    start = time.monotonic()
    done = run_main(tmp_path, *COMMANDS[command], MINT_API_KEY=KEY, MINT_BASE_URL=url)
    assert time.monotonic() - start < 30  # generous: three tries, the pauses not waited
    assert done.returncode == 1, done.stderr
    line = assert_one_error_line(done)
    assert f"could not reach MinT at {url}: the connection was refused (3 tries in" in line
    assert probe_sleeps == [1.0, 2.0]  # a second, then two, between the three tries
    assert KEY not in done.stderr


def test_an_unknown_host_fails_at_once(tmp_path: Path) -> None:
    done = run_main(tmp_path, *COMMANDS["train"], MINT_API_KEY=KEY,
                   MINT_BASE_URL="http://mathrl-test.invalid")  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = assert_one_error_line(done)
    assert "its host 'mathrl-test.invalid' could not be resolved" in line


def test_an_http_error_at_set_up_names_the_status_and_whether_to_retry(
    tmp_path: Path, status_url: tuple[int, str], probe_sleeps: Sleeps
) -> None:
    status, url = status_url
    done = run_main(tmp_path, *COMMANDS["train"], MINT_API_KEY=KEY, MINT_BASE_URL=url)
    assert done.returncode == (2 if status == 404 else 1), done.stderr  # 404: the URL is wrong
    line = assert_one_error_line(done)
    assert f"MinT at {url} answered HTTP {status} at set-up" in line
    if status == 404:
        assert "which a retry will not change: check the address (MINT_BASE_URL)" in line
        assert probe_sleeps == []
    else:
        assert "may succeed on retry later" in line
        assert probe_sleeps == [1.0, 2.0]
    assert KEY not in done.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MINT_API_KEY": "   "}, "MINT_API_KEY must be set to a MinT API key (got nothing)"),
        ({"MINT_API_KEY": "abc"}, "MINT_API_KEY must be a MinT key: 'sk-' then the rest"),
        ({"MINT_API_KEY": KEY, "MINT_BASE_URL": "notaurl"},
         "MINT_BASE_URL must be an http:// or https:// URL with a host"),
    ],
)  # fmt: skip
def test_a_blank_or_malformed_key_or_url_exits_2_at_once(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    done = run_main(tmp_path, "--steps", "1", **env)
    assert done.returncode == 2
    line = assert_one_error_line(done)
    assert message in line
    assert "abc" not in line or "MINT_BASE_URL" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_rejected_key_exits_2_as_the_readme_says_and_never_shows_the_key(
    tmp_path: Path, rejecting_url: str, command: str
) -> None:
    done = run_main(tmp_path, *COMMANDS[command], MINT_API_KEY=KEY, MINT_BASE_URL=rejecting_url)
    assert done.returncode == 2, done.stderr
    assert "a key the service rejects" in " ".join(README.split())  # and the README says so
    line = assert_one_error_line(done)
    assert "MinT rejected the API key" in line
    assert line.endswith("answered HTTP 401 at set-up (MINT_API_KEY)")
    for leak in (KEY, "SECRET123"):
        assert leak not in done.stdout
        assert leak not in done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_that_answers_a_web_page_is_not_a_mint_api_and_exits_2(
    tmp_path: Path, command: str
) -> None:
    service = FakeMintHTTP(math_references(), tmp_path / "mint")
    service.pages.add("client/config")  # a web server's page, where MinT answers JSON
    try:
        done = run_main(tmp_path, *COMMANDS[command], MINT_API_KEY=KEY, MINT_BASE_URL=service.url)
    finally:
        service.close()
    assert done.returncode == 2, done.stderr
    assert assert_one_error_line(done) == (
        f"mathrl: error: {service.url} is not a MinT API: it answered set-up (POST "
        "/api/v1/client/config) with HTTP 200 and text/html, where MinT answers JSON; check "
        "the address (MINT_BASE_URL)"
    )
    assert done.stdout == ""
    assert "Content-Type" not in done.stderr  # not the SDK's words


@pytest.mark.slow
def test_a_real_run_keeps_irrelevant_library_advice_off_stderr(tmp_path: Path) -> None:
    # transformers announces on import that PyTorch is missing; the tokenizer does not need it.
    script = "import mathrl.service.mint_backend, transformers; print('loaded')"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, cwd=tmp_path, env=user_env(tmp_path), timeout=120,
        check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "loaded\n")
    assert "PyTorch" not in done.stderr


def test_a_chat_task_on_a_model_without_a_chat_template_exits_2_before_saving_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake mint SDK, its tokenizer a base model's: no chat template.
    server = FakeMintServer(
        math_references(), checkpoint_dir=tmp_path / "mint", chat_template=False
    )
    real_open = mathrl.service.mint_backend.open_backend

    async def open_on_the_fake(config: Any, env: Any, **kwargs: Any) -> Any:
        return await real_open(config, env, service_client=server.connect(), **kwargs)

    monkeypatch.setattr(mathrl.service.mint_backend, "open_backend", open_on_the_fake)
    base = "Qwen/Qwen3-0.6B-Base"
    done = run_main(tmp_path, "--adapter", "preference", "--base-model", base, MINT_API_KEY=KEY)
    assert done.returncode == 2
    assert assert_one_error_line(done) == (
        "mathrl: error: task 'preference' (mathrl.tasks.preference:PreferenceChat) writes "
        f"conversation prompts, but the base model {base}'s tokenizer has no chat template to "
        "render them: choose a chat model (--base-model, MINT_BASE_MODEL), or a task with text "
        "prompts (--adapter)"
    )
    assert done.stdout == ""  # no `Model:` line, no `Saved:` line
    assert not (tmp_path / "runs").exists()
    assert not server.files  # nothing saved on the service
    # A text task on the same model trains.
    text = run_main(tmp_path, "--base-model", base, "--steps", "1", MINT_API_KEY=KEY)
    assert text.returncode == 0, text.stderr


def test_a_chat_template_that_refuses_the_conversation_is_named_at_set_up() -> None:
    class Refusing(ByteTokenizer):
        def render_chat(self, messages: Any, options: Any) -> list[int]:
            raise ValueError("the system message must come first")

    with pytest.raises(ConfigError) as refused:
        check_prompts(Refusing(), load_task("preference"), Config(base_model="some/model"))
    assert str(refused.value) == (
        "task 'preference' (mathrl.tasks.preference:PreferenceChat) writes conversation "
        "prompts, but the base model some/model's tokenizer cannot render them (ValueError: "
        "the system message must come first): choose a chat model (--base-model, "
        "MINT_BASE_MODEL), or a task with text prompts (--adapter)"
    )
    check_prompts(Refusing(), load_task("addition"), Config())  # text prompts: no template used
