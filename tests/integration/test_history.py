"""Run history against the real embedded Postgres (`pg_uri`), plus the pure provenance rules.

Every database test gets its own table prefix, so tests never see each other's runs.
"""

from __future__ import annotations

import copy
import math
import uuid

import pandas as pd
import psycopg
import pytest

from eval_pipeline.history import runs as history
from eval_pipeline.history.runs import (
    SCORING_PROTOCOL,
    compare_provenance,
    labels_fingerprint,
    previous_run,
    read_run,
    record_run,
    table_names,
)
from eval_pipeline.metrics.retrieval import score_queries
from eval_pipeline.scoring.variant import summarize
from eval_pipeline.metrics.statistics import metric_intervals
from eval_pipeline.questions.sets import Question, question_set_fingerprint

pytestmark = pytest.mark.integration

QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}, "q4": {}}  # q4: abstention


def per_query_frame(variant: str, rankings: dict, errored=()) -> pd.DataFrame:
    """A frame with the columns score_variant produces that history and summarize use."""
    df = score_queries(rankings, QRELS, errored=errored)
    df.insert(0, "variant", variant)
    df["doc_ids"] = [None if q in errored else list(rankings.get(q, [])) for q in df["qid"]]
    df["latency_ms"] = 12.5
    df["miss_class"] = [
        ("errored" if q in errored else "never_candidate") if a and h == 0 else None
        for q, a, h in zip(df["qid"], df["answerable"], df["hit@10"])
    ]
    return df


def sweep(scale: int = 0) -> dict:
    """Two variants; `scale` shifts variant b's rankings so runs differ."""
    a = {"q1": ["d1", "x"], "q2": ["x", "d2"], "q3": ["x"], "q4": []}
    b = {"q1": ["d1"], "q2": ["d2"], "q3": ["d3"] if scale else ["x", "y"], "q4": ["x"]}
    return {"a": per_query_frame("a", a), "b": per_query_frame("b", b, errored=["q3"] if scale == 2 else ())}


def provenance(**overrides) -> dict:
    base = {
        "corpus_signature": "corpus-1",
        "question_set_fingerprint": "qs-1",
        "labels_fingerprint": "labels-1",
        "benchmark_fingerprint": "bench-1",
        "embedder": "all-MiniLM-L6-v2",
        "embedder_revision": "rev-1",
        "chunking": {"size": 512, "overlap": 64},
        "scoring_protocol": SCORING_PROTOCOL,
        "code_version": "abc123",
        "variants": {"a": {"engine": "hybrid", "fusion": "rrf"}, "b": {"engine": "pg-dense"}},
    }
    base.update(overrides)
    return base


def record(uri, prefix, run_id, *, per_query=None, limited=False, prov=None, with_intervals=True):
    per_query = per_query if per_query is not None else sweep()
    record_run(
        uri,
        run_id=run_id,
        provenance=prov if prov is not None else provenance(),
        summary=summarize(per_query),
        per_query=per_query,
        intervals=metric_intervals(per_query, ["mrr", "hit@1"]) if with_intervals else None,
        limited=limited,
        prefix=prefix,
    )


@pytest.fixture
def prefix(pg_uri):
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(name).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def count(uri, table, run_id=None):
    with psycopg.connect(uri) as conn:
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            return None
        if run_id is None:
            return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        return conn.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = %s', (run_id,)).fetchone()[0]


# ---------------------------------------------------------------------------
# recording and reading back
# ---------------------------------------------------------------------------


