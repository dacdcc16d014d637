"""The report's `verdict` metadata entry (eval_pipeline.reporting.verdict_entry): the headline and
each variant's gate, under the length Dagster shows inline (a longer entry opens in a dialog
scrolled to its bottom)."""

from types import SimpleNamespace

from eval_pipeline.reporting.verdict_entry import INLINE_LIMIT, verdict_entry


def _gate(passed, state="comparable", message=""):
    return SimpleNamespace(passed=passed, state=state, message=message)


def _verdict(gates, rows, answers=None):
    return SimpleNamespace(gates=gates, gate_rows=lambda: rows, answers=answers)


def _drop(variant, metric, against, actual=0.0, yardstick=1.0, tolerance=0.05):
    return {"variant": variant, "state": "comparable", "metric": metric, "actual": actual, "yardstick": yardstick,
            "delta": actual - yardstick, "tolerance": tolerance, "passed": False, "against": against}


HEADLINE = "Best variant: bm25 (nDCG@10 1.000, MRR 1.000). Gate FAILED for `dense`."


def test_the_failed_variant_comes_first_with_what_dropped_against_what():
    rows = [_drop("dense", m, a) for a in ("previous", "reference") for m in ("hit@1", "ndcg@10")]
    rows.append({**_drop("bm25", "hit@1", "previous", actual=1.0), "passed": True})
    text = verdict_entry(_verdict({"bm25": _gate(True), "dense": _gate(False)}, rows), HEADLINE)
    lines = text.splitlines()
    assert lines[0] == f"**{HEADLINE}**"
    assert lines[2] == ("- `dense`: **FAILED** (comparable): dropped past its tolerance: hit@1 0.000 vs 1.000 "
                        "(-1.000, tol 0.05, previous/reference); ndcg@10 0.000 vs 1.000 (-1.000, tol 0.05, "
                        "previous/reference)")
    assert lines[3] == "- `bm25`: passed (comparable)"
    assert len(lines) == 4
    assert len(text) < INLINE_LIMIT


def test_a_drop_measured_against_the_previous_run_alone_names_it_alone():
    """A second run, whose previous run is also its reference: one comparison, named `previous`
    (the UI's three-run test sees `previous/reference`, two runs of equal numbers)."""
    rows = [_drop("dense", "hit@1", "previous")]
    text = verdict_entry(_verdict({"dense": _gate(False)}, rows), HEADLINE)
    assert text.splitlines()[2] == ("- `dense`: **FAILED** (comparable): dropped past its tolerance: hit@1 0.000 vs "
                                    "1.000 (-1.000, tol 0.05, previous)")

def test_a_gate_that_failed_without_numbers_says_why():
    gates = {"new": _gate(False, "not_compared", "FAILED: nothing can judge it; accept a run: python -m x")}
    text = verdict_entry(_verdict(gates, []), "Gate FAILED for `new`.")
    assert "- `new`: **FAILED** (not_compared): FAILED: nothing can judge it; accept a run: python -m x" in text


def test_thirty_variants_stay_under_the_inline_limit_failed_ones_shown_first():
    names = [f"minilm-w{n}-o20|hybrid+mmr" for n in range(30)]
    gates = {n: _gate(i >= 5) for i, n in enumerate(names)}
    rows = [_drop(n, "ndcg@10", "previous") for n in names[:5]]
    text = verdict_entry(_verdict(gates, rows), HEADLINE)
    assert len(text) < INLINE_LIMIT, len(text)
    assert all(f"- `{n}`: **FAILED**" in text for n in names[:5]), text
    assert "Passed: 25 variant(s)" in text and ": passed (" not in text


def test_very_many_failures_count_the_rows_that_do_not_fit():
    names = [f"variant-{n:02d}" for n in range(40)]
    rows = [_drop(n, m, "previous") for n in names for m in ("hit@1", "mrr", "ndcg@10")]
    text = verdict_entry(_verdict({n: _gate(False) for n in names}, rows), HEADLINE)
    assert len(text) < INLINE_LIMIT, len(text)
    shown = text.count("**FAILED**")
    assert 0 < shown < 40
    assert f"… {40 - shown} more failed: see `report`." in text


def test_failed_answer_gates_are_named():
    answers = SimpleNamespace(gates={"dense": {}, "bm25": {}}, variant_passed=lambda v: v != "bm25")
    text = verdict_entry(_verdict({"dense": _gate(True)}, [], answers), "Answer gate FAILED for `bm25`.")
    assert text.rstrip().endswith("Answer gate FAILED for: `bm25`.")


def test_a_failed_row_without_a_number_prints_the_missing_mark():
    """A gated metric NaN today (rc_nauc after a run that lost every question: no delta) and one the yardstick
    lacks (measured now but not in it) are failed rows without every number: the entry prints them with the
    missing mark, as the gate's message does, instead of failing the report step on the format."""
    rows = [{**_drop("dense", "rc_nauc", "previous", actual=float("nan"), yardstick=0.0), "delta": None},
            {**_drop("dense", "map", "previous", actual=0.4), "yardstick": None, "delta": None}]
    text = verdict_entry(_verdict({"dense": _gate(False)}, rows), HEADLINE)
    assert text.splitlines()[2] == ("- `dense`: **FAILED** (comparable): dropped past its tolerance: rc_nauc \u2013 vs "
                                    "0.000 (\u2013, tol 0.05, previous); map 0.400 vs \u2013 (\u2013, tol 0.05, "
                                    "previous)")
