"""Answer-run history against the real embedded Postgres (`pg_uri`).

Every test gets its own table prefix, so tests never see each other's rows.
"""

from __future__ import annotations

import math
import threading
import uuid

import psycopg
import pytest

from eval_pipeline.gates.answers import evaluate_answer_gate
from eval_pipeline.history.answers import (
    accept_answer_run,
    answer_comparable,
    answer_history_of,
    previous_answer_run,
    read_answer_runs,
    record_answer_run,
    reference_answer_run,
)
from eval_pipeline.history.runs import table_names

pytestmark = pytest.mark.integration

YARDSTICK = "decision:api.example.com:grader-1:v1+abcd1234"
GENERATOR = "api.example.com:gen-1->gen-1-0613"
TOL = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}
KEY = ("variant", "grader", "set_id", "set_fingerprint", "corpus_signature", "yardstick")


def row(pass_rate=0.8, mean_score=0.8, **overrides):
    base = {
        "variant": "bm25",
        "grader": "decision",
        "set_id": "team.support",
        "set_fingerprint": "fp-1",
        "corpus_signature": "corpus-1",
        "generator": GENERATOR,
        "yardstick": YARDSTICK,
        "limited": False,
        "errored": 0,
        "eligible": True,
        "n_scored": 20,
        "pass_rate": pass_rate,
        "mean_score": mean_score,
    }
    base.update(overrides)
    return base


def key_of(r, **overrides):
    return {**{k: r[k] for k in KEY}, **overrides}


@pytest.fixture
def prefix(pg_uri):
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(name).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def table_exists(uri, prefix):
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table_names(prefix)["measurements"],)).fetchone()[0]


def previous(uri, prefix, r, before=None, **overrides):
    return previous_answer_run(uri, **key_of(r, **overrides), before_run_id=before, prefix=prefix)


def reference(uri, prefix, r, before=None, **overrides):
    return reference_answer_run(uri, **key_of(r, **overrides), before_run_id=before, prefix=prefix)


# ---------------------------------------------------------------------------
# recording and reading back
# ---------------------------------------------------------------------------


def test_a_fresh_database_has_no_history_and_reading_creates_nothing(pg_uri, prefix):
    r = row()
    assert previous(pg_uri, prefix, r) is None
    assert reference(pg_uri, prefix, r, before="run-1") is None
    assert read_answer_runs(pg_uri, prefix=prefix) == []
    assert not table_exists(pg_uri, prefix)


def test_record_and_read_back(pg_uri, prefix):
    rows = [
        row(0.75, 0.7, pass_rate_ci_low=0.55, pass_rate_ci_high=0.9, mean_ci_low=0.6, mean_ci_high=0.8,
            variant_config={"engine": "bm25", "k": 5}, provenance={"code_version": "abc123"}),
        row(math.nan, None, grader="deterministic", yardstick="deterministic:v1", n_scored=0, eligible=False),
        row(0.5, 0.5, run_id="run-1", variant="dense", generator=None, eligible=False),
    ]
    record_answer_run(pg_uri, "run-1", rows, prefix=prefix)
    got = read_answer_runs(pg_uri, prefix=prefix)
    assert [(g["run_id"], g["variant"], g["grader"]) for g in got] == [
        ("run-1", "bm25", "decision"), ("run-1", "bm25", "deterministic"), ("run-1", "dense", "decision")]
    first = got[0]
    assert {k: first[k] for k in KEY} == key_of(rows[0])
    assert (first["limited"], first["errored"], first["eligible"], first["n_scored"]) == (False, 0, True, 20)
    assert (first["pass_rate"], first["mean_score"]) == (0.75, 0.7)
    assert (first["pass_rate_ci_low"], first["pass_rate_ci_high"], first["mean_ci_low"], first["mean_ci_high"]) == (
        0.55, 0.9, 0.6, 0.8)
    assert first["variant_config"] == {"engine": "bm25", "k": 5}
    assert first["provenance"] == {"code_version": "abc123"}
    assert first["created_at"] is not None and got[0]["seq"] < got[1]["seq"] < got[2]["seq"]
    # NULL metrics and bounds come back as NaN; absent jsonb as {}
    assert math.isnan(got[1]["pass_rate"]) and math.isnan(got[1]["mean_score"])
    assert math.isnan(got[1]["mean_ci_low"]) and got[1]["variant_config"] == {} and got[1]["provenance"] == {}
    assert got[2]["generator"] is None
    assert [g["variant"] for g in read_answer_runs(pg_uri, variant="dense", prefix=prefix)] == ["dense"]
    assert read_answer_runs(pg_uri, run_id="run-9", prefix=prefix) == []
    # the stored columns: no answer text anywhere
    with psycopg.connect(pg_uri) as conn:
        cols = [c for (c,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            (table_names(prefix)["measurements"],)).fetchall()]
    assert not [c for c in cols if "answer" in c or "text" in c]
    assert cols[:3] == ["run_id", "variant", "aspect"]


