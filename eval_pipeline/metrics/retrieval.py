"""Retrieval metrics for scoring RAG retrieval engines on a question set.

One pure function per metric, in the style of ``ranx`` / ``ir_measures``.
No function mutates its inputs.

Conventions
-----------
Ranking
    A sequence of document ids in rank order, best first. Ranks are 1-based.
    Callers should pass deduplicated rankings; if a document id appears more
    than once, only its first occurrence counts and later occurrences are
    dropped *before* ranks are assigned (so ``[a, b, a, c]`` is scored as
    ``[a, b, c]`` and ``c`` has rank 3). A bare ``str`` is rejected with
    ``TypeError`` (it would otherwise be read as a ranking of characters).

Qrels
    A mapping ``doc_id -> graded relevance``. A document is relevant iff its
    grade is ``> 0``. Documents absent from the qrels are non-relevant, and so
    are documents judged ``<= 0``.

Queries without relevant documents
    A query whose qrels are empty or contain only grades ``<= 0`` cannot be
    scored by the per-query metric functions: they raise
    ``ValueError("... no relevant documents ...")``. Such questions are
    abstention questions and are handled separately by :func:`score_queries`
    and :func:`aggregate`. (``trec_eval`` likewise skips queries that have no
    relevant documents.)

Empty rankings
    An empty ranking scores ``0.0`` on every metric. This matches
    ``trec_eval -c`` (queries with no retrieved documents count as zeros),
    rather than plain ``trec_eval``, which leaves such queries out.

Cutoff ``k``
    Must be an ``int >= 1`` (``bool`` is rejected); anything else raises
    ``ValueError`` naming ``k``. A ``k`` larger than the ranking is allowed.

Metric definitions (these follow ``trec_eval``; ``R`` = number of relevant docs)
    * ``hit_at_k``: 1.0 if any relevant document is in the top ``k``, else 0.0.
    * ``reciprocal_rank``: ``1 / rank`` of the first relevant document,
      considering only the top ``k`` if ``k`` is given, else 0.0
      (``trec_eval`` ``recip_rank`` when ``k`` is None).
    * ``recall_at_k``: relevant documents in the top ``k`` divided by ``R``
      (``recall_k``).
    * ``precision_at_k``: relevant documents in the top ``k`` divided by
      ``k``, even when fewer than ``k`` documents were retrieved (``P_k``).
    * ``average_precision``: the sum of precision@rank over the ranks of the
      relevant retrieved documents (within the top ``k`` if given), divided
      by ``R`` (``map``; with ``k`` it is ``map_cut_k``, whose denominator is
      still ``R``, not ``min(k, R)``).
    * ``ndcg_at_k``: DCG@k / IDCG@k with linear gain ``gain = grade`` (grades
      ``<= 0`` give gain 0), discount ``log2(rank + 1)``, and the ideal
      ranking built from *all* judged documents with grade ``> 0``, sorted by
      grade descending and cut at ``k`` (``ndcg_cut_k``).

Ties and ranking from scores
    The metric functions take rankings, not scores, so there are no ties to
    break inside them. :func:`rank_by_score` turns a ``doc_id -> score``
    mapping into a ranking by **score descending, ties broken by doc id
    ascending** (the project rule). A NaN score raises ``ValueError`` naming
    the doc id.

    This differs from ``trec_eval`` (and so ``pytrec_eval``), which breaks
    score ties by docno **descending**. Results from this module and from
    ``trec_eval`` agree whenever scores are strictly decreasing with rank;
    for tied scores they may put the tied documents in opposite orders.

The measure registry
    :data:`MEASURES` is every measure the library scores, ``ir_measures``-style: a
    :class:`Measure` is its name (the column it fills, ``ndcg@10``), its pure function, its
    cutoff ``k`` (None: uncut) and its rules (what it follows). :func:`measure` looks a name
    up (a family with a cutoff also at other cutoffs: ``ndcg@3``); :func:`score_queries`
    computes :func:`scored_measures`. Every list of metric names in the library is derived
    from it (:func:`metric_names`: the report's headline, the intervals, the paired comparison,
    the gate's tolerances, a partition's numbers, the judged-holes check, the history's per
    question columns; :data:`PRIMARY_METRIC`). Adding a metric is one function and its
    registration in :data:`MEASURES`.

Run-level scoring
    :func:`score_queries` yields one row per question in the qrels.
    Questions that are missing from the rankings, or that are listed as
    ``errored``, are scored as empty rankings (misses); they are never
    dropped. :func:`aggregate` averages the metrics over answerable questions
    only (misses included) and reports abstention questions separately.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from numbers import Integral

import pandas as pd

from eval_pipeline.common.checks import is_integer, is_real
from eval_pipeline.common.registry import Registry

__all__ = [
    "COMPARED",
    "DEFAULT_KS",
    "GATED",
    "HEADLINE",
    "HISTORY",
    "HOLES",
    "INTERVAL",
    "MEASURES",
    "SCOPES",
    "MeasureRegistry",
    "MetricNames",
    "all_metric_names",
    "PARTITION",
    "PRIMARY_METRIC",
    "SLICED",
    "Measure",
    "Qrels",
    "Ranking",
    "aggregate",
    "average_precision",
    "hit_at_k",
    "is_metric",
    "measure",
    "metric_names",
    "ndcg_at_k",
    "precision_at_k",
    "rank_by_score",
    "recall_at_k",
    "reciprocal_rank",
    "score_queries",
    "scored_measures",
]

Ranking = Sequence[str]
Qrels = Mapping[str, int]

DEFAULT_KS = (1, 3, 5, 10, 20)

# Columns of score_queries() that are not metrics.
_INFO_COLUMNS = ("qid", "answerable", "errored", "returned", "first_relevant_rank")
# Per-question inputs of the run measures (eval_pipeline.metrics.selective) that aggregate must not
# average: the variant's confidence, and the hits of its list before any refusal.
_RUN_INPUTS = ("confidence", "hit@10 without refusal")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _check_k(k: object) -> int:
    """Return ``k`` as an int, or raise ValueError naming ``k``."""
    if not is_integer(k) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got k={k!r}")
    return int(k)


def _check_optional_k(k: object) -> int | None:
    return None if k is None else _check_k(k)


def _dedupe(ranking: Ranking) -> list[str]:
    """Return a new list with only the first occurrence of each doc id."""
    if isinstance(ranking, (str, bytes)):
        raise TypeError(
            "ranking must be a sequence of doc ids, not a single string: "
            f"{ranking!r}"
        )
    return list(dict.fromkeys(ranking))  # keeps first occurrences, in order


def _relevant(qrels: Qrels) -> set[str]:
    """Relevant doc ids (grade > 0); raise if there are none."""
    relevant = {doc_id for doc_id, grade in qrels.items() if grade > 0}
    if not relevant:
        raise ValueError(
            "query has no relevant documents (empty qrels or all grades <= 0); "
            "it cannot be scored by ranking metrics"
        )
    return relevant


def _has_relevant(qrels: Qrels) -> bool:
    return any(grade > 0 for grade in qrels.values())


def _first_relevant_rank(ranking: list[str], relevant: set[str]) -> int | None:
    for rank, doc_id in enumerate(ranking, start=1):
        if doc_id in relevant:
            return rank
    return None


# --------------------------------------------------------------------------
# ranking from scores
# --------------------------------------------------------------------------


def rank_by_score(scores: Mapping[str, float]) -> list[str]:
    """Rank doc ids by score descending; ties broken by doc id ascending.

    Raises ValueError naming the doc id if any score is NaN. (``trec_eval``
    breaks ties by docno descending instead; see the module docstring.)
    """
    items = []
    for doc_id, score in scores.items():
        value = float(score)
        if math.isnan(value):
            raise ValueError(f"score for doc id {doc_id!r} is NaN")
        items.append((doc_id, value))
    items.sort(key=lambda item: (-item[1], item[0]))
    return [doc_id for doc_id, _ in items]


# --------------------------------------------------------------------------
# per-query metrics
# --------------------------------------------------------------------------


def hit_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """1.0 if any relevant document is among the top ``k``, else 0.0."""
    k = _check_k(k)
    relevant = _relevant(qrels)
    return 1.0 if any(d in relevant for d in _dedupe(ranking)[:k]) else 0.0


def reciprocal_rank(ranking: Ranking, qrels: Qrels, k: int | None = None) -> float:
    """1 / rank of the first relevant document (within the top ``k`` if given), else 0.0."""
    k = _check_optional_k(k)
    relevant = _relevant(qrels)
    docs = _dedupe(ranking)
    if k is not None:
        docs = docs[:k]
    rank = _first_relevant_rank(docs, relevant)
    return 0.0 if rank is None else 1.0 / rank


def recall_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Relevant documents in the top ``k`` divided by the number of relevant documents."""
    k = _check_k(k)
    relevant = _relevant(qrels)
    found = sum(1 for d in _dedupe(ranking)[:k] if d in relevant)
    return found / len(relevant)


