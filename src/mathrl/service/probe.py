"""One quick look at the MinT endpoint before the SDK takes over.

For: turning what the SDK would retry silently for minutes (a refused
connection, an unknown host, an HTTP error status at set-up) into one clear
line within seconds. It sends the request the SDK sends first,
`POST <base URL>/api/v1/client/config`, with the key as the SDK sends it, and
reads only the status and the kind of answer (MinT answers JSON; a web page
means the URL is another site's). Not for: anything after set-up, or a second client:
it uses the standard library, and never mint.

A refused connection or a status that may pass (408, 409, 429, 5xx) is asked
again, `tries` times in all, a second apart, then doubling; a timeout means
the service accepted the connection and said nothing, which no quick retry
fixes.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from mathrl.backend import (
    BackendError,
    BackendUnreachable,
    CredentialsRejected,
    TransientBackendError,
    WrongEndpoint,
)
from mathrl.text import one_line

SETUP_PATH = "/api/v1/client/config"


def retryable_status(status: int) -> bool:
    """The SDK's own rule: 408, 409, 429 and 5xx may pass on retry."""
    return status in (408, 409, 429) or status >= 500


def not_json(content_type: str) -> bool:
    """True for an answer that says it is something other than JSON (a web page, text);
    an answer that does not say is given the benefit of the doubt."""
    kind = content_type.split(";")[0].strip().lower()
    return bool(kind) and not kind.endswith("json")


def probe_service(
    url: str,
    key: str,
    timeout: float,
    *,
    tries: int = 3,
    sdk_version: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return if `url` answers set-up with 2xx (or 3xx); raise a one-line BackendError if not:
    CredentialsRejected for 401 and 403, WrongEndpoint for a web page or another status a
    retry will not change.

    `sleep` makes the pauses between tries (1 s, then 2 s, ...); tests pass one
    that records them instead of waiting.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path.rstrip("/") + SETUP_PATH
    body = json.dumps({"sdk_version": sdk_version}).encode()
    headers = {"Content-Type": "application/json", "X-API-Key": key}
    started, pause, problem = time.monotonic(), 1.0, ""
    for attempt in range(1, tries + 1):
        connection: http.client.HTTPConnection = (
            http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ssl.create_default_context()
            )
            if parts.scheme == "https"
            else http.client.HTTPConnection(host, port, timeout=timeout)
        )
        try:
            connection.request("POST", path, body=body, headers=headers)
            answer = connection.getresponse()
            status, kind = answer.status, answer.getheader("Content-Type") or ""
        except ConnectionRefusedError:
            problem = "refused"
        except socket.gaierror as exc:
            raise BackendUnreachable(
                f"could not reach MinT at {url}: its host {host!r} could not be resolved "
                f"({exc.strerror or exc}); check the address and the network",
                settings=("base_url",),
            ) from None
        except TimeoutError:
            raise BackendUnreachable(
                f"could not reach MinT at {url} within {timeout:g} s: it never answered",
                settings=("base_url", "connect_timeout"),
            ) from None
        except ssl.SSLError as exc:
            raise BackendError(
                f"MinT at {url} failed the TLS handshake ({exc.reason or exc})"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            problem = f"{type(exc).__name__}: {one_line(str(exc)) or 'no detail'}"
        else:
            if status in (401, 403):
                raise CredentialsRejected(
                    f"MinT rejected the API key: {url} answered HTTP {status} at set-up",
                    settings=("api_key",),
                )
            if 300 <= status < 400:  # a redirect: the SDK's client may follow it
                return
            if not retryable_status(status) and not_json(kind):
                raise WrongEndpoint(
                    f"{url} is not a MinT API: it answered set-up (POST {path}) with HTTP "
                    f"{status} and {one_line(kind.split(';')[0], 60)}, where MinT answers JSON; "
                    "check the address",
                    settings=("base_url",),
                )
            if status < 300:
                return
            if not retryable_status(status):
                raise WrongEndpoint(
                    f"MinT at {url} answered HTTP {status} at set-up, which a retry will not "
                    "change: check the address",
                    settings=("base_url",),
                )
            problem = f"HTTP {status}"
        finally:
            connection.close()
        if attempt < tries:
            sleep(pause)
            pause *= 2
    elapsed = time.monotonic() - started
    if problem == "refused":
        raise BackendUnreachable(
            f"could not reach MinT at {url}: the connection was refused ({tries} tries in "
            f"{elapsed:.0f} s), so nothing listens there; check the address",
            settings=("base_url",),
        )
    if problem.startswith("HTTP "):
        raise TransientBackendError(
            f"MinT at {url} answered {problem} at set-up ({tries} tries in {elapsed:.0f} s): "
            "the service is there but busy or failing, and may succeed on retry later"
        )
    raise BackendUnreachable(f"could not reach MinT at {url} ({problem}; {tries} tries)")