def test_re_recording_a_run_replaces_its_rows_and_keeps_its_place(pg_uri, prefix):
    record_answer_run(pg_uri, "run-1", [row(0.5, 0.5), row(0.4, 0.4, variant="dense")], prefix=prefix)
    record_answer_run(pg_uri, "run-2", [row(0.6, 0.6)], prefix=prefix)
    before = {(r["run_id"], r["variant"]): r for r in read_answer_runs(pg_uri, prefix=prefix)}
    record_answer_run(pg_uri, "run-1", [row(0.55, 0.52)], prefix=prefix)
    after = read_answer_runs(pg_uri, prefix=prefix)
    assert [(r["run_id"], r["variant"], r["pass_rate"]) for r in after] == [
        ("run-1", "bm25", 0.55), ("run-2", "bm25", 0.6)]
    assert after[0]["seq"] == before[("run-1", "bm25")]["seq"]
    assert after[0]["created_at"] == before[("run-1", "bm25")]["created_at"]
    # the re-recorded run-1 is still before run-2: run-2 stays the previous run
    assert previous(pg_uri, prefix, row(), before="run-3")["run_id"] == "run-2"
    assert reference(pg_uri, prefix, row(), before="run-3")["run_id"] == "run-1"
    # and recording the same thing twice changes nothing
    record_answer_run(pg_uri, "run-1", [row(0.55, 0.52)], prefix=prefix)
    assert read_answer_runs(pg_uri, prefix=prefix) == after


@pytest.mark.parametrize("overrides, reason", [
    ({"limited": True}, "limited"),
    ({"errored": 1}, "could not be generated"),
    ({"generator": None}, "generator is unknown"),
    ({"generator": "   "}, "generator is unknown"),
    ({"yardstick": "decision"}, "no single grader"),
    ({"yardstick": "decision:failed"}, "no single grader"),
    ({"yardstick": "deterministic:v1"}, "does not belong"),
    ({"corpus_signature": None}, "corpus_signature unknown"),
    ({"n_scored": 0}, "no answer was scored"),
    ({"pass_rate": math.nan}, "NaN"),
])
def test_an_ineligible_row_claiming_eligible_is_refused_and_nothing_is_written(pg_uri, prefix, overrides, reason):
    record_answer_run(pg_uri, "run-0", [row()], prefix=prefix)
    with pytest.raises(ValueError, match="claims eligible=True") as info:
        record_answer_run(pg_uri, "run-1", [row(variant="dense"), row(**overrides)], prefix=prefix)
    assert reason in str(info.value)
    assert [r["run_id"] for r in read_answer_runs(pg_uri, prefix=prefix)] == ["run-0"]


def test_recording_a_limited_row_as_eligible_on_a_fresh_database_touches_nothing(pg_uri, prefix):
    with pytest.raises(ValueError, match="claims eligible=True.*limited"):
        record_answer_run(pg_uri, "run-1", [row(limited=True)], prefix=prefix)
    assert not table_exists(pg_uri, prefix)


@pytest.mark.parametrize("rows, match", [
    ([], "no rows"),
    ([row(), row()], "more than one row"),
    ([{**row(), "answers": ["the answer text"]}], "unknown key"),
    ([{k: v for k, v in row().items() if k != "eligible"}], "missing key"),
    ([row(run_id="run-9")], "run_id"),
    ([row(grader="vibes")], "grader must be one of"),
    ([row(pass_rate=1.2)], "pass_rate"),
    ([row(errored=True)], "errored"),
    ([row(limited=0)], "limited"),
    ([row(set_fingerprint="")], "set_fingerprint"),
    ([row(provenance={"x": math.nan})], "JSON"),
    ([row(pass_rate_ci_low=0.9, pass_rate_ci_high=0.1)], "above"),
    (row(), "list"),
])
def test_invalid_rows_are_refused(pg_uri, prefix, rows, match):
    with pytest.raises(ValueError, match=match):
        record_answer_run(pg_uri, "run-1", rows, prefix=prefix)
    assert not table_exists(pg_uri, prefix)


