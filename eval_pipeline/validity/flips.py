"""Between runs: which questions of a variant changed from hit to miss, or back.

A mean that moved by one point hides the questions that moved: five new misses and four
new hits look like "one question worse". The flips list them, with the miss class of the
run in which the question missed, so a regression can be read question by question.

When two runs have *identical* provenance (same corpus, labels, question wording,
embedder, chunking, variant configuration and clean code version) there is nothing that
should change a result, so every flip is **nondeterministic**: a sign of score ties broken
differently, approximate-nearest-neighbour randomness, or an unstable reranker (an LLM
sampled at a temperature above 0). :func:`identical_provenance` decides that from two
recorded provenances; :func:`nondeterministic` applies it.

Inputs
------
An *outcome map* is ``qid -> Outcome`` (or ``qid -> bool``, a hit flag without a miss
class) for the answerable questions of one variant in one run, at one cutoff.
:func:`outcomes_from_frame` builds it from what the pipeline has: the per-question frame of
:func:`eval_pipeline.scoring.variant.score_variant`, or the ``questions`` frame that
:func:`eval_pipeline.history.runs.read_run` returns for a recorded run (which stores
``hit@10``, ``miss_class`` and ``doc_ids`` per question; a hit at another cutoff is
recomputed from ``doc_ids`` and the qrels).

Order and completeness
----------------------
Every list is sorted by qid. A question present in only one run is never dropped: it is
reported in ``only_previous`` / ``only_current`` (and as its own JSONL row). No function
mutates its inputs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from eval_pipeline.history.runs import PROVENANCE_FIELDS
from eval_pipeline.metrics.retrieval import Qrels, _check_k, hit_at_k

__all__ = [
    "DIRECTIONS",
    "RESULT_DECIDING_FIELDS",
    "Flip",
    "FlipReport",
    "Outcome",
    "flips",
    "identical_provenance",
    "nondeterministic",
    "outcomes_from_frame",
    "to_jsonl_rows",
]

HIT_TO_MISS = "hit_to_miss"
MISS_TO_HIT = "miss_to_hit"
ONLY_PREVIOUS = "only_previous"
ONLY_CURRENT = "only_current"
ERRORED = "errored"  # the miss class of a question whose engine failed: an error, never nondeterminism
DIRECTIONS = (HIT_TO_MISS, MISS_TO_HIT, ONLY_PREVIOUS, ONLY_CURRENT)

# Run-level provenance fields that decide a variant's per-question results: the history's
# provenance fields but `variants` (compared per variant below). `gate`, `gate_failed` and
# other verdict fields are outcomes, not inputs, and are not compared.
RESULT_DECIDING_FIELDS = tuple(f for f in PROVENANCE_FIELDS if f != "variants")


@dataclass(frozen=True)
class Outcome:
    """One answerable question of one variant in one run: a hit at the cutoff or not, and
    the diagnosed miss class when it missed (None if unknown or a hit)."""

    hit: bool
    miss_class: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.hit, (bool, np.bool_)):
            raise TypeError(f"hit must be True or False, got {self.hit!r}")
        object.__setattr__(self, "hit", bool(self.hit))
        if self.miss_class is not None and (not isinstance(self.miss_class, str) or not self.miss_class):
            raise TypeError(f"miss_class must be a non-empty string or None, got {self.miss_class!r}")


@dataclass(frozen=True)
class Flip:
    """A question whose outcome changed. ``miss_class`` is the class of the run in which it
    missed: the current run for ``hit_to_miss`` (why it is lost now), the previous run for
    ``miss_to_hit`` (what was fixed). For ``only_previous`` / ``only_current`` it is the
    class in the one run that has the question, and ``hit`` says whether that was a hit."""

    qid: str
    direction: str
    miss_class: str | None = None
    hit: bool | None = None


@dataclass(frozen=True)
class FlipReport:
    """The flips of one variant between two runs, each tuple sorted by qid."""

    hit_to_miss: tuple[Flip, ...]
    miss_to_hit: tuple[Flip, ...]
    only_previous: tuple[Flip, ...]
    only_current: tuple[Flip, ...]

    @property
    def flipped(self) -> tuple[Flip, ...]:
        """Both directions of change, sorted by qid."""
        return tuple(sorted(self.hit_to_miss + self.miss_to_hit, key=lambda f: f.qid))

    @property
    def net(self) -> int:
        """New hits minus new misses over the questions both runs have."""
        return len(self.miss_to_hit) - len(self.hit_to_miss)


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _outcomes(value: object, name: str) -> dict[str, Outcome]:
    """A new ``qid -> Outcome`` dict; bare bools become outcomes without a miss class."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of qid -> Outcome (or bool), got {type(value).__name__}")
    out: dict[str, Outcome] = {}
    for qid, outcome in value.items():
        if not isinstance(qid, str) or not qid:
            raise TypeError(f"{name} has a qid that is not a non-empty string: {qid!r}")
        if isinstance(outcome, Outcome):
            out[qid] = outcome
        elif isinstance(outcome, (bool, np.bool_)):
            out[qid] = Outcome(bool(outcome))
        else:
            raise TypeError(f"{name}[{qid!r}] must be an Outcome or a bool, got {type(outcome).__name__}: {outcome!r}")
    return out


