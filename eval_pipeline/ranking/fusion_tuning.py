"""Fusion tuning (issue #14): choose a hybrid variant's `rrf_k` or leg weights by grid search
on a seeded *tuning* part of the questions, and report the variant on the *held-out* rest
only, so that no question is both tuned on and scored (what ranx's fusion optimisation does
with its train/test runs).  The chosen values go into provenance (`TuningResult.provenance`).

Library only: nothing here runs a leg or reads the store.  The inputs are the legs' ranked
hits per question, as the sweep holds them (`Sweep.leg_hits`), and the graded qrels
(`Question.qrels()`).

The split
    `split_questions` decides each question's side from its own hash alone:
    sha256("eval-pipeline/fusion-split:{seed}:{qid}") read as a number u in [0, 1), tuning iff
    u < fraction.  Membership is per question, not by rank in a sorted list, so the split does
    not depend on the input order, and adding (or removing) questions never moves an existing
    question to the other side: with a rank-based cut ("the first 30% by hash") every new
    question shifts the cut and the questions at the boundary would change sides, so a
    question scored in one run could be tuned on in the next.  The price is that the tuning
    part holds about, not exactly, `fraction` of the questions.  One exception keeps both parts
    non-empty: when the hashes put every question on one side (only likely for a handful of
    questions), the question nearest the threshold is moved to the empty side; that question
    may move back once more questions are added.

The fusion
    Exactly the sweep's: `engines.fuse` (the function `Sweep.first_stage` calls for a hybrid
    variant: RRF in-house, `merge` and `dbsf` through Haystack's DocumentJoiner) and then
    `engines.chunks_to_documents` cut at the variant's depth.  Both are imported, not copied,
    so a tuned value ranks here as it will in the sweep (tests/test_fusion_tuning.py checks
    this against `Sweep.first_stage`).  Hits are `ChunkHit`s (chunk-level, as the legs return
    them: fused per chunk, then a document takes its best chunk, as in the sweep) or
    `(doc_id, score)` pairs (document-level: the doc id stands for the chunk id), best first.

The metric
    nDCG@k with graded gains: the measure registry's (`eval_pipeline.metrics.retrieval.measure`,
    whose `ndcg_at_k` scores a run: linear gain = grade, grades <= 0 gain nothing, discount
    log2(rank + 1), the ideal from every judged document with grade > 0), imported, not copied.
    A grid point's score is the mean over the answerable tuning questions (abstention
    questions, with no grade > 0, cannot be scored by nDCG and are skipped, as
    `metrics.retrieval.aggregate` leaves them out of the means).

Ties
    Scores within `TIE_TOLERANCE` of the best count as tied.  Among tied points: `rrf_k`, the
    smallest k; weights, the point whose normalised weights are closest to equal weights
    (Euclidean distance), then the lexicographically smallest normalised weights.  Both rules
    depend only on the set of grid points, not on their order.

Only the tuning questions are read: `tune_fusion` never iterates over `leg_runs[leg]` or
`qrels`, it looks up the tuning qids in them, so a held-out question cannot influence the
choice.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from eval_pipeline.common.checks import is_finite, is_integer, is_real
from eval_pipeline.metrics.retrieval import PRIMARY_METRIC, measure, ndcg_at_k
from eval_pipeline.ranking.defaults import DEPTH, RRF_K, RRF_K_RANGE
from eval_pipeline.ranking.engines import fuse
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc, chunks_to_documents

__all__ = [
    "DEFAULT_RRF_K_GRID",
    "METHODS",
    "TIE_TOLERANCE",
    "GridPoint",
    "TuningResult",
    "default_grid",
    "default_weight_grid",
    "fused_ranking",
    "fusion_score",
    "split_question_set",
    "split_questions",
    "tune_fusion",
]

SPLIT_SALT = "eval-pipeline/fusion-split"
DEFAULT_RRF_K_GRID: tuple[int, ...] = (1, 5, 10, 20, 40, 60, 80, 100)
METHODS = ("rrf_k", "weights")
TIE_TOLERANCE = 1e-12

Method = Literal["rrf_k", "weights"]


# --------------------------------------------------------------------------
# the split
# --------------------------------------------------------------------------


def _position(qid: str, seed: int) -> float:
    """The question's place in [0, 1) under `seed`: its own hash, independent of the others."""
    digest = hashlib.sha256(f"{SPLIT_SALT}:{seed}:{qid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _check_fraction(fraction: object) -> float:
    if not is_finite(fraction) or not 0.0 < float(fraction) < 1.0:
        raise ValueError(f"fraction must be a number strictly between 0 and 1, got fraction={fraction!r}")
    return float(fraction)


def _check_seed(seed: object) -> int:
    if not is_integer(seed):
        raise ValueError(f"seed must be an integer, got seed={seed!r}")
    return int(seed)


def _qid_list(qids: object, name: str) -> list[str]:
    """The qids as a list of strings, each once; a bare string, a non-string id or a duplicate
    is refused naming `name`."""
    if isinstance(qids, (str, bytes)):
        raise TypeError(f"{name} must be a collection of question ids, not a single string: {qids!r}")
    out = list(qids)  # type: ignore[call-overload]  # not iterable: list() raises the TypeError
    bad = [q for q in out if not isinstance(q, str) or not q]
    if bad:
        raise ValueError(f"{name} must be non-empty strings; got {bad[:5]!r}")
    dupes = sorted(q for q, n in Counter(out).items() if n > 1)
    if dupes:
        raise ValueError(f"{name} lists question id(s) more than once: {dupes[:10]}")
    return out


def split_questions(qids: Iterable[str], *, fraction: float = 0.3,
                    seed: int = 0) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tuning, held_out): each question's side from its own hash (see the module docstring).

    Deterministic for a given set of ids whatever their order; the parts never overlap and
    together are every id; each is sorted by qid.  A question keeps its side when others are
    added or removed (except in the both-parts-non-empty repair, see above).  Needs at least two
    questions, so that each part holds at least one; `fraction` (the tuning part's expected
    share) must be strictly between 0 and 1; `seed` an integer.
    """
    fraction = _check_fraction(fraction)
    seed = _check_seed(seed)
    ids = _qid_list(qids, "qids")
    if len(ids) < 2:
        raise ValueError(
            f"cannot split {len(ids)} question(s) into a tuning and a held-out part: need at least 2 "
            f"(at least 1 in each part)"
        )
    position = {q: _position(q, seed) for q in ids}
    tuning = {q for q in ids if position[q] < fraction}
    held_out = set(ids) - tuning
    if not tuning:  # the hash put everything on the held-out side: take the question nearest the cut
        nearest = min(held_out, key=lambda q: (position[q], q))
        tuning, held_out = {nearest}, held_out - {nearest}
    elif not held_out:
        nearest = max(tuning, key=lambda q: (position[q], q))
        tuning, held_out = tuning - {nearest}, {nearest}
    return tuple(sorted(tuning)), tuple(sorted(held_out))


def split_question_set(question_set, *, fraction: float, seed: int):
    """The question set for a sweep with fusion tuning: its `tuning` part (tuned on, never
    scored) and, as its `questions`, the held-out rest in file order, which every variant is
    scored on. Raises ValueError when either part has no answerable question."""
    tuning_ids, held_out_ids = split_questions([q.qid for q in question_set.questions], fraction=fraction, seed=seed)
    tuning_set = set(tuning_ids)
    tuning = tuple(q for q in question_set.questions if q.qid in tuning_set)
    held_out = tuple(q for q in question_set.questions if q.qid not in tuning_set)
    for name, part in (("tuning", tuning), ("held-out", held_out)):
        if not any(q.answerable for q in part):
            raise ValueError(f"{question_set.path}: the {name} part of the fusion-tuning split (fraction {fraction}, "
                             f"seed {seed}) has no answerable question among its {len(part)}; use more questions or "
                             "another fraction")
    return replace(question_set, questions=held_out, tuning=tuning,
                   split={"fraction": fraction, "seed": seed, "n_tuning": len(tuning), "n_held_out": len(held_out)})


# --------------------------------------------------------------------------
# the fusion (the sweep's own functions)
# --------------------------------------------------------------------------


def _as_hits(hits: object, where: str) -> list[ChunkHit]:
    """One leg's hits for one question as ChunkHits, in the given (best-first) order."""
    if isinstance(hits, (str, bytes)) or not isinstance(hits, Iterable):
        raise TypeError(f"{where}: hits must be a list of ChunkHit or (doc_id, score) pairs, got {hits!r}")
    out: list[ChunkHit] = []
    for hit in hits:
        if isinstance(hit, ChunkHit):
            h = hit
        elif isinstance(hit, RankedDoc):
            h = ChunkHit(hit.chunk_id or hit.doc_id, hit.doc_id, hit.score)
        elif isinstance(hit, (tuple, list)) and len(hit) == 2 and isinstance(hit[0], str):
            h = ChunkHit(hit[0], hit[0], hit[1])
        else:
            raise TypeError(f"{where}: a hit must be a ChunkHit or a (doc_id, score) pair, got {hit!r}")
        if not h.doc_id or not is_finite(h.score):
            raise ValueError(f"{where}: hit {hit!r} needs a non-empty doc id and a finite score")
        out.append(ChunkHit(h.chunk_id, h.doc_id, float(h.score)))
    dupes = sorted(c for c, n in Counter(h.chunk_id for h in out).items() if n > 1)
    if dupes:
        raise ValueError(f"{where}: id(s) listed more than once in one leg's hits: {dupes[:10]}")
    return out