def test_numpy_values_from_a_pandas_row_are_recorded_as_python_values(pg_uri, prefix):
    import numpy as np

    record_answer_run(pg_uri, "run-1", [row(np.float64(0.5), np.float32(0.25), limited=np.False_, eligible=np.True_,
                                            errored=np.int64(0), n_scored=np.int64(4))], prefix=prefix)
    got = read_answer_runs(pg_uri, prefix=prefix)[0]
    assert (got["limited"], got["eligible"], got["n_scored"], got["pass_rate"], got["mean_score"]) == (
        False, True, 4, 0.5, 0.25)
    with pytest.raises(ValueError, match="claims eligible=True"):
        record_answer_run(pg_uri, "run-2", [row(limited=np.True_, eligible=np.True_)], prefix=prefix)


def test_the_table_refuses_an_eligible_limited_row_too(pg_uri, prefix):
    record_answer_run(pg_uri, "run-0", [row()], prefix=prefix)
    with psycopg.connect(pg_uri) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(f'UPDATE "{table_names(prefix)["measurements"]}" SET limited = true')


def test_concurrent_first_writers_do_not_race_on_creating_the_table(pg_uri, prefix):
    errors = []

    def write(i):
        try:
            record_answer_run(pg_uri, f"run-{i}", [row()], prefix=prefix)
        except Exception as exc:  # noqa: BLE001 - collected and asserted
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(read_answer_runs(pg_uri, prefix=prefix)) == 6


# ---------------------------------------------------------------------------
# which rows are the yardsticks
# ---------------------------------------------------------------------------


def test_previous_is_the_latest_eligible_and_reference_the_first(pg_uri, prefix):
    for i, value in enumerate((0.6, 0.7, 0.8), start=1):
        record_answer_run(pg_uri, f"run-{i}", [row(value, value)], prefix=prefix)
    r = row()
    prev, ref = previous(pg_uri, prefix, r, before="run-4"), reference(pg_uri, prefix, r, before="run-4")
    assert (prev["run_id"], prev["pass_rate"]) == ("run-3", 0.8)
    assert (ref["run_id"], ref["pass_rate"]) == ("run-1", 0.6)
    # the current run is never its own yardstick, and rows recorded after it do not count
    assert previous(pg_uri, prefix, r, before="run-3")["run_id"] == "run-2"
    assert previous(pg_uri, prefix, r, before="run-2")["run_id"] == "run-1"
    assert previous(pg_uri, prefix, r, before="run-1") is None
    assert reference(pg_uri, prefix, r, before="run-1") is None
    assert reference(pg_uri, prefix, r, before="run-3")["run_id"] == "run-1"
    # without before_run_id: all rows
    assert previous(pg_uri, prefix, r)["run_id"] == "run-3"


@pytest.mark.parametrize("overrides", [
    {"limited": True, "eligible": False},
    {"generator": None, "eligible": False},
    {"errored": 3, "eligible": False},
    {"eligible": False},  # e.g. its gate failed
    {"yardstick": "decision", "eligible": False},
])
def test_an_ineligible_run_never_becomes_the_previous_run(pg_uri, prefix, overrides):
    record_answer_run(pg_uri, "run-1", [row(0.8, 0.8)], prefix=prefix)
    record_answer_run(pg_uri, "run-2", [row(0.3, 0.3, **overrides)], prefix=prefix)
    assert previous(pg_uri, prefix, row(), before="run-3")["run_id"] == "run-1"
    assert reference(pg_uri, prefix, row(), before="run-3")["run_id"] == "run-1"


def test_an_ineligible_run_alone_is_no_yardstick(pg_uri, prefix):
    record_answer_run(pg_uri, "run-1", [row(limited=True, eligible=False)], prefix=prefix)
    record_answer_run(pg_uri, "run-2", [row(generator=None, eligible=False)], prefix=prefix)
    assert previous(pg_uri, prefix, row(), before="run-3") is None
    assert reference(pg_uri, prefix, row(), before="run-3") is None


