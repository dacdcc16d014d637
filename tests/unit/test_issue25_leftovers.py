"""What a check of #25 on HEAD found still open, kept as strict xfails until fixed.

Item 3 (a full disk during question generation) expects the error to say "No space left on
device". On a real full file system the kernel usually accepts part of the record that fills
it (a short write) and refuses only the next write with ENOSPC: measured on a 64 KB tmpfs, the
generation stopped correctly and kept only whole records, but the user read "short write (241
of 779 bytes): is the disk full?" instead of the cause. The short write is emulated here as the
kernel does it."""

from __future__ import annotations

import errno
import json
import os

import pytest

from eval_pipeline.questions.cache import QuestionCache
from eval_pipeline.questions.generation import UnitStoreError, generate_questions
from tests.unit.questions.test_generation import FakeLLM, make_units


def _disk_with_room(monkeypatch, cache: QuestionCache, room: int) -> None:
    """os.write on the cache's file as on a disk with `room` bytes left: a write larger than the
    room writes what fits and returns its length; a write once it is full fails with ENOSPC."""
    real_write = os.write
    left = {"bytes": room}

    def write(fd, data):
        if fd != cache._fd:
            return real_write(fd, data)
        if left["bytes"] == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real_write(fd, bytes(data)[: left["bytes"]])
        left["bytes"] -= written
        return written

    monkeypatch.setattr(os, "write", write)


def test_a_disk_that_fills_mid_record_is_reported_as_no_space_left(tmp_path, monkeypatch):
    path = tmp_path / "question_cache.jsonl"
    llm = FakeLLM()
    with QuestionCache(path) as cache:
        _disk_with_room(monkeypatch, cache, room=2_000)  # a unit's record is ~770 bytes: two fit, not three
        with pytest.raises(UnitStoreError) as err:
            generate_questions(make_units(40), ask=llm, store=cache, frac=0.0)
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])  # only whole records kept
    assert len(lines) - 1 == 2 and llm.calls == 3  # two kept whole; it stopped at the first failed write
    assert "No space left on device" in str(err.value), str(err.value)
