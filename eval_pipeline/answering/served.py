"""Who served an answer, and whether a run's answers came from one generator.

An answer records the provider (the endpoint's host, never the key), the model name that was
sent and the model the response says answered (a gateway may route an alias to another
model). A run's scores belong to one generator only when every answer reports the same three;
otherwise the run's generator is unknown: its grades are kept, but it is never compared with
another run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlparse

from eval_pipeline.common.endpoint import safe_url


@dataclass(frozen=True)
class ServedBy:
    provider: str  # the endpoint's host ("local" for a generator without one)
    model_sent: str
    model_reported: str | None  # None: the response named no model

    @property
    def valid(self) -> bool:
        return bool(self.provider) and bool(self.model_sent) and bool(self.model_reported)

    def label(self) -> str:
        return f"{self.provider}:{self.model_sent}->{self.model_reported}"


def provider_of(base_url: str | None) -> str:
    """Who served: the endpoint's host, with its port when the URL names one and its path (two
    servers on one host, or two deployments behind one gateway, can serve different weights
    under one model name); "default" when none is set (the client's default endpoint). Never
    user, password, query or fragment, as `safe_url` shows an endpoint."""
    if not base_url:
        return "default"
    parsed = urlparse(base_url)
    host = parsed.hostname
    if not host:
        return "unknown"
    try:
        port = parsed.port
    except ValueError:  # a port that is not a number names no server: the host alone
        port = None
    return (f"{host}:{port}" if port is not None else host) + parsed.path.rstrip("/")


def run_generator(served: Iterable[ServedBy | None]) -> str | None:
    """The run's generator, or None (unknown) when any answer's identity is missing or invalid,
    or the answers name more than one."""
    labels = set()
    for s in served:
        if s is None or not s.valid:
            return None
        labels.add(s.label())
    return labels.pop() if len(labels) == 1 else None


def safe_identity(identity):
    """A generator's or grader's identity with every `base_url` as `safe_url` gives it, for
    what is stored and shown (the answer cache key uses the whole identity)."""
    if isinstance(identity, dict):
        return {k: safe_url(v) if k == "base_url" and isinstance(v, str) else safe_identity(v)
                for k, v in identity.items()}
    return identity