@pytest.mark.parametrize("field, value", [
    ("set_fingerprint", "fp-2"),
    ("set_id", "team.other"),
    ("corpus_signature", "corpus-2"),
    ("yardstick", "decision:api.example.com:grader-2:v1+abcd1234"),
    ("yardstick", "decision:api.example.com:grader-1:v2+ffff0000"),
    ("variant", "dense"),
])
def test_another_key_is_never_compared(pg_uri, prefix, field, value):
    record_answer_run(pg_uri, "run-1", [row(0.9, 0.9)], prefix=prefix)
    record_answer_run(pg_uri, "run-2", [row(0.2, 0.2, **{field: value})], prefix=prefix)
    # the other key's run is invisible from this key, and this one from the other
    assert previous(pg_uri, prefix, row(), before="run-3")["run_id"] == "run-1"
    assert previous(pg_uri, prefix, row(), before="run-3", **{field: value})["run_id"] == "run-2"
    assert reference(pg_uri, prefix, row(), before="run-3", **{field: value})["run_id"] == "run-2"
    assert previous(pg_uri, prefix, row(), before="run-1", **{field: value}) is None


@pytest.mark.parametrize("generator", ["api.example.com:gen-2->gen-2",
                                       "api.example.com:gen-1->gen-1-0125"])  # same model sent, another answered
def test_another_generator_is_the_treatment_on_the_same_measurement(pg_uri, prefix, generator):
    """The generator is what a team tunes: not part of the key, so a run of another generator
    is judged against the same measurement's history."""
    record_answer_run(pg_uri, "run-1", [row(0.9, 0.9)], prefix=prefix)
    found = previous(pg_uri, prefix, row(), before="run-2", generator=generator)
    assert found["run_id"] == "run-1" and found["generator"] == GENERATOR


def test_another_grader_is_never_compared(pg_uri, prefix):
    record_answer_run(pg_uri, "run-1", [row(0.9, 0.9, grader="deterministic", yardstick="deterministic:v1")],
                      prefix=prefix)
    assert previous(pg_uri, prefix, row(), before="run-2") is None
    assert previous(pg_uri, prefix, row(), before="run-2", grader="deterministic",
                    yardstick="deterministic:v1")["run_id"] == "run-1"
    assert previous(pg_uri, prefix, row(), before="run-2", grader="deterministic",
                    yardstick="deterministic:v2") is None


@pytest.mark.parametrize("overrides", [
    {"corpus_signature": None}, {"yardstick": "decision"}, {"yardstick": "decision:failed"},
])
def test_an_incomplete_or_uncomparable_key_matches_nothing(pg_uri, prefix, overrides):
    record_answer_run(pg_uri, "run-1", [row()], prefix=prefix)
    record_answer_run(pg_uri, "run-2", [row(**overrides, eligible=False)], prefix=prefix)
    assert previous(pg_uri, prefix, row(), before="run-3", **overrides) is None
    assert reference(pg_uri, prefix, row(), before="run-3", **overrides) is None


def test_lookup_arguments_are_checked(pg_uri, prefix):
    with pytest.raises(ValueError, match="before_run_id"):
        previous(pg_uri, prefix, row(), before=3)
    with pytest.raises(ValueError, match="variant"):
        previous(pg_uri, prefix, row(), variant=["bm25"])
    with pytest.raises(ValueError, match="prefix"):
        read_answer_runs(pg_uri, prefix="Bad-Prefix")


# ---------------------------------------------------------------------------
# the gate on recorded history
# ---------------------------------------------------------------------------


def gate_and_record(uri, prefix, run_id, r, *, strict=False):
    """What the pipeline does: look up the yardsticks and the measurement's history, judge,
    record with eligibility."""
    current = {**r, "run_id": run_id}
    prev, ref = previous(uri, prefix, r, before=run_id), reference(uri, prefix, r, before=run_id)
    history = answer_history_of(uri, variant=r["variant"], grader=r["grader"], before_run_id=run_id, prefix=prefix)
    result = evaluate_answer_gate(current, prev, ref, TOL, strict=strict, history=history)
    eligible = result.passed and answer_comparable(r)[0] and r["errored"] == 0
    record_answer_run(uri, run_id, [{**r, "eligible": eligible}], prefix=prefix)
    return result


def test_a_regression_in_small_steps_fails_against_the_reference(pg_uri, prefix):
    first = gate_and_record(pg_uri, prefix, "run-1", row(0.80, 0.80))
    assert (first.passed, first.state) == (True, "first_run")
    second = gate_and_record(pg_uri, prefix, "run-2", row(0.74, 0.74))
    assert (second.passed, second.state) == (True, "comparable")
    third = gate_and_record(pg_uri, prefix, "run-3", row(0.68, 0.68))
    assert (third.passed, third.state) == (False, "comparable")
    assert {(r["against"], r["yardstick_run_id"], r["passed"]) for r in third.rows} == {
        ("previous", "run-2", True), ("reference", "run-1", False)}
    # the failed run is not eligible: the next run is judged against run-2 and run-1 again
    fourth = gate_and_record(pg_uri, prefix, "run-4", row(0.75, 0.75))
    assert fourth.passed
    assert {r["yardstick_run_id"] for r in fourth.rows if r["against"] == "previous"} == {"run-2"}