def _check_flag(value: object, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


# --------------------------------------------------------------------------
# building outcomes
# --------------------------------------------------------------------------


def outcomes_from_frame(
    frame: pd.DataFrame,
    *,
    k: int = 10,
    variant: str | None = None,
    qrels: Mapping[str, Qrels] | None = None,
) -> dict[str, Outcome]:
    """``qid -> Outcome`` for the answerable questions of one variant at cutoff ``k``.

    ``frame`` is a :func:`eval_pipeline.scoring.variant.score_variant` frame or the
    ``questions`` frame of :func:`eval_pipeline.history.runs.read_run`. It needs ``qid``
    and ``answerable``; a frame with several variants (the history's) needs ``variant`` to
    pick one. The hit is read from the ``hit@{k}`` column (1.0 = hit) when there is one;
    otherwise it is recomputed from ``doc_ids`` with ``qrels`` (the history keeps only
    ``hit@10``, but the doc ids of every question), and without ``qrels`` that is a
    ValueError. Recomputing is only sound when the qrels are the ones the run was scored
    on, i.e. the two runs have the same labels fingerprint.

    Abstention questions are left out (a hit is not defined for them). Errored questions
    stay in, as misses (the metrics score them as empty rankings), and their miss class is
    whatever the frame records (``errored`` from the sweep). ``miss_class`` is kept only on
    misses: it was diagnosed at the sweep's ``miss_k``, and a question that hit at ``k``
    has no miss to explain. A miss at ``k`` < ``miss_k`` that hit by ``miss_k`` has None.
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a DataFrame, got {type(frame).__name__}")
    k = _check_k(k)
    missing = [c for c in ("qid", "answerable") if c not in frame.columns]
    if missing:
        raise ValueError(f"frame is missing column(s) {missing}")
    rows = frame
    if variant is not None:
        if not isinstance(variant, str) or not variant:
            raise ValueError(f"variant must be a non-empty string or None, got {variant!r}")
        if "variant" not in frame.columns:
            raise ValueError("frame has no 'variant' column to select variant from")
        rows = frame.loc[frame["variant"] == variant]
        if rows.empty:
            have = sorted(set(map(str, frame["variant"].dropna())))
            raise ValueError(f"frame has no rows for variant {variant!r}; it has {have}")
    elif "variant" in frame.columns and frame["variant"].nunique(dropna=True) > 1:
        have = sorted(set(map(str, frame["variant"].dropna())))
        raise ValueError(f"frame has several variants {have}: pass variant= to pick one")
    column = f"hit@{k}"
    if column not in rows.columns:
        if qrels is None:
            raise ValueError(f"frame has no {column!r} column; pass qrels to recompute it from doc_ids")
        if not isinstance(qrels, Mapping):
            raise TypeError(f"qrels must be a mapping of qid -> (doc id -> grade), got {type(qrels).__name__}")
        if "doc_ids" not in rows.columns:
            raise ValueError(f"frame has neither a {column!r} nor a 'doc_ids' column")
    qids = [str(q) for q in rows["qid"]]
    dupes = sorted(q for q, count in Counter(qids).items() if count > 1)
    if dupes:
        raise ValueError(f"frame has duplicate qid(s) {dupes[:10]}")

    out: dict[str, Outcome] = {}
    # only the columns an outcome is made of: a scored frame has forty more, each a cost to turn into records
    read = [c for c in ("answerable", column, "errored", "doc_ids", "miss_class") if c in rows.columns]
    for qid, record in zip(qids, rows[read].to_dict("records")):
        if not bool(record["answerable"]):
            continue
        if column in rows.columns:
            value = record[column]
            if pd.isna(value) or not np.isfinite(float(value)):
                raise ValueError(f"frame has no {column} value for answerable question {qid!r}: {value!r}")
            hit = float(value) > 0.0
        else:
            if qid not in qrels:  # type: ignore[operator]
                raise ValueError(f"qrels has no judgements for question {qid!r}")
            if not any(grade > 0 for grade in qrels[qid].values()):  # type: ignore[index]
                raise ValueError(f"qrels[{qid!r}] has no relevant document, but the frame marks the question "
                                 f"answerable: these are not the labels the run was scored on")
            errored = bool(record.get("errored", False))
            docs = record.get("doc_ids")
            ranking = [] if errored or docs is None or (isinstance(docs, float) and math.isnan(docs)) \
                else [str(d) for d in docs]
            hit = hit_at_k(ranking, qrels[qid], k) > 0.0  # type: ignore[index]
        miss = record.get("miss_class")
        miss_class = miss if isinstance(miss, str) and miss and not hit else None
        out[qid] = Outcome(hit, miss_class)
    return out


# --------------------------------------------------------------------------
# flips
# --------------------------------------------------------------------------


def flips(previous: Mapping[str, Outcome | bool], current: Mapping[str, Outcome | bool]) -> FlipReport:
    """The questions whose hit/miss outcome differs between ``previous`` and ``current``.

    Both are outcome maps of the same variant at the same cutoff. ``hit_to_miss`` carries
    the current miss class, ``miss_to_hit`` the previous one. Questions in only one map go
    to ``only_previous`` / ``only_current`` (with that run's hit flag and miss class), so a
    question set that changed between runs is visible rather than silently narrowed.
    """
    prev = _outcomes(previous, "previous")
    cur = _outcomes(current, "current")
    hit_to_miss, miss_to_hit = [], []
    for qid in sorted(set(prev) & set(cur)):
        before, after = prev[qid], cur[qid]
        if before.hit and not after.hit:
            hit_to_miss.append(Flip(qid, HIT_TO_MISS, after.miss_class))
        elif after.hit and not before.hit:
            miss_to_hit.append(Flip(qid, MISS_TO_HIT, before.miss_class))
    only_prev = [Flip(q, ONLY_PREVIOUS, prev[q].miss_class, prev[q].hit) for q in sorted(set(prev) - set(cur))]
    only_cur = [Flip(q, ONLY_CURRENT, cur[q].miss_class, cur[q].hit) for q in sorted(set(cur) - set(prev))]
    return FlipReport(tuple(hit_to_miss), tuple(miss_to_hit), tuple(only_prev), tuple(only_cur))


def nondeterministic(
    previous: Mapping[str, Outcome | bool],
    current: Mapping[str, Outcome | bool],
    same_provenance: bool,
) -> tuple[str, ...]:
    """The qids of the flips that can only be nondeterminism, sorted.

    With ``same_provenance`` (the two runs had identical inputs, see
    :func:`identical_provenance`) nothing should have changed any result, so *every* flip,
    in either direction, is returned. Otherwise none is: a changed input explains a flip.
    Questions present in only one run are not flips and never returned.
    """
    same = _check_flag(same_provenance, "same_provenance")
    report = flips(previous, current)
    return tuple(f.qid for f in report.flipped) if same else ()


def to_jsonl_rows(
    variant: str,
    previous: Mapping[str, Outcome | bool],
    current: Mapping[str, Outcome | bool],
    *,
    same_provenance: bool,
) -> list[dict[str, object]]:
    """Plain JSON-ready dicts, one per changed question, for a ``flips.jsonl`` file.

    Keys: ``variant``, ``question_id``, ``direction`` (one of :data:`DIRECTIONS`),
    ``miss_class`` (str or None, see :class:`Flip`) and ``nondeterministic`` (bool; never
    True for a question present in only one run, nor for one whose miss class is ``errored``:
    an engine error is an error, not nondeterminism). Rows are ordered ``hit_to_miss``,
    ``miss_to_hit``, ``only_previous``, ``only_current``, each by qid, so the file is
    byte-identical for identical inputs.
    """
    if not isinstance(variant, str) or not variant:
        raise ValueError(f"variant must be a non-empty string, got {variant!r}")
    same = _check_flag(same_provenance, "same_provenance")
    report = flips(previous, current)
    rows: list[dict[str, object]] = []
    for group, can_flag in ((report.hit_to_miss, True), (report.miss_to_hit, True),
                            (report.only_previous, False), (report.only_current, False)):
        rows.extend(
            {"variant": variant, "question_id": f.qid, "direction": f.direction, "miss_class": f.miss_class,
             "nondeterministic": bool(same and can_flag and f.miss_class != ERRORED)}
            for f in group
        )
    return rows


# --------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _clean_version(value: object) -> bool:
    """A code version that pins the code: a commit, not ``unknown`` and not ``-dirty`` (a
    dirty checkout at the same commit may run other code, so sameness cannot be shown)."""
    return isinstance(value, str) and bool(value.strip()) and value != "unknown" and not value.endswith("-dirty")


def identical_provenance(previous: Mapping[str, object], current: Mapping[str, object], variant: str) -> bool:
    """Whether ``variant`` was produced from identical inputs in both runs.

    True only when every field of :data:`RESULT_DECIDING_FIELDS` is present and equal, the
    variant's recorded configuration (``provenance["variants"][variant]``) and the code
    that ranked it (``provenance["variant_code_versions"][variant]``, when recorded) are
    equal, and every code version involved is clean (see ``_clean_version``). Anything
    missing or unprovable gives False, so a real change is never mislabelled as
    nondeterminism. Verdict fields (``gate``, ``gate_failed``) are ignored.

    ``previous`` / ``current`` are provenance mappings, or run records with a
    ``provenance`` key (as :func:`eval_pipeline.history.runs.read_run` and
    ``previous_run`` return them).
    """
    if not isinstance(variant, str) or not variant:
        raise ValueError(f"variant must be a non-empty string, got {variant!r}")
    sides = []
    for name, value in (("previous", previous), ("current", current)):
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a provenance mapping, got {type(value).__name__}")
        prov = value.get("provenance", value)
        if not isinstance(prov, Mapping):
            raise TypeError(f"{name}['provenance'] must be a mapping, got {type(prov).__name__}")
        sides.append(prov)
    prev, cur = sides
    for key in RESULT_DECIDING_FIELDS:
        if key not in prev or key not in cur or prev[key] is None or cur[key] is None:
            return False
        if _canonical(prev[key]) != _canonical(cur[key]):
            return False
    if not (_clean_version(prev["code_version"]) and _clean_version(cur["code_version"])):
        return False
    configs = [p.get("variants") for p in (prev, cur)]
    if not all(isinstance(c, Mapping) and variant in c for c in configs):
        return False
    if _canonical(configs[0][variant]) != _canonical(configs[1][variant]):  # type: ignore[index]
        return False
    versions = [p.get("variant_code_versions") for p in (prev, cur)]
    if any(isinstance(v, Mapping) and variant in v for v in versions):
        ranked = [v.get(variant) if isinstance(v, Mapping) else None for v in versions]
        if not all(_clean_version(r) for r in ranked) or ranked[0] != ranked[1]:
            return False
    return True
