"""Tests for eval_pipeline.questions.cache: reuse across runs, changed/removed/failed units, torn
journal lines, the file lock, writing the final set, and a SIGKILL in the middle of a run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from eval_pipeline.questions.cache import (
    CacheLockedError,
    QuestionCache,
    QuestionCacheError,
    generate_question_set,
    write_generated_question_set,
)
from eval_pipeline.questions.generation import PROMPT_VERSION
from eval_pipeline.questions.sets import load_question_set
from tests.unit.questions.test_generation import FakeLLM, make_units

PROJECT_ROOT = Path(__file__).resolve().parents[3]
SIG = "0123456789abcdef"


def run(units, llm, cache, **over):
    kwargs = dict(ask=llm, cache_path=cache, model="fake-1", k=2, frac=0.15, corpus_signature=SIG)
    kwargs.update(over)
    return generate_question_set(units, **kwargs)


def journal(cache: Path) -> list[dict]:
    return [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]


def test_second_run_makes_no_calls_and_gives_the_same_set(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(8)
    first = run(units, FakeLLM(), cache)
    assert first.calls == 8 + 1 and first.units_generated == 8 and first.units_cached == 0
    llm = FakeLLM()
    second = run(units, llm, cache)
    assert llm.calls == 0 and second.calls == 0 and second.units_cached == 8
    assert [q.to_json() for q in second.questions] == [q.to_json() for q in first.questions]
    assert second.dropped == first.dropped and second.forms == first.forms
    assert len(journal(cache)) == 8 + 1  # one record per unit + one abstention batch


def test_changed_unit_regenerates_only_that_unit(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(6)
    first = run(units, FakeLLM(), cache, frac=0)
    changed = list(units)
    changed[3] = (*units[3][:4], units[3][4] + " A new paragraph about limits.")
    llm = FakeLLM()
    second = run(changed, llm, cache, frac=0)
    assert llm.asked == ["u03"] and second.units_cached == 5
    old = {q.qid for q in first.questions if q.gold == ("u03",)}
    new = {q.qid for q in second.questions if q.gold == ("u03",)}
    assert len(new) == 2 and old.isdisjoint(new)
    # The stale record of u03 is compacted away.
    records = journal(cache)
    assert len(records) == 6 and len({r["unit_id"] for r in records}) == 6


def test_model_k_and_masking_are_part_of_the_key(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(3)
    run(units, FakeLLM(), cache, frac=0)
    for over in ({"model": "fake-2"}, {"k": 3}, {"masking": False}):
        llm = FakeLLM()
        run(units, llm, cache, frac=0, **over)
        assert llm.calls == 3, over
    llm = FakeLLM()
    run(units, llm, cache, frac=0)  # the original configuration is still cached
    assert llm.calls == 0


def test_removed_units_are_dropped(tmp_path):
    cache = tmp_path / "cache.jsonl"
    run(make_units(5), FakeLLM(), cache, frac=0)
    llm = FakeLLM()
    result = run(make_units(3), llm, cache, frac=0)
    assert llm.calls == 0
    assert {q.gold[0] for q in result.questions} == {"u00", "u01", "u02"}
    assert sorted(r["unit_id"] for r in journal(cache)) == ["u00", "u01", "u02"]
    assert result.cache["pruned"] == 2


def test_failed_units_are_not_cached_and_are_retried_next_run(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(5)
    first = run(units, FakeLLM(fail={"u01", "u03"}), cache, frac=0)
    assert first.failed_units == ["u01", "u03"] and not first.complete
    assert sorted(r["unit_id"] for r in journal(cache)) == ["u00", "u02", "u04"]
    with pytest.raises(QuestionCacheError, match="failed unit"):
        write_generated_question_set(tmp_path / "q.jsonl", first)
    llm = FakeLLM()
    second = run(units, llm, cache, frac=0)
    assert sorted(llm.asked) == ["u01", "u03"] and second.failed_units == [] and second.complete
    assert {q.gold[0] for q in second.questions} == {f"u{i:02d}" for i in range(5)}


def test_abstention_batches_are_cached_and_follow_the_theme(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(17)
    first = run(units, FakeLLM(), cache, k=5)
    assert first.forms["abstention"] == 15
    llm = FakeLLM()
    assert run(units, llm, cache, k=5).calls == 0
    llm = FakeLLM()
    run(units, llm, cache, k=5, theme_titles=["Zebra care", "Giraffe feeding"])
    assert llm.asked == ["<abstention>", "<abstention>"]  # new theme, units still cached


def test_torn_last_line_is_ignored_counted_and_repaired(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(4)
    run(units, FakeLLM(), cache, frac=0)
    data = cache.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    lost = json.loads(data[last_start:])["unit_id"]
    cache.write_bytes(data[: last_start + 25])  # the last record cut mid-way, no newline
    llm = FakeLLM()
    result = run(units, llm, cache, frac=0)
    assert llm.asked == [lost]
    assert result.cache["torn_lines"] == 1 and result.cache["loaded"] == 3
    assert any("torn" in w for w in result.warnings)
    assert len(journal(cache)) == 4  # every line parses again
    assert cache.read_bytes().endswith(b"\n")


def test_torn_multibyte_tail_and_corrupt_lines_are_tolerated(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = [("u00", "u00", "Zürich Büro", "zürich.md", "marker u00 über die Öffnungszeiten und Schlüssel")]
    run(units, FakeLLM(), cache, frac=0)
    good = cache.read_bytes()
    cache.write_bytes(b"not json\n[1, 2]\n" + good + "{\"key\": \"ü".encode()[:-1])  # cut inside a character
    llm = FakeLLM()
    result = run(units, llm, cache, frac=0)
    assert llm.calls == 0
    assert result.cache["corrupt_lines"] == 2 and result.cache["torn_lines"] == 1
    assert len(journal(cache)) == 1


def test_appends_after_a_torn_line_start_on_a_fresh_line(tmp_path):
    cache = tmp_path / "cache.jsonl"
    run(make_units(2), FakeLLM(), cache, frac=0)
    with open(cache, "ab") as fh:
        fh.write(b'{"key": "half')
    seen_mid_run = []

    def ask(messages):  # while u03 is asked, u02 is already journaled; the file must parse
        if "marker u03" in messages[-1]["content"]:
            seen_mid_run.extend(r["unit_id"] for r in journal(cache))
        return FakeLLM()(messages)

    result = run(make_units(4), ask, cache, frac=0)  # appends u02, u03 after repairing the tail
    assert seen_mid_run == ["u00", "u01", "u02"] and result.cache["torn_lines"] == 1
    assert sorted(r["unit_id"] for r in journal(cache)) == ["u00", "u01", "u02", "u03"]


def test_the_lock_keeps_a_second_writer_out(tmp_path):
    cache = tmp_path / "cache.jsonl"
    with QuestionCache(cache):
        llm = FakeLLM()
        with pytest.raises(CacheLockedError, match="another process"):
            run(make_units(2), llm, cache, lock_timeout=0.1)
        assert llm.calls == 0
    assert run(make_units(2), FakeLLM(), cache, lock_timeout=0.1).calls == 3  # free again


def test_invalid_parameters_raise_before_any_call_or_file(tmp_path):
    cache = tmp_path / "sub" / "cache.jsonl"
    for over in ({"k": 0}, {"frac": 1.0}, {"frac": -0.5}, {"model": ""}, {"corpus_signature": ""}, {"max_units": 0}):
        llm = FakeLLM()
        with pytest.raises(ValueError):
            run(make_units(3), llm, cache, **over)
        assert llm.calls == 0, over
    assert not cache.parent.exists()


def test_write_carries_the_generator_header_and_loads_back(tmp_path):
    cache = tmp_path / "cache.jsonl"
    units = make_units(6)
    result = run(units, FakeLLM(), cache, k=3, frac=0.2, masking=True)
    out = tmp_path / "questions.jsonl"
    fingerprint = write_generated_question_set(out, result)
    qs = load_question_set(out, corpus_signature=SIG, doc_ids=[u[1] for u in units])
    assert qs.fingerprint == fingerprint and len(qs.questions) == len(result.questions)
    h = qs.header
    assert (h["generator_model"], h["prompt_version"], h["k"], h["frac"], h["masking"]) == (
        "fake-1", PROMPT_VERSION, 3, 0.2, "on")
    assert qs.counts()["abstention"] == result.forms["abstention"] == 5  # ceil(0.2 * 18 / 0.8)
    assert qs.counts()["form_MATCH"] == result.forms["MATCH"]


# --- SIGKILL in the middle of a run ----------------------------------------------------------

KILL_UNITS = 30

CHILD = r"""
import os, sys, time
from eval_pipeline.questions.cache import generate_question_set
from tests.unit.questions.test_question_cache import kill_units, kill_reply, MARKER_RE

