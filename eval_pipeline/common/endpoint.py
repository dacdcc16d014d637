"""An HTTP endpoint that cannot render its secret.

A user may put a credential in an endpoint URL: a proxy's basic auth (``http://user:pw@host``),
an Azure-style ``?api-key=...``, a token in the fragment. Identities, cache keys, log lines,
reports and history rows are all built from how an endpoint renders, so an ``Endpoint``
renders (``str``, ``repr``, ``format``, pickling) only its safe form: scheme, host, port and
path. The whole URL is handed to the HTTP client alone, through :meth:`Endpoint.for_client`.

The HTTP client logs each request's URL at INFO (httpx: ``HTTP Request: POST http://user:pw@...``).
Nothing here turns that on, but a user who raises those loggers (or a Dagster instance that
manages them) would write the credential to every log. So the credential parts of every URL
handed to a client (user, password, query, fragment) are redacted from the records of the
HTTP client's loggers (`CLIENT_LOGGERS`) by a filter installed with the first one.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import unquote, urlparse

__all__ = ["CLIENT_LOGGERS", "Endpoint", "safe_url"]

# The loggers of the HTTP stack under the openai client: a filter on a logger sees only the
# records logged to that logger by name, so each is named.
CLIENT_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.http11", "openai", "openai._base_client")
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


class _RedactSecrets(logging.Filter):
    """Replaces every registered credential fragment in a record's message with ``***``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _SECRETS:
            try:
                message = record.getMessage()
            except Exception:  # a record that cannot be formatted is left to the handler's error
                return True
            redacted = message
            for secret in sorted(_SECRETS, key=len, reverse=True):
                redacted = redacted.replace(secret, "***")
            if redacted != message:
                record.msg, record.args = redacted, ()
        return True


_FILTER = _RedactSecrets()


def _register_secrets(url: str) -> None:
    """Remember the credential parts of `url` (longer than 3 characters, as written and
    unquoted) and make sure the client loggers redact them."""
    parts = urlparse(url)
    found = {p for p in (parts.username, parts.password, parts.query, parts.fragment,
                         parts.netloc.rpartition("@")[0] if "@" in parts.netloc else None) if p}
    found |= {unquote(p) for p in found}
    found = {p for p in found if len(p) > 3}
    if not found:
        return
    with _SECRETS_LOCK:
        new = found - _SECRETS
        if not new:
            return
        _SECRETS.update(new)
        for name in CLIENT_LOGGERS:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)


def safe_url(url: str) -> str:
    """An endpoint as it may be shown and stored: scheme, host, port and path; never a user,
    password, query or fragment (a key can travel in any of them)."""
    parts = urlparse(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else host


class Endpoint:
    """An endpoint URL whose every rendering is :func:`safe_url`'s; equal endpoints have equal
    whole URLs. Pickled, it keeps only the safe form (a copy never carries the credential: it
    comes from the environment again where the endpoint is built)."""

    __slots__ = ("_url",)

    def __init__(self, url: str):
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"an endpoint must be a non-empty URL string, got {type(url).__name__}")
        self._url = url

    @property
    def safe(self) -> str:
        return safe_url(self._url)

    @property
    def hostname(self) -> str | None:
        return urlparse(self._url).hostname

    def for_client(self) -> str:
        """The whole URL, credentials included: for the HTTP client, never for anything stored
        (its credential parts are redacted from the client's own log records from now on)."""
        _register_secrets(self._url)
        return self._url

    def __str__(self) -> str:
        return self.safe

    def __repr__(self) -> str:
        return f"Endpoint({self.safe!r})"

    def __format__(self, spec: str) -> str:
        return format(self.safe, spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Endpoint) and other._url == self._url

    def __hash__(self) -> int:
        return hash(("Endpoint", self._url))

    def __reduce__(self) -> tuple:
        return Endpoint, (self.safe,)