def precision_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Relevant documents in the top ``k`` divided by ``k`` (even if fewer were retrieved)."""
    k = _check_k(k)
    relevant = _relevant(qrels)
    found = sum(1 for d in _dedupe(ranking)[:k] if d in relevant)
    return found / k


def average_precision(ranking: Ranking, qrels: Qrels, k: int | None = None) -> float:
    """Average precision (``trec_eval`` ``map``; ``map_cut_k`` when ``k`` is given).

    Sum of precision@rank at each relevant retrieved document (top ``k`` only
    if ``k`` is given), divided by the total number of relevant documents.
    """
    k = _check_optional_k(k)
    relevant = _relevant(qrels)
    docs = _dedupe(ranking)
    if k is not None:
        docs = docs[:k]
    found = 0
    total = 0.0
    for rank, doc_id in enumerate(docs, start=1):
        if doc_id in relevant:
            found += 1
            total += found / rank
    return total / len(relevant)


def ndcg_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """nDCG@k with linear gain (= grade), discount log2(rank + 1) (``trec_eval`` ``ndcg_cut_k``).

    The ideal DCG uses all judged documents with grade > 0, sorted by grade
    descending and cut at ``k``. Grades <= 0 contribute zero gain.
    """
    k = _check_k(k)
    _relevant(qrels)  # raises if there is nothing relevant
    dcg = 0.0
    for rank, doc_id in enumerate(_dedupe(ranking)[:k], start=1):
        grade = qrels.get(doc_id, 0)
        if grade > 0:
            dcg += grade / math.log2(rank + 1)
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg


# --------------------------------------------------------------------------
# the measure registry
# --------------------------------------------------------------------------

# The named lists a measure can be on (Measure.lists); metric_names(list) derives each one.
PRIMARY = "primary"  # the one measure variants are ranked and plotted by (PRIMARY_METRIC)
HEADLINE = "headline"  # the report's summary table
INTERVAL = "interval"  # a bootstrap interval per variant (the verdict)
COMPARED = "compared"  # the paired comparison with the baseline variant
GATED = "gated"  # the regression gate's default tolerances
PARTITION = "partition"  # the numbers a variant's partition shows in the UI
HOLES = "holes"  # re-scored with the judge's labels: only measures cut at the judged depth
HISTORY = "history"  # kept per question in the run history
SLICED = "sliced"  # the means by question slice
_LISTS = (PRIMARY, HEADLINE, INTERVAL, COMPARED, GATED, PARTITION, HOLES, HISTORY, SLICED)
# A list shows its measures in registry order, except where its order by family is given here
# (the paired comparison leads with the rank-sensitive measures).
_FAMILY_ORDER = {COMPARED: ("ndcg", "mrr", "hit")}

MeasureFunction = Callable[..., float]  # (ranking, qrels, k) -> float; a run measure's: (per_query) -> float
SCOPES = ("question", "run")


@dataclass(frozen=True)
class Measure:
    """One measure, ``ir_measures``-style: ``family`` (``ndcg``) at cutoff ``k`` (None: uncut)
    is the measure ``name`` (``ndcg@10``, ``mrr``), the column it fills; ``function`` is its
    pure per-query function, called ``function(ranking, qrels, k)``; ``rules`` says what it
    follows. ``per_k``: scored at every k of :func:`score_queries`' ``ks`` (registered at
    :data:`DEFAULT_KS`). ``lists``: the named lists of metrics it is on (:func:`metric_names`).
    """

    family: str
    function: MeasureFunction
    k: int | None
    rules: str
    per_k: bool = False
    lists: frozenset[str] = field(default_factory=frozenset)
    # "question": scored per question by score_queries (function(ranking, qrels, k)) and averaged
    # over the answerable questions; "run": computed once per variant from its per-question rows
    # by aggregate (function(per_query) -> float: the selective-retrieval measures).
    scope: str = "question"
    higher_is_better: bool = True  # False: a rise is a regression (the gate reads it so)
    # For a measure undefined (NaN) on a run nothing could improve as well as on others (rc_nauc: on
    # every run whose losses are all equal, all 0 or all 1): given the run's summary row, whether
    # the row is such a run, at the measure's best (:func:`at_best`). None: a NaN is never a best.
    nan_at_best: Callable[[Mapping[str, object]], bool] | None = None

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"measure {self.family!r}: scope {self.scope!r} is not valid; valid: {', '.join(SCOPES)}")
        unknown = sorted(set(self.lists) - set(_LISTS))
        if unknown:
            raise ValueError(f"measure {self.family!r}: list(s) {unknown} are not valid; valid: {', '.join(_LISTS)}")

    @property
    def name(self) -> str:
        return self.family if self.k is None else f"{self.family}@{self.k}"

    def __call__(self, ranking: Ranking, qrels: Qrels) -> float:
        return self.function(ranking, qrels, self.k)

    def at(self, k: int) -> Measure:
        """The same measure at cutoff ``k`` (on no list)."""
        return replace(self, k=_check_k(k), lists=frozenset())


def _at_ks(family: str, function: MeasureFunction, rules: str,
           lists: Mapping[int, Collection[str]]) -> tuple[Measure, ...]:
    """A family scored at every k of :data:`DEFAULT_KS`; ``lists``: by k, the lists each is on."""
    return tuple(Measure(family, function, k, rules, per_k=True, lists=frozenset(lists.get(k, ())))
                 for k in DEFAULT_KS)


class MeasureRegistry(Registry[Measure]):
    """The measure registry: a :class:`eval_pipeline.common.registry.Registry` whose iteration
    yields the measures themselves (``for m in MEASURES: m.name``), in registration order. A
    new measure is one file that defines its function and calls ``MEASURES.register(Measure(...))``,
    and the line that imports the file (`BUILTIN_MEASURE_MODULES`, or EVAL_PIPELINE_PLUGINS for
    one outside the package): every list of names (:func:`metric_names`), the score columns, the
    gate's valid tolerances and the summary pick it up, because each is read from the registry
    when used, never copied at import time."""

    def __iter__(self):  # the measures, not their names
        return iter(self.kinds())

    def builtin(self, measures: Sequence[Measure]) -> None:
        """The measures this module defines, first in registration order; added without importing
        the other built-in modules (which import this one)."""
        for m in measures:
            self._kinds[m.name] = m


# The built-in measure modules beside this one, imported the first time the registry is read
# (the selective-retrieval measures of eval_pipeline.metrics.selective).
BUILTIN_MEASURE_MODULES: tuple[str, ...] = ("eval_pipeline.metrics.selective",)

MEASURES: MeasureRegistry = MeasureRegistry("measure", modules=BUILTIN_MEASURE_MODULES)

# Every measure this module scores, in the order the named lists show them. score_queries
# puts the per-k families first (hit@k for each k, then recall@k), then the others.
_BUILTIN: tuple[Measure, ...] = (
    *_at_ks("hit", hit_at_k, "1.0 if a relevant document is in the top k, else 0.0 (trec_eval success_k)",
            {1: (HEADLINE, INTERVAL, COMPARED, GATED, PARTITION, HOLES),
             3: (HEADLINE,),
             5: (HEADLINE, INTERVAL, COMPARED, GATED, PARTITION, HOLES, SLICED),
             10: (HEADLINE, PARTITION, HOLES, HISTORY),
             20: (HEADLINE,)}),
    Measure("mrr", reciprocal_rank, None, "1 / rank of the first relevant document, uncut (trec_eval recip_rank)",
            lists=frozenset({HEADLINE, INTERVAL, COMPARED, GATED, PARTITION, HISTORY, SLICED})),
    *_at_ks("recall", recall_at_k, "relevant documents in the top k / all relevant (trec_eval recall_k)",
            {10: (HEADLINE, PARTITION)}),
    Measure("ndcg", ndcg_at_k, 10, "linear gain = grade, log2(rank + 1) discount, ideal from every judged "
            "document with grade > 0 (trec_eval ndcg_cut_k)",
            lists=frozenset({PRIMARY, HEADLINE, INTERVAL, COMPARED, GATED, PARTITION, HOLES, HISTORY})),
    Measure("map", average_precision, None, "average precision, uncut; denominator all relevant (trec_eval map)"),
)
MEASURES.builtin(_BUILTIN)

_CUT = re.compile(r"^([a-z_]+)@([1-9][0-9]*)$")


def at_best(row: Mapping[str, object]) -> set[str]:
    """The measures NaN in ``row`` (a variant's summary row) because the run is at their best,
    as each one's ``nan_at_best`` reads the row: a gate passes such a NaN (no drop is possible
    from the best) and fails any other (fail closed: NaN also follows a run that lost everything)."""
    return {m.name for m in MEASURES
            if m.nan_at_best is not None and _is_nan(row.get(m.name)) and m.nan_at_best(row)}


def _is_nan(value: object) -> bool:
    return is_real(value) and math.isnan(float(value))


def measure(name: str) -> Measure:
    """The registered measure ``name``, or a registered family with a cutoff at another cutoff
    (``hit@7``, ``ndcg@3``); anything else raises ValueError naming the registered measures."""
    if isinstance(name, str):
        found = MEASURES.get(name)
        if found is not None:
            return found
        match = _CUT.match(name)
        if match is not None:
            family = next((m for m in MEASURES if m.family == match.group(1) and m.k is not None
                           and m.scope == "question"), None)
            if family is not None:
                return family.at(int(match.group(2)))
    raise ValueError(f"{name!r} is not a registered measure; registered: {', '.join(MEASURES.names())} "
                     "(a measure with a cutoff also at another: ndcg@K, hit@K, ...)")


def is_metric(column: str) -> bool:
    """Whether a column name is a measure (:func:`measure` knows it)."""
    try:
        measure(column)
    except ValueError:
        return False
    return True


def _names_on(list_name: str) -> tuple[str, ...]:
    families = _FAMILY_ORDER.get(list_name, ())
    on = [m for m in MEASURES if list_name in m.lists]
    on.sort(key=lambda m: families.index(m.family) if m.family in families else len(families))  # stable
    return tuple(m.name for m in on)


class MetricNames(Sequence[str]):
    """The names on one list of the registry, read from it whenever used: a module may keep it
    in a constant at import time (``HEADLINE_METRICS = metric_names(HEADLINE)``) and still see a
    measure registered later (a plugin's). Compares equal to the tuple (or list) of its names."""

    def __init__(self, list_name: str | None):
        self._list = list_name

    def _names(self) -> tuple[str, ...]:
        return MEASURES.names() if self._list is None else _names_on(self._list)

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, list, MetricNames)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names())

    def __add__(self, other):
        return tuple(self) + tuple(other)

    def __repr__(self) -> str:
        return repr(self._names())


