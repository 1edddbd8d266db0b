"""The quick look at the endpoint before set-up, against loopback servers of each kind."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mathrl.backend import (
    BackendError,
    BackendUnreachable,
    CredentialsRejected,
    TransientBackendError,
    WrongEndpoint,
)
from mathrl.service.probe import SETUP_PATH, not_json, probe_service

KEY = "sk-probe"
Serve = Callable[..., tuple[str, list[tuple[str, str, str | None, bytes]]]]
"""Starts a server answering one status (and Content-Type); gives its URL and the requests
it gets."""


class Sleeps(list[float]):
    """A stand-in for time.sleep: it records the pauses it is asked for, and returns at once."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class QuietServer(ThreadingHTTPServer):
    """A loopback HTTP server that prints no traceback when a client hangs up early."""

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class Recorder(BaseHTTPRequestHandler):
    """Answers `status` (with `kind` as its Content-Type, if any) and remembers what it was
    asked."""

    protocol_version = "HTTP/1.1"
    status = 200
    kind = ""
    requests: list[tuple[str, str, str | None, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.requests.append((self.command, self.path, self.headers.get("X-API-Key"), body))
        payload = json.dumps({}).encode()
        self.send_response(self.status)
        if self.kind:
            self.send_header("content-type", self.kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[QuietServer] = []

    def start(status: int, kind: str = "") -> tuple[str, list[tuple[str, str, str | None, bytes]]]:
        seen: list[tuple[str, str, str | None, bytes]] = []
        handler = type("Handler", (Recorder,), {"status": status, "kind": kind, "requests": seen})
        server = QuietServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/base/", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def raw_server(behaviour: Callable[[socket.socket], None]) -> str:
    """A socket server that does `behaviour` with each connection it accepts."""
    listener = socket.create_server(("127.0.0.1", 0))

    def loop() -> None:
        with listener:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                behaviour(conn)

    threading.Thread(target=loop, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}"


def test_a_healthy_endpoint_is_asked_what_the_sdk_asks_first(
    serve: Callable[..., tuple[str, list[tuple[str, str, str | None, bytes]]]],
) -> None:
    url, seen = serve(200)
    probe_service(url, KEY, 2.0, sdk_version="0.22.0")
    assert seen == [("POST", f"/base{SETUP_PATH}", KEY, b'{"sdk_version": "0.22.0"}')]


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        (401, CredentialsRejected,
         "MinT rejected the API key: {url} answered HTTP 401 at set-up"),
        (403, CredentialsRejected, "answered HTTP 403 at set-up"),
        (404, WrongEndpoint,
         "MinT at {url} answered HTTP 404 at set-up, which a retry will not change"),
        (503, TransientBackendError, "MinT at {url} answered HTTP 503 at set-up (2 tries in 0 s)"),
        (429, TransientBackendError, "answered HTTP 429 at set-up (2 tries in 0 s)"),
    ],
)  # fmt: skip
def test_an_http_error_status_is_named_with_whether_a_retry_may_help(
    serve: Serve,
    status: int,
    error: type[BackendError],
    message: str,
) -> None:
    url, seen = serve(status)
    sleeps = Sleeps()
    with pytest.raises(error) as excinfo:
        probe_service(url, KEY, 2.0, tries=2, sleep=sleeps)
    assert type(excinfo.value) is error
    assert message.format(url=url) in str(excinfo.value)
    assert KEY not in str(excinfo.value)
    assert len(seen) == (
        2 if status in (429, 503) else 1
    )  # only a status that may pass is asked again
    assert sleeps == ([1.0] if status in (429, 503) else [])  # a second before asking again


@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (200, "text/html; charset=utf-8", WrongEndpoint),  # a web server's home page
        (404, "text/html", WrongEndpoint),  # its page for a path it does not know
        (200, "application/json", None),  # MinT
        (200, "application/problem+json", None),
        (302, "text/html", None),  # a redirect: the SDK's client may follow it
        (503, "text/html", TransientBackendError),  # a proxy's page while MinT restarts
    ],
)
def test_an_answer_that_is_not_json_is_not_a_mint_api(
    serve: Serve, status: int, kind: str, error: type[BackendError] | None
) -> None:
    url, _ = serve(status, kind)
    if error is None:
        probe_service(url, KEY, 2.0)
        return
    with pytest.raises(error) as excinfo:
        probe_service(url, KEY, 2.0, tries=1, sleep=Sleeps())
    assert type(excinfo.value) is error
    if error is WrongEndpoint:
        assert str(excinfo.value) == (
            f"{url} is not a MinT API: it answered set-up (POST /base{SETUP_PATH}) with HTTP "
            f"{status} and text/html, where MinT answers JSON; check the address"
        )
        assert excinfo.value.settings == ("base_url",)


def test_not_json_gives_an_answer_that_does_not_say_the_benefit_of_the_doubt() -> None:
    assert not_json("text/html")
    assert not_json("Text/Plain; charset=utf-8")
    assert not not_json("application/json; charset=utf-8")
    assert not not_json("")


def test_a_refused_connection_is_tried_again_then_named() -> None:
    with socket.create_server(("127.0.0.1", 0)) as free:
        url = f"http://127.0.0.1:{free.getsockname()[1]}"
    sleeps = Sleeps()
    with pytest.raises(BackendUnreachable, match=r"the connection was refused \(2 tries in 0 s\)"):
        probe_service(url, KEY, 2.0, tries=2, sleep=sleeps)
    assert sleeps == [1.0]  # one pause of a second between the tries
    sleeps.clear()
    with pytest.raises(BackendUnreachable, match=r"the connection was refused \(3 tries in 0 s\)"):
        probe_service(url, KEY, 2.0, sleep=sleeps)
    assert sleeps == [1.0, 2.0]  # by default three tries, the pause doubling


def test_an_unknown_host_is_named_at_once() -> None:
    with pytest.raises(BackendUnreachable, match=r"its host 'mathrl-probe\.invalid' could not be"):
        probe_service("http://mathrl-probe.invalid", KEY, 2.0)


def test_a_service_that_never_answers_is_unreachable_by_the_deadline() -> None:
    held: list[socket.socket] = []
    address = raw_server(held.append)  # accepts, never answers
    with pytest.raises(BackendUnreachable, match=r"within 0\.3 s: it never answered"):
        probe_service(f"http://{address}", KEY, 0.3)
    for conn in held:
        conn.close()


def test_a_connection_closed_without_an_answer_is_tried_again_then_named() -> None:
    address = raw_server(lambda conn: conn.close())
    sleeps = Sleeps()
    # Depending on timing the client sees a reset pipe or a disconnect: either way, no answer.
    with pytest.raises(
        BackendUnreachable,
        match=r"\((RemoteDisconnected|BrokenPipeError|ConnectionResetError): .*; 2 tries\)$",
    ):
        probe_service(f"http://{address}", KEY, 2.0, tries=2, sleep=sleeps)
    assert sleeps == [1.0]


def test_tls_to_a_plain_server_fails_the_handshake(serve: Serve) -> None:
    url, _ = serve(200)
    with pytest.raises(BackendError, match="failed the TLS handshake"):
        probe_service(url.replace("http://", "https://"), KEY, 2.0)
