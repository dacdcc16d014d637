"""An HTTP endpoint that cannot render its secret.

A user may put a credential in an endpoint URL: a proxy's basic auth (``http://user:pw@host``),
an Azure-style ``?api-key=...``, a token in the fragment. Identities, cache keys, log lines,
reports and history rows are all built from how an endpoint renders, so an ``Endpoint``
renders (``str``, ``repr``, ``format``, pickling) only its safe form: scheme, host, port and
path. The whole URL is handed to the HTTP client alone, through :meth:`Endpoint.for_client`.
"""

from __future__ import annotations

from urllib.parse import urlparse

__all__ = ["Endpoint", "safe_url"]


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
        """The whole URL, credentials included: for the HTTP client, never for anything stored."""
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