def metric_names(list_name: str) -> MetricNames:
    """The names of the measures on the named list (``HEADLINE``, ``COMPARED``, ...), in
    registry order (by family first where the list's family order is given): a live view of the
    registry (:class:`MetricNames`), equal to the tuple of its names."""
    if list_name not in _LISTS:
        raise ValueError(f"there is no list {list_name!r} of measures; lists: {', '.join(_LISTS)}")
    return MetricNames(list_name)


def all_metric_names() -> MetricNames:
    """Every registered measure's name (question and run measures), live."""
    return MetricNames(None)


def _the_primary() -> str:
    (name,) = [m.name for m in _BUILTIN if PRIMARY in m.lists]  # exactly one, a built-in
    return name


PRIMARY_METRIC = _the_primary()


def scored_measures(ks: Sequence[int] = DEFAULT_KS) -> list[Measure]:
    """What :func:`score_queries` computes, in its column order: every per-k family at each
    of ``ks`` (in registry order of families), then the other measures as registered."""
    per_k: list[Measure] = []
    question = [m for m in MEASURES if m.scope == "question"]
    for m in question:
        if m.per_k and all(p.family != m.family for p in per_k):
            per_k += [m.at(k) for k in ks]
    return per_k + [m for m in question if not m.per_k]


# --------------------------------------------------------------------------
# run level
# --------------------------------------------------------------------------