def fused_ranking(legs_hits: Sequence[Sequence], *, fusion: str = "rrf", rrf_k: int = RRF_K,
                  weights: Sequence[float] | None = None, depth: int = DEPTH) -> list[str]:
    """The doc ids a hybrid variant ranks for one question: `engines.fuse` then
    `engines.chunks_to_documents` cut at `depth`, as `Sweep.first_stage` does (no reranker)."""
    if not is_integer(depth) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got depth={depth!r}")
    _check_rrf_k(rrf_k, "rrf_k")
    hits = [_as_hits(leg, f"leg {i}") for i, leg in enumerate(legs_hits)]
    fused = fuse(hits, mode=fusion, rrf_k=rrf_k, weights=list(weights) if weights is not None else None)
    return [d.doc_id for d in chunks_to_documents(fused, depth)]


# --------------------------------------------------------------------------
# the metric (the measure registry's nDCG)
# --------------------------------------------------------------------------


def _metric_k(metric: object) -> int:
    try:
        found = measure(metric)  # type: ignore[arg-type]  # not a str: refused below
    except ValueError:
        found = None
    if found is None or found.function is not ndcg_at_k or found.k is None:
        raise ValueError(f"metric {metric!r} is not supported; valid: ndcg@K for an integer K >= 1 (e.g. ndcg@10)")
    return found.k


