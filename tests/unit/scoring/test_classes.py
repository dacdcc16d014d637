"""The per-class breakdown covers every class present (issue #26), with hand-computed means."""

from __future__ import annotations

import math

import pandas as pd

from eval_pipeline.reporting.report import class_lines
from eval_pipeline.scoring.variant import UNLABELLED, class_breakdown


def _frame():
    rows = []
    # variant a: q1 MATCH/body-only hit, q2 GAP/negation miss, q3 GAP/unlabelled hit at rank 2, q4 abstention
    for variant, ranks in (("a", (1, None, 2)), ("b", (None, 1, 1))):
        for qid, form, hard, rank in (("q1", "MATCH", "body-only", ranks[0]), ("q2", "GAP", "negation", ranks[1]),
                                      ("q3", "GAP", None, ranks[2])):
            hit1 = 1.0 if rank == 1 else 0.0
            hit5 = 1.0 if rank is not None else 0.0
            rows.append({"variant": variant, "qid": qid, "answerable": True, "form": form, "hard_class": hard,
                         "hit@1": hit1, "hit@5": hit5, "mrr": 1.0 / rank if rank else 0.0,
                         "ndcg@10": 1.0 / math.log2(rank + 1) if rank else 0.0})
        rows.append({"variant": variant, "qid": "q4", "answerable": False, "form": "GAP", "hard_class": "zany-new",
                     "hit@1": math.nan, "hit@5": math.nan, "mrr": math.nan, "ndcg@10": math.nan})
    return pd.DataFrame(rows)


def test_every_class_present_is_covered_with_counts_and_means():
    table = class_breakdown(_frame())
    keys = list(zip(table["field"], table["class"], table["variant"]))
    assert keys == [("form", "GAP", "a"), ("form", "GAP", "b"), ("form", "MATCH", "a"), ("form", "MATCH", "b"),
                    ("hard_class", "body-only", "a"), ("hard_class", "body-only", "b"),
                    ("hard_class", "negation", "a"), ("hard_class", "negation", "b"),
                    ("hard_class", "zany-new", "a"), ("hard_class", "zany-new", "b"),
                    ("hard_class", UNLABELLED, "a"), ("hard_class", UNLABELLED, "b")]
    row = table.set_index(["field", "class", "variant"])
    gap_a = row.loc[("form", "GAP", "a")]  # q2 miss, q3 at rank 2; q4 is an abstention question
    assert (gap_a["n"], gap_a["n_abstention"]) == (2, 1)
    assert gap_a["hit@1"] == 0.0 and gap_a["hit@5"] == 0.5 and gap_a["mrr"] == 0.25
    assert gap_a["ndcg@10"] == (1 / math.log2(3)) / 2
    gap_b = row.loc[("form", "GAP", "b")]
    assert gap_b["hit@1"] == 1.0 and gap_b["mrr"] == 1.0
    zany = row.loc[("hard_class", "zany-new", "a")]  # only an abstention question: no mean, never dropped
    assert zany["n"] == 0 and zany["n_abstention"] == 1 and math.isnan(zany["hit@5"])
    assert row.loc[("hard_class", UNLABELLED, "a")]["n"] == 1


def test_rows_are_taken_by_position_whatever_the_frame_s_index_and_order():
    """A frame with a shuffled, non-default index gives the same classes, counts and means as the
    same rows in a plain frame; a class's mean skips a NaN score (q2 of `b` has none for MRR)."""
    frame = _frame()
    frame.loc[(frame["variant"] == "b") & (frame["qid"] == "q2"), "mrr"] = math.nan
    shuffled = frame.iloc[[7, 2, 5, 0, 6, 3, 1, 4]].set_axis([30, 10, 70, 0, 50, 20, 60, 40])
    expected = class_breakdown(frame.iloc[[7, 2, 5, 0, 6, 3, 1, 4]].reset_index(drop=True))
    pd.testing.assert_frame_equal(class_breakdown(shuffled), expected, check_exact=True)
    row = expected.set_index(["field", "class", "variant"])
    gap_b = row.loc[("form", "GAP", "b")]  # q3 (rank 1, MRR 1.0) and q2 (MRR NaN): the mean of what is there
    assert (gap_b["n"], gap_b["n_abstention"], gap_b["mrr"], gap_b["hit@1"]) == (2, 1, 1.0, 1.0)
    assert list(expected["variant"][:2]) == ["b", "a"]  # variants in first appearance

def test_a_field_nobody_labelled_says_nothing_and_empty_input_is_an_empty_table():
    frame = _frame().assign(hard_class=None)
    assert set(class_breakdown(frame)["field"]) == {"form"}
    empty = class_breakdown(frame.iloc[0:0])
    assert len(empty) == 0 and list(empty.columns[:5]) == ["field", "class", "variant", "n", "n_abstention"]


def test_the_report_lists_every_class_with_its_four_metrics():
    text = "\n".join(class_lines(_frame(), ["a", "b"]))
    assert "## hit@5 by question kind" in text
    assert "| hard class: negation | 1 | 0.000 | 1.000 |" in text
    assert "| hard class: zany-new | a | 0 | 1 |" in text
    for metric in ("hit@1", "hit@5", "mrr", "ndcg@10"):
        assert f"| {metric} " in text or f" {metric} |" in text