def score_queries(
    rankings: Mapping[str, Ranking],
    qrels: Mapping[str, Qrels],
    errored: Collection[str] = (),
    ks: Sequence[int] = DEFAULT_KS,
) -> pd.DataFrame:
    """Score every question in ``qrels``; one row per qid, sorted by qid.

    Columns: ``qid``, ``answerable`` (bool: has a doc with grade > 0),
    ``errored`` (bool), ``returned`` (int: length of the deduplicated ranking
    that was scored; 0 for errored or missing qids), ``first_relevant_rank``
    (Python int, or None if no relevant doc was retrieved or the question is
    not answerable; object dtype), then ``hit@k`` for each k, ``recall@k``
    for each k, ``mrr`` (uncut reciprocal rank), ``ndcg@10`` and ``map``
    (uncut average precision).

    Metric columns are floats for answerable questions and NaN for
    abstention (non-answerable) questions. A qid that is missing from
    ``rankings`` or listed in ``errored`` is scored as an empty ranking.
    A qid in ``rankings`` or ``errored`` that is not in ``qrels`` raises
    ValueError naming it. ``ks`` are validated, deduplicated and sorted.
    """
    if isinstance(ks, Integral):
        raise ValueError(f"ks must be a sequence of integers >= 1, got ks={ks!r}")
    ks = sorted({_check_k(k) for k in ks})
    if not ks:
        raise ValueError("ks must contain at least one k")

    errored_set = set(errored)
    unknown = sorted(set(rankings) - set(qrels))
    if unknown:
        raise ValueError(f"qid(s) in rankings but not in qrels: {unknown}")
    unknown_err = sorted(errored_set - set(qrels))
    if unknown_err:
        raise ValueError(f"qid(s) in errored but not in qrels: {unknown_err}")

    measures = scored_measures(ks)
    metric_cols = [m.name for m in measures]
    rows = []
    for qid in sorted(qrels):
        q = qrels[qid]
        is_errored = qid in errored_set
        if is_errored or qid not in rankings:
            ranking: list[str] = []
        else:
            ranking = _dedupe(rankings[qid])
        row: dict[str, object] = {
            "qid": qid,
            "answerable": _has_relevant(q),
            "errored": is_errored,
            "returned": len(ranking),
            "first_relevant_rank": None,
        }
        if row["answerable"]:
            relevant = _relevant(q)
            row["first_relevant_rank"] = _first_relevant_rank(ranking, relevant)
            for m in measures:
                row[m.name] = m(ranking, q)
        else:
            for col in metric_cols:
                row[col] = math.nan
        rows.append(row)

    columns = list(_INFO_COLUMNS) + metric_cols
    df = pd.DataFrame(rows, columns=columns)
    df = df.astype(
        {
            "qid": object,
            "answerable": bool,
            "errored": bool,
            "returned": "int64",
            **{col: "float64" for col in metric_cols},
        }
    )
    # Keep Python ints / None (pandas would otherwise turn None into NaN floats).
    df["first_relevant_rank"] = pd.Series(
        [row["first_relevant_rank"] for row in rows], index=df.index, dtype=object
    )
    return df