cache, log = sys.argv[1], sys.argv[2]
log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

def ask(messages):
    uid = MARKER_RE.search(messages[-1]["content"]).group(1)
    os.write(log_fd, (uid + "\n").encode())  # logged before the call "returns"
    time.sleep(0.05)
    return kill_reply(uid)

generate_question_set(kill_units(), ask=ask, cache_path=cache, model="fake", k=2, frac=0.0,
                      corpus_signature="sig")
"""

MARKER_RE = re.compile(r"\bmarker (u\d+)")


def kill_units():
    return make_units(KILL_UNITS)


def kill_reply(uid: str) -> str:
    return f"MATCH: What does knob one of {uid} control?\nGAP: How do I turn {uid} down a little?"


def test_sigkill_mid_generation_loses_at_most_the_unit_in_flight(tmp_path):
    cache, log = tmp_path / "cache.jsonl", tmp_path / "asked.log"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(cache), str(log)],
        cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if log.exists() and len(log.read_text().split()) >= 10:
                break
            if child.poll() is not None:
                pytest.fail(f"child exited before the kill: {child.stderr.read().decode()}")
            time.sleep(0.005)
        assert child.poll() is None, "the child must still be generating when it is killed"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    first = log.read_text().split()
    assert 10 <= len(first) < KILL_UNITS

    second: list[str] = []

    def recording_ask(messages):
        uid = MARKER_RE.search(messages[-1]["content"]).group(1)
        second.append(uid)
        return kill_reply(uid)

    result = generate_question_set(kill_units(), ask=recording_ask, cache_path=cache, model="fake", k=2,
                                   frac=0.0, corpus_signature="sig")
    asked = Counter(first + second)
    twice = sorted(u for u, n in asked.items() if n > 1)
    assert len(twice) <= 1 and set(twice) <= {first[-1]}  # only the one in flight at the kill
    assert max(asked.values()) <= 2
    all_ids = {u[0] for u in kill_units()}
    assert set(asked) == all_ids
    assert result.failed_units == [] and {q.gold[0] for q in result.questions} == all_ids
    assert len(result.questions) == 2 * KILL_UNITS
    assert result.units_cached == KILL_UNITS - len(second)
    assert result.cache["torn_lines"] <= 1
    assert sorted(r["unit_id"] for r in journal(cache)) == sorted(all_ids)


def test_concurrent_map_journals_every_unit_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    def pool_map(fn, items):
        with ThreadPoolExecutor(6) as ex:
            futures = [ex.submit(fn, item) for item in items]
        return [f.exception() or f.result() for f in futures]

    cache = tmp_path / "cache.jsonl"
    units = make_units(24)
    result = run(units, FakeLLM(fail={"u05"}), cache, frac=0, map_fn=pool_map)
    assert result.failed_units == ["u05"]
    assert sorted(r["unit_id"] for r in journal(cache)) == sorted(u[0] for u in units if u[0] != "u05")
    llm = FakeLLM()
    assert run(units, llm, cache, frac=0, map_fn=pool_map).complete and llm.asked == ["u05"]