def _answerable(qrels: Mapping[str, Any]) -> bool:
    return any(grade > 0 for grade in qrels.values())


# --------------------------------------------------------------------------
# grids
# --------------------------------------------------------------------------


def default_weight_grid(n_legs: int, steps: int = 10) -> tuple[tuple[float, ...], ...]:
    """Every weight vector on the simplex with step 1/steps (0.1): for 2 legs (w, 1 - w) for
    w = 0.0, 0.1, ..., 1.0 (11 points); for 3 legs the 66 points (i, j, 10 - i - j) / 10."""
    if not is_integer(n_legs) or n_legs < 2:
        raise ValueError(f"a weight grid needs at least 2 legs, got {n_legs!r}")

    def compositions(total: int, parts: int):
        if parts == 1:
            yield (total,)
            return
        for first in range(total + 1):
            for rest in compositions(total - first, parts - 1):
                yield (first, *rest)

    return tuple(tuple(i / steps for i in c) for c in compositions(steps, n_legs))


def default_grid(method: Method, n_legs: int) -> tuple:
    """The grid `tune_fusion` searches when given none."""
    _check_method(method)
    return DEFAULT_RRF_K_GRID if method == "rrf_k" else default_weight_grid(n_legs)


def _check_method(method: object) -> None:
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not valid; valid: {', '.join(METHODS)}")