@pytest.mark.integration
def test_record_and_read_back(pg_uri, prefix):
    per_query = sweep()
    snapshot = copy.deepcopy(per_query)
    prov = provenance()
    del prov["scoring_protocol"]  # filled in with the current protocol
    record(pg_uri, prefix, "run-1", per_query=per_query, prov=prov)
    assert "scoring_protocol" not in prov  # input not mutated
    for key in per_query:
        assert per_query[key].equals(snapshot[key])

    run = read_run(pg_uri, "run-1", prefix=prefix)
    assert run["run_id"] == "run-1" and run["limited"] is False and run["created_at"] is not None
    assert run["provenance"] == {**prov, "scoring_protocol": SCORING_PROTOCOL}

    metrics = run["metrics"].set_index(["variant", "metric"])
    summary = summarize(per_query).set_index("variant")
    # a: q1 rank 1, q2 rank 2, q3 miss -> mrr (1 + 0.5 + 0) / 3 = 0.5, hit@1 = 1/3
    assert metrics.loc[("a", "mrr"), "value"] == pytest.approx(0.5)
    assert metrics.loc[("a", "hit@1"), "value"] == pytest.approx(1 / 3)
    for variant in ("a", "b"):
        for metric in ("hit@1", "hit@5", "hit@10", "mrr", "ndcg@10", "map", "n_answerable", "latency_p50_ms"):
            assert metrics.loc[(variant, metric), "value"] == pytest.approx(summary.loc[variant, metric])
    intervals = metric_intervals(per_query, ["mrr", "hit@1"]).set_index(["variant", "metric"])
    assert metrics.loc[("a", "mrr"), "ci_low"] == pytest.approx(intervals.loc[("a", "mrr"), "low"])
    assert metrics.loc[("a", "mrr"), "ci_high"] == pytest.approx(intervals.loc[("a", "mrr"), "high"])
    assert math.isnan(metrics.loc[("a", "ndcg@10"), "ci_low"])  # no interval computed for it
    # q4 (abstention): a returned nothing (correct), b returned a document (not correct)
    assert metrics.loc[("a", "abstention_rate"), "value"] == 1.0
    assert metrics.loc[("b", "abstention_rate"), "value"] == 0.0

    questions = run["questions"].set_index(["variant", "qid"])
    assert len(questions) == 8  # 2 variants x 4 questions, abstention included
    assert questions.loc[("a", "q2"), "mrr"] == 0.5
    assert questions.loc[("a", "q2"), "doc_ids"] == ["x", "d2"]
    assert questions.loc[("a", "q3"), "miss_class"] == "never_candidate"
    assert pd.isna(questions.loc[("a", "q1"), "miss_class"])
    assert bool(questions.loc[("a", "q4"), "answerable"]) is False
    assert math.isnan(questions.loc[("a", "q4"), "hit@10"])  # abstention: NULL -> NaN

    assert read_run(pg_uri, "no-such-run", prefix=prefix) is None


@pytest.mark.integration
def test_errored_questions_are_recorded_with_null_doc_ids(pg_uri, prefix):
    record(pg_uri, prefix, "run-e", per_query=sweep(scale=2))
    questions = read_run(pg_uri, "run-e", prefix=prefix)["questions"].set_index(["variant", "qid"])
    row = questions.loc[("b", "q3")]
    assert bool(row["errored"]) and row["doc_ids"] is None and row["hit@10"] == 0.0 and row["miss_class"] == "errored"


@pytest.mark.integration
def test_re_recording_a_run_replaces_it_and_keeps_its_place(pg_uri, prefix):
    record(pg_uri, prefix, "run-1")
    record(pg_uri, prefix, "run-2")
    record(pg_uri, prefix, "run-1", per_query=sweep(scale=1), prov=provenance(code_version="def456"))
    names = table_names(prefix)
    assert count(pg_uri, names["runs"]) == 2
    assert count(pg_uri, names["questions"], "run-1") == 8
    run = read_run(pg_uri, "run-1", prefix=prefix)
    assert run["provenance"]["code_version"] == "def456"
    b_hit1 = run["metrics"].set_index(["variant", "metric"]).loc[("b", "hit@1"), "value"]
    assert b_hit1 == pytest.approx(1.0)  # scale=1: b hits every answerable question at rank 1
    # run-1 is still older than run-2
    assert previous_run(pg_uri, variant="a", prefix=prefix)["run_id"] == "run-2"
    assert previous_run(pg_uri, variant="a", before_run_id="run-2", prefix=prefix)["run_id"] == "run-1"


