"""The report's headline (eval_pipeline.reporting.report.headline): what it says moved, and of
which variants, when some variants were not compared with a previous run."""

from types import SimpleNamespace

import pandas as pd

from eval_pipeline.reporting.report import headline


def _verdict(gates: dict, ndcg: dict, previous: dict, vanished=(), answers=None):
    """A verdict as the headline reads it: gates {variant: (state, passed)}, nDCG@10 now and at the
    previous run, the vanished variants and the answer verdict."""
    summary = pd.DataFrame({"variant": list(ndcg), "ndcg@10": list(ndcg.values()), "mrr": list(ndcg.values())})
    return SimpleNamespace(summary=summary, limited=False, answers=answers, loosened={}, vanished=list(vanished),
                           gates={v: SimpleNamespace(state=s, passed=p) for v, (s, p) in gates.items()},
                           previous={v: {"metrics": {"ndcg@10": x}} for v, x in previous.items()})


def test_a_renamed_and_changed_variant_is_not_hidden_behind_no_metric_moved():
    """`bm25` renamed `bm25-x` and made worse: not compared (nothing can judge it), and the
    variants that were compared did not move. "No metric moved since the previous run" read as
    the whole run's news; it says which metric, and of which variants."""
    verdict = _verdict({"dense": ("comparable", True), "bm25-x": ("not_compared", False)},
                       {"dense": 0.70, "bm25-x": 0.59}, {"dense": 0.70}, vanished=["bm25"])
    text = headline(verdict, "dense")
    assert "No metric moved since the previous run" not in text, text
    assert "nDCG@10 unchanged since the previous run (1 of 2 variants compared with their previous run)" in text
    assert "Gate FAILED for `bm25-x` (not compared)" in text and "Gone from the variants file: `bm25`" in text


def test_every_variant_compared_and_unmoved_keeps_the_short_sentence():
    verdict = _verdict({"dense": ("comparable", True), "bm25": ("comparable", True)},
                       {"dense": 0.70, "bm25": 0.73}, {"dense": 0.70, "bm25": 0.73})
    assert "nDCG@10 unchanged since the previous run." in headline(verdict, "dense")


def test_a_move_is_named_whatever_else_was_compared():
    verdict = _verdict({"dense": ("comparable", True), "new": ("first_run", True)},
                       {"dense": 0.65, "new": 0.5}, {"dense": 0.70})
    assert ("Since the previous run (1 of 2 variants compared with their previous run): `dense` nDCG@10 -0.050."
            in headline(verdict, "dense"))