def _check_rrf_k(value: object, name: str) -> int:
    lo, hi = RRF_K_RANGE
    if not is_integer(value) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}] (as a variants file's rrf_k), got {value!r}")
    return int(value)


def _check_weights(value: object, n_legs: int, name: str) -> tuple[float, ...]:
    if not (isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == n_legs
            and all(is_finite(w) and w >= 0 for w in value) and sum(value) > 0):
        raise ValueError(f"{name} {value!r} must be {n_legs} non-negative numbers (one per leg), not all 0")
    return tuple(float(w) for w in value)


def _normalised(weights: Sequence[float]) -> tuple[float, ...]:
    total = sum(weights)
    return tuple(round(w / total, 12) for w in weights)


def _tie_key(method: str, value) -> tuple:
    """Smaller is preferred among tied grid points (see the module docstring)."""
    if method == "rrf_k":
        return (value,)
    norm = _normalised(value)
    equal = 1.0 / len(norm)
    return (round(math.dist(norm, [equal] * len(norm)), 9), norm)


# --------------------------------------------------------------------------
# tuning
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class GridPoint:
    """One grid point and its mean metric over the answerable tuning questions."""

    value: Any  # an rrf_k (int) or a weights tuple, one entry per leg
    score: float


@dataclass(frozen=True)
class TuningResult:
    """What `tune_fusion` chose and from what.

    `chosen` holds the tuned setting under the Variant field's name ({"rrf_k": 20} or
    {"weights": (0.3, 0.7)}), so `dataclasses.replace(variant, **result.chosen)` is the tuned
    variant; `fixed` the setting held constant while tuning.
    """

    method: str
    fusion: str
    legs: tuple[str, ...]
    chosen: Mapping[str, Any]
    fixed: Mapping[str, Any]
    metric: str
    grid: tuple[GridPoint, ...]
    n_tuning: int  # answerable tuning questions the scores are means over
    n_tuning_abstention: int  # tuning questions skipped (no grade > 0)
    tuning_qids: tuple[str, ...] = field(repr=False)  # sorted
    depth: int = DEPTH
    seed: int | None = None
    fraction: float | None = None

    @property
    def tuning_score(self) -> float:
        value = self.chosen[self.method]
        return next(p.score for p in self.grid if p.value == value)

    def fusion_params(self) -> dict[str, Any]:
        """fusion, rrf_k and weights as `fused_ranking` / `fusion_score` take them."""
        params = {"fusion": self.fusion, "rrf_k": RRF_K, "weights": None, **self.fixed, **self.chosen}
        return {"fusion": params["fusion"], "rrf_k": params["rrf_k"], "weights": params["weights"]}

    def check_held_out(self, qids: Iterable[str]) -> None:
        """Raise ValueError if any of `qids` was tuned on: the tuned variant is scored on the rest only."""
        overlap = sorted(set(qids) & set(self.tuning_qids))
        if overlap:
            raise ValueError(f"{len(overlap)} question(s) to score were tuned on (tuning and scoring must not "
                             f"overlap): {overlap[:10]}")

    def held_out_score(self, leg_runs: Mapping[str, Mapping[str, Sequence]], qrels: Mapping[str, Mapping[str, Any]],
                       held_out_qids: Iterable[str]) -> float:
        """The tuned fusion's metric on `held_out_qids`, refused if any was tuned on."""
        held_out = _qid_list(held_out_qids, "held_out_qids")
        self.check_held_out(held_out)
        return fusion_score(leg_runs, qrels, held_out, legs=self.legs, metric=self.metric, depth=self.depth,
                            **self.fusion_params())

    def provenance(self) -> dict[str, Any]:
        """A JSON-serialisable record of the tuning, for the tuned variant's provenance."""

        def plain(value):
            return list(value) if isinstance(value, tuple) else value

        return {
            "method": self.method,
            "fusion": self.fusion,
            "legs": list(self.legs),
            "chosen": {k: plain(v) for k, v in self.chosen.items()},
            "fixed": {k: plain(v) for k, v in self.fixed.items()},
            "metric": self.metric,
            "tuning_score": self.tuning_score,
            "n_tuning": self.n_tuning,
            "n_tuning_abstention": self.n_tuning_abstention,
            "tuning_qids_sha256": hashlib.sha256("\n".join(self.tuning_qids).encode("utf-8")).hexdigest(),
            "split_seed": self.seed,
            "split_fraction": self.fraction,
            "depth": self.depth,
            "grid_size": len(self.grid),
            "grid": [{self.method: plain(p.value), "score": p.score} for p in self.grid],
            "tie_break": ("smallest rrf_k" if self.method == "rrf_k"
                          else "weights closest to equal, then lexicographically smallest"),
        }


def _check_legs(leg_runs: Mapping, legs: Sequence[str] | None) -> tuple[str, ...]:
    if not isinstance(leg_runs, Mapping):
        raise TypeError(f"leg_runs must be a mapping leg -> {{qid: hits}}, got {type(leg_runs).__name__}")
    names = tuple(leg_runs) if legs is None else tuple(legs)
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"fusion needs two or more distinct legs, got {list(names)}")
    unknown = [leg for leg in names if leg not in leg_runs]
    if unknown:
        raise ValueError(f"leg(s) {unknown} not in leg_runs (which has {list(leg_runs)})")
    return names


