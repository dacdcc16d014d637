"""A full disk during question generation: the first failed write of the question cache stops
the generation; no further unit is sent to the model (each reply would be thrown away and paid
again by the rerun); what was written stays whole; the error says the cache could not be
written and why (no space left), not only "N failed units" (issue #25, item 3)."""

from __future__ import annotations

import errno
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from eval_pipeline.questions.cache import QuestionCache, QuestionCacheError
from eval_pipeline.questions.generation import UnitStoreError
from eval_pipeline.questions.generation import generate_questions
from tests.unit.questions.test_generation import FakeLLM, make_units


class FullDiskStore:
    """A unit store whose disk fills after `room` records."""

    def __init__(self, room: int):
        self.room, self.records = room, {}

    def get(self, key):
        return self.records.get(key)

    def put(self, record):
        if len(self.records) >= self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/state/question_cache.jsonl")
        self.records[record["key"]] = dict(record)


def test_the_first_failed_write_stops_the_generation():
    llm, store = FakeLLM(), FullDiskStore(room=3)
    with pytest.raises(UnitStoreError) as err:
        generate_questions(make_units(40), ask=llm, store=store, frac=0.0)
    assert llm.calls == 4  # three stored, the fourth's reply could not be: nothing more was asked
    message = str(err.value)
    assert "No space left on device" in message and "question_cache.jsonl" in message
    assert "3 unit(s) stored" in message and "36" in message  # what is kept, what was never asked
    assert len(store.records) == 3


def test_with_parallel_calls_only_those_in_flight_are_lost():
    llm, store = FakeLLM(), FullDiskStore(room=5)
    with ThreadPoolExecutor(4) as pool:
        with pytest.raises(UnitStoreError):
            generate_questions(make_units(60), ask=llm, store=store, frac=0.0,
                               map_fn=lambda fn, items: list(pool.map(_caught(fn), items)))
    assert llm.calls <= 5 + 4  # the stored ones and at most one in flight per worker


def _caught(fn):
    def run(item):
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - a map returns failures, as LLMClient.map does
            return exc
    return run


def test_a_short_write_leaves_the_cache_file_whole(tmp_path, monkeypatch):
    cache = QuestionCache(tmp_path / "question_cache.jsonl")
    with cache:
        cache.put({"key": "k1", "value": "x" * 50})
        real_write = os.write

        def short(fd, data):
            return real_write(fd, data[: len(data) // 2])

        monkeypatch.setattr(os, "write", short)
        with pytest.raises(QuestionCacheError, match="short write"):
            cache.put({"key": "k2", "value": "y" * 50})
        monkeypatch.setattr(os, "write", real_write)
    lines = (tmp_path / "question_cache.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["k1"]  # no half line left behind
