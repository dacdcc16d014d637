"""Answers cached the moment they arrive, keyed by everything that decides them: the prompt,
the exact context it was answered from, the generator's identity (model, endpoint, prompt
version, settings) and the prompt version. A run killed half-way resumes: the answers it
already had cost nothing the second time. Failed answers are never cached. A damaged entry
(not JSON, not an object, no answer text) is answered again, with a warning naming the file."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval_pipeline.answering.context import ContextEntry
from eval_pipeline.common.atomic import atomic_write_text

_logger = logging.getLogger("eval_pipeline.answering.cache")


def answer_key(prompt: str, context: Sequence[ContextEntry], generator: Mapping[str, Any]) -> str:
    payload = json.dumps({"prompt": prompt, "context": [[e.number, e.chunk_id, e.doc_id, e.text] for e in context],
                          "generator": generator}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class AnswerCache:
    def __init__(self, folder: str | Path, log: Callable[[str], None] | None = None):
        """`log` (default: the `eval_pipeline.answering.cache` logger's warning) hears of each
        damaged entry, answered again."""
        self.folder = Path(folder)
        self.log = log or _logger.warning

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached record, or None when it is absent or damaged (then it is answered again)."""
        path = self._path(key)
        try:
            record = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = f"unreadable: {exc.strerror or exc}"
        except UnicodeDecodeError as exc:
            why = f"not UTF-8 at byte {exc.start}"
        except ValueError:
            why = "invalid JSON"
        else:
            if isinstance(record, dict) and isinstance(record.get("text"), str):
                return record
            why = "not a JSON object" if not isinstance(record, dict) else "no 'text' string"
        self.log(f"{path}: damaged answer cache entry ({why}); answering again")
        return None

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        atomic_write_text(self._path(key), json.dumps(dict(record), ensure_ascii=False, sort_keys=True))

    def answer_all(self, items: Sequence[tuple[str, Sequence[ContextEntry]]], generator: Mapping[str, Any],
                   produce: Callable[[str, Sequence[ContextEntry]], Mapping[str, Any]],
                   map_fn: Callable[[Callable, Sequence], list] | None = None) -> list[dict[str, Any] | BaseException]:
        """One record per (prompt, context): from the cache, or `produce`d and stored at once.
        With `map_fn` (the LLM client's `map`: its concurrency limit), the missing ones are
        produced concurrently; a failure is returned in its place, uncached."""
        keys = [answer_key(p, c, generator) for p, c in items]
        out: list[dict[str, Any] | BaseException | None] = [self.get(k) for k in keys]
        missing = [i for i, record in enumerate(out) if record is None]

        def work(i: int) -> dict[str, Any]:
            record = {**produce(*items[i]), "cached": False}
            self.put(keys[i], {**record, "cached": True})
            return record

        results = (map_fn or (lambda fn, xs: [_call(fn, x) for x in xs]))(work, missing)
        for i, result in zip(missing, results):
            out[i] = result
        return out  # type: ignore[return-value]


def _call(fn, x):
    try:
        return fn(x)
    except Exception as exc:  # noqa: BLE001 - returned in place, like LLMClient.map
        return exc