def _tuning_inputs(leg_runs, qrels, qids: list[str], legs: tuple[str, ...]):
    """(per answerable qid: its legs' hits and its qrels, n abstention): looks up only `qids`."""
    if not qids:
        raise ValueError("the question set to score is empty")
    missing = [q for q in qids if q not in qrels]
    if missing:
        raise ValueError(f"{len(missing)} question(s) have no qrels (give {{}} for an abstention question): "
                         f"{missing[:10]}")
    for leg in legs:
        absent = [q for q in qids if q not in leg_runs[leg]]
        if absent:
            raise ValueError(f"{len(absent)} question(s) missing from leg {leg!r}'s run (give [] for a leg that "
                             f"found nothing): {absent[:10]}")
    inputs, n_abstention = [], 0
    for qid in sorted(qids):
        judged = qrels[qid]
        if not isinstance(judged, Mapping) or not all(is_real(g) for g in judged.values()):
            raise ValueError(f"qrels for {qid!r} must map doc ids to numeric grades, got {judged!r}")
        if not _answerable(judged):
            n_abstention += 1
            continue
        hits = [_as_hits(leg_runs[leg][qid], f"leg {leg!r}, question {qid!r}") for leg in legs]
        inputs.append((hits, dict(judged)))
    return inputs, n_abstention


def _mean_metric(inputs, k: int, depth: int, **params) -> float:
    values = [ndcg_at_k(fused_ranking(hits, depth=depth, **params), judged, k) for hits, judged in inputs]
    return math.fsum(values) / len(values)  # fsum: exact, so equal multisets of values tie exactly


def fusion_score(leg_runs: Mapping[str, Mapping[str, Sequence]], qrels: Mapping[str, Mapping[str, Any]],
                 qids: Iterable[str], *, fusion: str = "rrf", rrf_k: int = RRF_K,
                 weights: Sequence[float] | None = None, legs: Sequence[str] | None = None,
                 metric: str = PRIMARY_METRIC, depth: int = DEPTH) -> float:
    """The mean `metric` of one fusion setting over the answerable questions of `qids`."""
    k = _metric_k(metric)
    names = _check_legs(leg_runs, legs)
    inputs, _ = _tuning_inputs(leg_runs, qrels, _qid_list(qids, "qids"), names)
    if not inputs:
        raise ValueError("no answerable question to score (all have no grade > 0)")
    return _mean_metric(inputs, k, depth, fusion=fusion, rrf_k=rrf_k, weights=weights)


