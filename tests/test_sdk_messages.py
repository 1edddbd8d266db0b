"""Each SDK message mathrl translates (`mathrl.service.sdk_messages.TRANSLATED`), met for real.

The real SDK (`mint.ServiceClient`) talks HTTP to `fake_mint_http.FakeMintHTTP`,
set up to answer as a service that makes the SDK raise the message. The
error mathrl reports says what it means and what to check, then the SDK's
own words; the command line names the settings to check.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker

from cli_process import run_main
from conftest import math_references
from doubles.fake_mint_http import FakeMintHTTP, Json
from mathrl.backend import BackendError
from mathrl.config import Config
from mathrl.service.mint_backend import Endpoint, open_backend
from mathrl.service.sdk_messages import TRANSLATED, translation

pytestmark = [
    # tinker 0.22.0 drops the connection pool it fetches client/config with, unclosed;
    # the collector closes it, and asyncio and the socket each report that.
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
]

KEY = "sk-test-SECRET123"
PAGE: Json = {}
"""Stands for an HTML page in SERVICES: the route is put in `FakeMintHTTP.pages`."""
SERVICES: dict[str, dict[str, Json]] = {
    # client/config without JWT exchange: tinker checks the key as its own, 'tml-' first.
    "The api_key must start with the 'tml-' prefix": {
        "client/config": {"pjwt_auth_enabled": False, "use_pyqwest_transport": False},
    },
    # A session answer without its id: not the API this SDK reads.
    "Data returned by API invalid for expected schema.": {"create_session": {"session": "s"}},
    # A web page where the session should be (after the probe's client/config passed).
    "Expected Content-Type response header to be `application/json` but received": {
        "create_session": PAGE
    },
}
"""What the fake service answers instead, for each translated message to be raised."""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[FakeMintHTTP]:
    server = FakeMintHTTP(math_references(), tmp_path / "mint")
    yield server
    server.close()
    gc.collect()  # under this module's filter: the SDK's unclosed pools, before another test


def test_every_translated_message_has_a_service_that_raises_it() -> None:
    assert set(SERVICES) == {t.says for t in TRANSLATED}


@pytest.mark.parametrize("says", SERVICES)
def test_the_sdk_raises_the_message_and_mathrl_says_what_it_means(
    service: FakeMintHTTP, says: str
) -> None:
    for route, answer in SERVICES[says].items():
        if answer is PAGE:
            service.pages.add(route)
        else:
            service.answers[route] = answer
    known = translation(says)
    assert known is not None
    with pytest.raises(BackendError) as failed:
        asyncio.run(open_backend(Config(connect_timeout=30), Endpoint(KEY, service.url)))
    assert str(failed.value).startswith(
        f"connecting to MinT at {service.url} failed: {known.means} "
        f"(tinker {tinker.__version__} said: {says}"
    )
    assert str(failed.value).endswith(")")
    assert type(failed.value) is known.error
    assert failed.value.settings == known.settings
    assert KEY not in str(failed.value)


def test_the_tml_case_on_the_command_line_names_the_auth_mode_and_the_key(
    tmp_path: Path, service: FakeMintHTTP
) -> None:
    service.answers.update(SERVICES["The api_key must start with the 'tml-' prefix"])
    done = run_main(tmp_path, "--steps", "1", MINT_API_KEY=KEY, MINT_BASE_URL=service.url)
    assert (done.returncode, done.stdout) == (1, "")
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"mathrl: error: connecting to MinT at {service.url} failed: the ")
    for words in ("pjwt_auth_enabled false", "MinT's 'sk-' key", "(MINT_BASE_URL, MINT_API_KEY)"):
        assert words in line
    assert "MinT failed while" not in line
    assert KEY not in line


def test_another_message_is_passed_on_with_what_was_being_done() -> None:
    assert translation("Error code: 404 - no such model") is None
