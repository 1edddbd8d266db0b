"""The SDK's messages that mathrl translates: what each means, and what to check.

For: `mathrl.service.mint_backend.translate_error`, which looks up an SDK
error's message here and, on a match, says what it means before the SDK's
own words. Each entry is a message the SDK raises in a situation a user can
cause, whose words point the wrong way (the first one names a 'tml-' key
prefix to someone who holds MinT's 'sk-' key). Not for: errors told apart by
their type (a rejected key, a failure a retry may fix), which `translate_error`
words itself.

Every entry has a test that makes the SDK raise it against the fake MinT HTTP
server (`tests/test_sdk_messages.py`); an SDK that words a message anew fails
that test, rather than leaving the message untranslated.
"""

from __future__ import annotations

from dataclasses import dataclass

from mathrl.backend import BackendError, WrongEndpoint


@dataclass(frozen=True, slots=True)
class Translation:
    """One SDK message and what mathrl says instead."""

    says: str
    """The SDK's message, or a part of it, word for word."""
    means: str
    """What happened, in the user's terms, and what to check."""
    settings: tuple[str, ...]
    """The settings to check, by field (`BackendError.settings`)."""
    seen: str
    """Where the SDK raises it, and the SDK version it was seen in."""
    error: type[BackendError] = BackendError
    """What mathrl raises: WrongEndpoint when the URL is plainly not a MinT API."""


TRANSLATED: tuple[Translation, ...] = (
    Translation(
        says="The api_key must start with the 'tml-' prefix",
        means=(
            "the endpoint does not trade API keys for session tokens (its client/config has "
            "pjwt_auth_enabled false), so the SDK took the key for a Tinker key, which must "
            "start with 'tml-', and refused MinT's 'sk-' key before sending it; check that the "
            "URL is a MinT endpoint with that auth mode on, and that the key is a MinT key "
            "for it"
        ),
        settings=("base_url", "api_key"),
        seen="tinker 0.22.0, ServiceClient(): InternalClientHolder builds ApiKeyAuthProvider "
        "directly when pjwt_auth_enabled is false, skipping mint's 'sk-' patch",
    ),
    Translation(
        says="Data returned by API invalid for expected schema.",
        means=(
            "the endpoint answered, but not in the form this SDK reads: it may be another "
            "service, or a MinT whose API is newer than the installed mindlab-toolkit; check "
            "the URL, or upgrade mindlab-toolkit"
        ),
        settings=("base_url",),
        seen="tinker 0.22.0, APIResponseValidationError: an answer that does not parse as the "
        "SDK's types, e.g. create_session without a session_id",
    ),
    Translation(
        says="Expected Content-Type response header to be `application/json` but received",
        means=(
            "the endpoint is not a MinT API: it answered with something other than JSON (a web "
            "page, say); check the URL"
        ),
        settings=("base_url",),
        seen="tinker 0.22.0, APIResponseValidationError: an answer whose Content-Type is not "
        "JSON, e.g. an HTML page from a web server at the URL",
        error=WrongEndpoint,
    ),
)
"""Every SDK message mathrl translates."""


def translation(message: str) -> Translation | None:
    """The translation of an SDK error's message, if it is one of `TRANSLATED`."""
    return next((t for t in TRANSLATED if t.says in message), None)
