"""A toy metric: 1.0 when the ranking returned any relevant document at all (at any depth), else
0.0. One pure function and its registration in the measure registry; on the report's headline
list, so the variants table shows it, and gateable by naming it in `gate.tolerances`."""

from __future__ import annotations

from eval_pipeline.metrics.retrieval import HEADLINE, MEASURES, Measure, Qrels, Ranking


def found_at_all(ranking: Ranking, qrels: Qrels, k: int | None = None) -> float:
    relevant = {doc for doc, grade in qrels.items() if grade > 0}
    if not relevant:
        raise ValueError("query has no relevant documents")
    return 1.0 if relevant & set(ranking) else 0.0


MEASURES.register(Measure("toy_found", found_at_all, None, "a toy: 1.0 if any relevant document is returned at all",
                          lists=frozenset({HEADLINE})))