@pytest.mark.integration
def test_record_without_intervals(pg_uri, prefix):
    record(pg_uri, prefix, "run-1", with_intervals=False)
    prev = previous_run(pg_uri, variant="a", prefix=prefix)
    assert prev["intervals"] == {} and prev["metrics"]["mrr"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------
# previous_run
# ---------------------------------------------------------------------------


@pytest.mark.integration
def test_previous_run_skips_limited_and_later_runs(pg_uri, prefix):
    assert previous_run(pg_uri, variant="a", prefix=prefix) is None  # no tables yet
    only_a = {"a": sweep()["a"]}
    record(pg_uri, prefix, "r1")
    record(pg_uri, prefix, "r2", limited=True)
    record(pg_uri, prefix, "r3", per_query=only_a)
    record(pg_uri, prefix, "r4")

    def prev(variant, before=None, **kw):
        found = previous_run(pg_uri, variant=variant, before_run_id=before, prefix=prefix, **kw)
        return None if found is None else found["run_id"]

    assert prev("a") == "r4"
    assert prev("a", "r4") == "r3"
    assert prev("b", "r4") == "r1"  # r3 lacks b, r2 is limited
    assert prev("a", "r3") == "r1"  # r4 is later: ignored; r2 limited
    assert prev("a", "r1") is None
    assert prev("a", "not-recorded-yet") == "r4"  # the check may run before the record
    assert prev("c") is None

    found = previous_run(pg_uri, variant="b", before_run_id="r4", prefix=prefix)
    assert found["variant"] == "b" and found["limited"] is False
    assert found["provenance"]["corpus_signature"] == "corpus-1"
    assert set(found["intervals"]) == {"mrr", "hit@1"}
    low, high = found["intervals"]["mrr"]
    assert low <= found["metrics"]["mrr"] <= high


@pytest.mark.integration
def test_previous_run_result_feeds_compare_provenance(pg_uri, prefix):
    record(pg_uri, prefix, "r1")
    prev = previous_run(pg_uri, variant="a", prefix=prefix)
    cmp = compare_provenance(provenance(embedder_revision="rev-2"), prev, "a")
    assert cmp.state == "comparable" and cmp.previous_run_id == "r1"
    assert cmp.treatment_changes == ["embedder_revision: 'rev-1' -> 'rev-2'"]


# ---------------------------------------------------------------------------
# atomicity
# ---------------------------------------------------------------------------


def _failing_insert(real):
    def insert(cur, table, rows):
        real(cur, table, rows[: len(rows) // 2])  # half the rows are written...
        raise RuntimeError("connection lost mid-record")  # ...then the write fails

    return insert


@pytest.mark.integration
def test_failure_mid_record_leaves_nothing(pg_uri, prefix, monkeypatch):
    names = table_names(prefix)
    monkeypatch.setattr(history, "_insert_question_rows", _failing_insert(history._insert_question_rows))
    with pytest.raises(RuntimeError, match="mid-record"):
        record(pg_uri, prefix, "r1")
    # even the tables created inside the transaction are gone
    assert count(pg_uri, names["runs"]) is None
    monkeypatch.undo()

    record(pg_uri, prefix, "r1")
    before = read_run(pg_uri, "r1", prefix=prefix)
    monkeypatch.setattr(history, "_insert_question_rows", _failing_insert(history._insert_question_rows))
    with pytest.raises(RuntimeError):
        record(pg_uri, prefix, "r2")
    with pytest.raises(RuntimeError):  # a failed replacement keeps the old rows
        record(pg_uri, prefix, "r1", per_query=sweep(scale=1), prov=provenance(code_version="new"))
    monkeypatch.undo()

    assert read_run(pg_uri, "r2", prefix=prefix) is None
    assert count(pg_uri, names["metrics"], "r2") == 0 and count(pg_uri, names["questions"], "r2") == 0
    after = read_run(pg_uri, "r1", prefix=prefix)
    assert after["provenance"]["code_version"] == "abc123"
    assert after["metrics"].equals(before["metrics"]) and after["questions"].equals(before["questions"])


@pytest.mark.integration
def test_invalid_input_fails_before_touching_the_database(pg_uri, prefix):
    per_query = sweep()
    with pytest.raises(ValueError, match=r"only in per_query \['b'\]"):
        record_run(pg_uri, run_id="r1", provenance=provenance(), summary=summarize({"a": per_query["a"]}),
                   per_query=per_query, intervals=None, limited=False, prefix=prefix)
    with pytest.raises(ValueError, match="JSON-serializable"):
        record(pg_uri, prefix, "r1", prov=provenance(chunking=float("nan")))
    with pytest.raises(ValueError, match="limited must be"):
        record_run(pg_uri, run_id="r1", provenance=provenance(), summary=summarize(per_query),
                   per_query=per_query, intervals=None, limited="no", prefix=prefix)
    assert count(pg_uri, table_names(prefix)["runs"]) is None


@pytest.mark.parametrize("bad", ["", "1abc", "Eval", "eval-runs", 'x"; DROP TABLE y; --', "a" * 31, None])
def test_table_prefix_is_validated(bad):
    with pytest.raises(ValueError, match="table prefix"):
        table_names(bad)


# ---------------------------------------------------------------------------
# compare_provenance (pure)
# ---------------------------------------------------------------------------


def test_state_baseline_without_previous_run():
    cmp = compare_provenance(provenance(), None, "a")
    assert cmp.state == "first_run" and cmp.treatment_changes == [] and "first run" in cmp.reasons[0]


def test_state_comparable_with_identical_provenance():
    cmp = compare_provenance(provenance(), provenance(), "a")
    assert cmp.state == "comparable" and cmp.comparable and cmp.treatment_changes == []


@pytest.mark.parametrize("field", ["corpus_signature", "benchmark_fingerprint", "scoring_protocol"])
def test_state_mismatch_when_corpus_labels_or_protocol_change(field):
    cmp = compare_provenance(provenance(**{field: "changed"}), provenance(), "a")
    assert cmp.state == "mismatch" and not cmp.comparable
    assert any(r.startswith(f"{field} changed") for r in cmp.reasons)


@pytest.mark.parametrize("field", ["corpus_signature", "benchmark_fingerprint", "scoring_protocol"])
@pytest.mark.parametrize("bad", [None, "", "  ", 42, ["x"]])
@pytest.mark.parametrize("side", ["current", "previous"])
def test_state_unknown_when_a_required_field_is_missing_or_invalid(field, bad, side):
    broken = provenance(**{field: bad})
    if bad is None:
        del broken[field]
    current, previous = (broken, provenance()) if side == "current" else (provenance(), broken)
    cmp = compare_provenance(current, previous, "a")
    assert cmp.state == "unknown"
    assert any(field in r and side in r for r in cmp.reasons)


def test_known_mismatch_wins_over_a_missing_field():
    current = provenance(corpus_signature="corpus-2")
    del current["benchmark_fingerprint"]
    assert compare_provenance(current, provenance(), "a").state == "mismatch"


def test_unknown_when_provenance_is_not_a_mapping():
    assert compare_provenance(provenance(), {"run_id": "r1", "provenance": None}, "a").state == "unknown"
    assert compare_provenance(None, provenance(), "a").state == "unknown"  # type: ignore[arg-type]


def test_treatment_changes_are_reported_and_still_comparable():
    current = provenance(
        embedder="bge-small",
        embedder_revision="rev-9",
        chunking={"size": 256, "overlap": 64},
        variants={"a": {"engine": "hybrid", "fusion": "rrf", "reranker": {"kind": "cross-encoder"}},
                  "b": {"engine": "pg-keyword"}},
    )
    cmp = compare_provenance(current, provenance(), "a")
    assert cmp.state == "comparable"
    assert [c.split(":")[0] for c in cmp.treatment_changes] == [
        "embedder", "embedder_revision", "chunking", "variant 'a' config reranker"
    ]
    # the variant's change is the setting that changed, not the two whole configurations
    assert cmp.treatment_changes[-1] == "variant 'a' config reranker: added {'kind': 'cross-encoder'}"
    # b's config change is not a's treatment; dict key order is irrelevant
    reordered = provenance(chunking={"overlap": 64, "size": 512}, variants={"a": {"fusion": "rrf", "engine": "hybrid"}})
    assert compare_provenance(reordered, provenance(), "a").treatment_changes == []


def test_treatment_changes_are_reported_in_a_mismatch_too():
    cmp = compare_provenance(provenance(corpus_signature="c2", embedder="bge"), provenance(), "a")
    assert cmp.state == "mismatch" and cmp.treatment_changes == ["embedder: 'all-MiniLM-L6-v2' -> 'bge'"]


def test_reworded_questions_stay_comparable_and_are_a_named_treatment():
    cmp = compare_provenance(provenance(question_set_fingerprint="qs-2", code_version="zzz"), provenance(), "a")
    assert cmp.state == "comparable"
    assert [t for t in cmp.treatment_changes if "question_set_fingerprint" in t]
    assert any("question_set_fingerprint" in r for r in cmp.reasons)
    assert any("code_version" in r for r in cmp.reasons)


def test_compare_provenance_accepts_a_bare_provenance_and_does_not_mutate():
    current, previous = provenance(), provenance(embedder="other")
    snapshot = copy.deepcopy((current, previous))
    cmp = compare_provenance(current, previous, "a")
    assert cmp.state == "comparable" and cmp.previous_run_id is None
    assert (current, previous) == snapshot


# ---------------------------------------------------------------------------
# labels_fingerprint (pure)
# ---------------------------------------------------------------------------


def q(qid, gold, text="what?", relevance=None, **kw):
    return Question(qid=qid, question=text, gold=tuple(gold), relevance=relevance or {}, **kw)


def test_labels_fingerprint_ignores_wording_but_not_labels():
    base = [q("q1", ["d1"]), q("q2", ["d2", "d3"]), q("q3", [])]
    reworded = [q("q1", ["d1"], text="rephrased", form="GAP", gist="g"), q("q2", ["d3", "d2"]), q("q3", [])]
    assert labels_fingerprint(base) == labels_fingerprint(reworded)
    assert labels_fingerprint(base) == labels_fingerprint(list(reversed(base)))
    assert question_set_fingerprint(base) != question_set_fingerprint(reworded)  # the other one does change

    assert labels_fingerprint(base) != labels_fingerprint([q("q1", ["d9"]), *base[1:]])  # gold changed
    assert labels_fingerprint(base) != labels_fingerprint([*base[:2], q("q3", ["d1"])])  # abstention now answerable
    assert labels_fingerprint(base) != labels_fingerprint([q("q0", ["d1"]), *base[1:]])  # qid changed
    graded = [q("q1", ["d1"], relevance={"d1": 2}), *base[1:]]
    assert labels_fingerprint(base) != labels_fingerprint(graded)  # graded relevance changed
    assert len(labels_fingerprint(base)) == 16


def test_labels_fingerprint_input_errors():
    with pytest.raises(ValueError, match="duplicate qid 'q1'"):
        labels_fingerprint([q("q1", ["d1"]), q("q1", ["d2"])])
    with pytest.raises(ValueError, match="Question objects"):
        labels_fingerprint([{"qid": "q1"}])
    with pytest.raises(ValueError, match="iterable of Question"):
        labels_fingerprint(q("q1", ["d1"]))


def test_labels_fingerprint_on_the_tiny_fixture(tiny_questions):
    assert labels_fingerprint(tiny_questions.questions) == labels_fingerprint(list(tiny_questions.questions))


def test_a_changed_setting_is_named_with_its_path():
    from eval_pipeline.history.runs import setting_changes

    before = {"engine": "hybrid", "depth": 5, "reranker": {"kind": "none"}, "legs": ["keyword", "dense"]}
    after = {"engine": "hybrid", "depth": 3, "reranker": {"kind": "mmr", "lambda_": 0.7}, "legs": ["keyword", "dense"]}
    assert setting_changes(before, after) == ["depth: 5 -> 3", "reranker.kind: 'none' -> 'mmr'",
                                              "reranker.lambda_: added 0.7"]
    assert setting_changes({"a": 1}, {}) == ["a: removed (was 1)"]
    assert setting_changes(None, {"a": 1}) == ["None -> {'a': 1}"]