def tune_fusion(
    leg_runs: Mapping[str, Mapping[str, Sequence]],
    qrels: Mapping[str, Mapping[str, Any]],
    tuning_qids: Iterable[str],
    *,
    method: Method,
    grid: Sequence | None = None,
    metric: str = PRIMARY_METRIC,
    fusion: str = "rrf",
    rrf_k: int | None = None,
    weights: Sequence[float] | None = None,
    legs: Sequence[str] | None = None,
    depth: int = DEPTH,
    seed: int | None = None,
    fraction: float | None = None,
) -> TuningResult:
    """Grid-search `rrf_k` or the leg weights on the tuning questions only.

    leg_runs: leg -> {qid: that leg's hits for the question, best first} (ChunkHit or
        (doc_id, score) pairs); every tuning qid must be in every leg ([] when it found nothing).
    qrels: qid -> {doc_id: grade}; every tuning qid must be present ({} for abstention).
    method: "rrf_k" (fusion must be rrf; `weights` is held fixed, default equal) or "weights"
        (fusion rrf, with `rrf_k` held fixed, default `defaults.RRF_K`, or merge; dbsf ignores weights in
        Haystack's DocumentJoiner, so there is nothing to tune).
    grid: the values to try (default `default_grid`): rrf_k integers in [1, 10000], or weight
        vectors, one non-negative entry per leg in `legs` order (default: leg_runs' order).
    depth: the variant's depth (documents kept), as the sweep cuts the fused list.
    seed, fraction: the split's, recorded in provenance only.
    """
    _check_method(method)
    k = _metric_k(metric)
    names = _check_legs(leg_runs, legs)
    if not is_integer(depth) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got depth={depth!r}")
    if seed is not None:
        seed = _check_seed(seed)
    if fraction is not None:
        fraction = _check_fraction(fraction)

    if method == "rrf_k":
        if fusion != "rrf":
            raise ValueError(f"method 'rrf_k' tunes RRF's k: fusion must be 'rrf', got {fusion!r}")
        if rrf_k is not None:
            raise ValueError("method 'rrf_k' tunes rrf_k: do not also give rrf_k")
        fixed: dict[str, Any] = {"weights": None if weights is None else _check_weights(weights, len(names), "weights")}
    else:
        if fusion not in ("rrf", "merge"):
            hint = ("dbsf ignores leg weights (Haystack's DocumentJoiner)" if fusion == "dbsf"
                    else "valid: rrf, merge")
            raise ValueError(f"method 'weights' cannot tune fusion {fusion!r}: {hint}")
        if weights is not None:
            raise ValueError("method 'weights' tunes the weights: do not also give weights")
        if fusion == "rrf":
            fixed = {"rrf_k": RRF_K if rrf_k is None else _check_rrf_k(rrf_k, "rrf_k")}
        elif rrf_k is not None:
            raise ValueError(f"rrf_k only applies to fusion 'rrf', got fusion {fusion!r}")
        else:
            fixed = {}

    if grid is None:
        values = list(default_grid(method, len(names)))
    else:
        if isinstance(grid, (str, bytes)) or not isinstance(grid, Iterable):
            raise ValueError(f"grid must be a sequence of values, got {grid!r}")
        values = [_check_rrf_k(v, "an rrf_k grid value") if method == "rrf_k"
                  else _check_weights(v, len(names), "a weights grid value") for v in grid]
        if not values:
            raise ValueError("grid is empty")
        dupes = sorted({str(v) for i, v in enumerate(values) if v in values[:i]})
        if dupes:
            raise ValueError(f"grid lists value(s) more than once: {dupes}")

    qids = _qid_list(tuning_qids, "tuning_qids")
    if not qids:
        raise ValueError("the tuning set is empty: tuning needs at least one answerable question")
    inputs, n_abstention = _tuning_inputs(leg_runs, qrels, qids, names)
    if not inputs:
        raise ValueError(f"the tuning set has no answerable question ({n_abstention} abstention question(s), "
                         f"which nDCG cannot score)")

    points = []
    for value in values:
        params = {"fusion": fusion, "rrf_k": RRF_K, "weights": None, **fixed, method: value}
        points.append(GridPoint(value, _mean_metric(inputs, k, depth, **params)))
    best = max(p.score for p in points)
    tied = [p for p in points if p.score >= best - TIE_TOLERANCE]
    chosen = min(tied, key=lambda p: _tie_key(method, p.value))
    return TuningResult(
        method=method, fusion=fusion, legs=names, chosen={method: chosen.value}, fixed=fixed, metric=metric,
        grid=tuple(points), n_tuning=len(inputs), n_tuning_abstention=n_abstention,
        tuning_qids=tuple(sorted(qids)), depth=depth, seed=seed, fraction=fraction,
    )