def aggregate(per_query: pd.DataFrame) -> dict[str, float | int]:
    """Summarise the output of :func:`score_queries`.

    Returns the mean of every metric column over answerable questions
    (errored and missing ones are included as misses; NaN if there are no
    answerable questions), plus:

    * ``n_questions``, ``n_answerable``, ``n_abstention``, ``n_errored``
      (errored over all questions);
    * ``abstention_correct``: abstention questions whose ranking was empty
      (``returned == 0``) and that did not error — an engine error is not a
      correct abstention;
    * ``abstention_rate``: ``abstention_correct / n_abstention`` (NaN if
      there are no abstention questions);
    * every run measure of the registry (``scope == "run"``: the selective-retrieval
      measures, eval_pipeline.metrics.selective), computed from the whole frame.
    """
    missing = [c for c in ("answerable", "errored", "returned") if c not in per_query.columns]
    if missing:
        raise ValueError(f"per_query is missing required column(s): {missing}")

    answerable = per_query["answerable"].astype(bool)
    errored = per_query["errored"].astype(bool)
    metric_cols = [c for c in per_query.columns if c not in _INFO_COLUMNS and c not in _RUN_INPUTS]

    out: dict[str, float | int] = {}
    answerable_rows = per_query.loc[answerable, metric_cols]
    for col in metric_cols:
        values = answerable_rows[col].astype("float64")
        out[col] = float(values.mean()) if len(values) else math.nan

    n_questions = int(len(per_query))
    n_answerable = int(answerable.sum())
    n_abstention = n_questions - n_answerable
    abst = ~answerable
    abstention_correct = int((abst & ~errored & (per_query["returned"] == 0)).sum())

    out["n_questions"] = n_questions
    out["n_answerable"] = n_answerable
    out["n_abstention"] = n_abstention
    out["n_errored"] = int(errored.sum())
    out["abstention_correct"] = abstention_correct
    out["abstention_rate"] = (
        abstention_correct / n_abstention if n_abstention else math.nan
    )
    for m in MEASURES:  # the run measures (eval_pipeline.metrics.selective, a plugin's)
        if m.scope == "run":
            out[m.name] = float(m.function(per_query))
    return out
