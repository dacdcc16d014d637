"""What every LLM grader shares (the hole grader, the answer judge and the decision grader): the
model's identity for cache keys, where a grade is cached, the checks of the common options, how
a reply is read, and running the calls through the client's concurrency limit.

Reading a reply: code fences are stripped, then every top-level JSON object anywhere in the text
(among prose too) is decoded; only objects with one of the grader's keys count, their keys
casefolded. A score must be a JSON integer in range or that digit as a string; the reason is
whitespace-collapsed and cut to `MAX_REASON_CHARS`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from eval_pipeline.common.checks import is_integer

CODE_FENCE = re.compile(r"```[A-Za-z0-9_-]*")
MAX_REASON_CHARS = 300


def llm_identity(llm: Any) -> dict[str, str]:
    """The LLM's identity as sorted text values (endpoint, model, sampling; never the key): what
    every LLM grader's cache key names."""
    ident = getattr(llm, "identity", None)
    ident = ident() if callable(ident) else ident
    ident = ident if isinstance(ident, dict) else {}
    return {str(k): str(v) for k, v in sorted(ident.items())}


def grade_cache_path(cache_dir: Path, key: str) -> Path:
    """Where an LLM grader keeps one grade: sharded by the key's first two characters."""
    return cache_dir / key[:2] / f"{key}.json"


def check_grader_options(llm: Any, cache_dir: Any, max_tokens: Any) -> Path:
    """The options every grader takes, checked before any call; the cache folder as a Path."""
    if not callable(getattr(llm, "complete", None)):
        raise ValueError(f"llm must have a complete(messages) method, got {llm!r:.80}")
    if max_tokens is not None and (not is_integer(max_tokens) or max_tokens < 1):
        raise ValueError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
    if not isinstance(cache_dir, (str, Path)) or not str(cache_dir):
        raise ValueError("cache_dir must be a folder path")
    return Path(cache_dir)


def reply_objects(text: Any, keys: tuple[str, ...], *, strict: bool = True) -> list[dict[str, Any]]:
    """The top-level JSON objects of a reply that have any of `keys` (keys casefolded), in order.
    Nested objects are not read again: scores must be at an object's top level. `strict=False`
    lets a raw control character (a newline) stand inside a string."""
    if not isinstance(text, str):
        return []
    unfenced = CODE_FENCE.sub(" ", text)
    decoder = json.JSONDecoder(strict=strict)
    found: list[dict[str, Any]] = []
    pos = 0
    while True:
        start = unfenced.find("{", pos)
        if start == -1:
            return found
        try:
            value, end = decoder.raw_decode(unfenced, start)
        except ValueError:
            pos = start + 1
            continue
        if isinstance(value, dict):
            lowered = {str(k).casefold(): v for k, v in value.items()}
            if any(k in lowered for k in keys):
                found.append(lowered)
        pos = end


def score_in_range(value: Any, low: int, high: int) -> int | None:
    """A score low..high: a JSON integer, or that digit as a string; anything else None."""
    if is_integer(value) and low <= value <= high:
        return int(value)
    if isinstance(value, str) and value.strip() in {str(n) for n in range(low, high + 1)}:
        return int(value.strip())
    return None


def clean_reason(value: Any) -> str:
    """A reply's reason, whitespace-collapsed and cut to MAX_REASON_CHARS; "" when it is not text."""
    reason = " ".join(value.split()) if isinstance(value, str) else ""
    return reason[: MAX_REASON_CHARS - 1] + "…" if len(reason) > MAX_REASON_CHARS else reason


def run_all(llm: Any, fn, jobs: list) -> list:
    """fn over jobs through the llm's `map` (the shared concurrency limit) when it has one; an
    exception (a cache that cannot be written) is raised after every job finished."""
    mapper = getattr(llm, "map", None)
    if callable(mapper):
        results = mapper(fn, jobs)
    else:
        results = []
        for job in jobs:
            try:
                results.append(fn(job))
            except Exception as exc:  # noqa: BLE001 - like LLMClient.map: finish the others, then raise
                results.append(exc)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)