def test_a_limited_run_is_not_judged_and_never_becomes_a_yardstick(pg_uri, prefix):
    gate_and_record(pg_uri, prefix, "run-1", row(0.8, 0.8))
    # a part of the set cannot be compared with the measurement's history: it fails, strict or not
    lenient = gate_and_record(pg_uri, prefix, "run-2", row(0.1, 0.1, limited=True), strict=False)
    assert (lenient.passed, lenient.state) == (False, "not_comparable") and "history" in lenient.message
    strict = evaluate_answer_gate({**row(0.1, 0.1, limited=True), "run_id": "run-2"}, None, None, TOL, strict=True)
    assert (strict.passed, strict.state) == (False, "not_comparable")
    assert read_answer_runs(pg_uri, run_id="run-2", prefix=prefix)[0]["eligible"] is False
    nxt = gate_and_record(pg_uri, prefix, "run-3", row(0.75, 0.75))
    assert nxt.passed and {r["yardstick_run_id"] for r in nxt.rows} == {"run-1"}


def test_recorded_rows_are_valid_yardsticks_for_the_gate(pg_uri, prefix):
    record_answer_run(pg_uri, "run-1", [row(0.8, 0.8)], prefix=prefix)
    prev = previous(pg_uri, prefix, row(), before="run-2")
    result = evaluate_answer_gate({**row(0.7, 0.7), "run_id": "run-2"}, prev, prev, TOL, strict=True)
    assert result.passed and len(result.rows) == 4  # equal to the tolerance: passes
    result = evaluate_answer_gate({**row(0.8, 0.8, errored=1), "run_id": "run-2"}, prev, prev, TOL, strict=True)
    assert not result.passed and "metrics are incomplete" in result.message


def test_an_accepted_run_becomes_the_previous_run_and_the_reference(pg_uri, prefix):
    """A deliberate trade-off the gate failed (run-2, not eligible) stays failing every later
    run until a user accepts it; accepted, it is both yardsticks of the next run."""
    record_answer_run(pg_uri, "run-1", [row(0.8, 0.8)], prefix=prefix)
    record_answer_run(pg_uri, "run-2", [row(0.6, 0.6, eligible=False)], prefix=prefix)
    r = row()
    assert previous(pg_uri, prefix, r, before="run-3")["run_id"] == "run-1"
    # recorded not eligible with no gate state to say why: it may be a measured regression, so
    # the whole run is not accepted; named, it is
    accepted, refused = accept_answer_run(pg_uri, "run-2", prefix=prefix)
    assert accepted == [] and len(refused) == 1 and "--variant bm25" in refused[0]
    accepted, refused = accept_answer_run(pg_uri, "run-2", variants=["bm25"], prefix=prefix)
    assert accepted == [("bm25", "decision")] and refused == []
    assert previous(pg_uri, prefix, r, before="run-3")["run_id"] == "run-2"
    assert reference(pg_uri, prefix, r, before="run-3")["run_id"] == "run-2"
    gate = evaluate_answer_gate({**row(0.6, 0.6), "run_id": "run-3"}, previous(pg_uri, prefix, r, before="run-3"),
                                reference(pg_uri, prefix, r, before="run-3"), TOL, strict=False)
    assert gate.passed and gate.state == "comparable"


def test_a_run_that_can_never_be_a_yardstick_is_not_accepted(pg_uri, prefix):
    record_answer_run(pg_uri, "run-1", [row(0.8, 0.8, limited=True, eligible=False),
                                        row(0.8, 0.8, grader="deterministic", yardstick="deterministic:v1",
                                            errored=2, eligible=False)], prefix=prefix)
    accepted, refused = accept_answer_run(pg_uri, "run-1", prefix=prefix)
    assert accepted == []
    assert len(refused) == 2 and any("limited" in r for r in refused) and any("could not be generated" in r
                                                                              for r in refused)
    assert previous(pg_uri, prefix, row(), before="run-9") is None
    assert accept_answer_run(pg_uri, "no-such-run", prefix=prefix) == ([], [])
