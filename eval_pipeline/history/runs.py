"""Run history in Postgres: what each evaluation run measured, and on what.

"Did this change make retrieval better or worse?" needs the previous run's numbers *and*
proof that they were measured on the same thing. Each run is recorded with its provenance
(corpus signature, question-set and label fingerprints, embedder, chunking, scoring
protocol, code version, the config of every variant), the summary metrics of every variant
with their confidence intervals, and a compact per-question result, in the same database
as the vector tables.

Tables (``prefix`` defaults to ``eval``; created idempotently on first write)::

    {prefix}_runs               run_id PK, seq (insertion order), created_at, limited,
                                provenance columns + the full provenance as jsonb
    {prefix}_measurements       one row per (run, variant, aspect): the retrieval and the answer
    {prefix}_variant_metrics    measurements of a run, in one shape, with their metrics
                                (:mod:`eval_pipeline.history.measurements`)
    {prefix}_question_results   run_id, variant, qid, answerable, errored,
                                "hit@10", mrr, "ndcg@10", miss_class, doc_ids jsonb
    {prefix}_references         benchmark identity, variant, run_id, aspect (retrieval |
                                answers:<grader>), accepted_by, accepted_at, position, note:
                                the one record of the runs a user accepted as the pinned
                                reference (``position``: its place in the history)

This module records and reads a run's retrieval measurements; the lookups themselves (which
measurement is a variant's yardstick) are :mod:`eval_pipeline.history.measurements`', shared
with the answer history (:mod:`eval_pipeline.history.answers`).

Which earlier run is the yardstick (:func:`previous_run`, :func:`reference_run`):

* a variant's history is its name's, or, when its name has none, that of another name with
  the same configuration (:func:`eval_pipeline.history.identity.configuration_fingerprint`:
  a rename keeps its history);
* with a **benchmark identity** (corpus signature, the content fingerprint of the scored
  questions, scoring protocol), only runs of that benchmark are candidates: a run on other
  questions in between never hides the last comparable one; without, any benchmark's (the
  history a changed benchmark is paired with, :mod:`eval_pipeline.verdict.paired`);
* only **eligible** runs count: not limited, the whole verdict passed, no errored question,
  no reranker fallback; or runs a user accepted for that variant (:func:`accept_reference`);
* the **previous** run is the one that most recently became a yardstick (recorded eligible,
  or accepted later); the **reference** is the latest acceptance, else the first eligible run,
  so a regression cannot pass in small steps.

Comparability (:func:`compare_provenance`), what changed between two runs:

* ``comparable`` — same benchmark. A different embedder, chunking, variant config or database
  version is the *treatment* being evaluated: reported in ``treatment_changes``.
* ``mismatch`` — the benchmark changed (a reworded question, an edited gold, another scored
  subset, other scoring code): the numbers measure something else. The verdict then pairs the
  reference configuration on today's questions, or fails closed (``not_compared``).
* ``unknown`` — a required provenance field is missing or not a non-empty string.
* ``first_run`` — there is no earlier eligible run to compare with.

:func:`labels_fingerprint` (qid, gold and graded relevance only) is still recorded; it no
longer decides comparability: the question texts are part of the benchmark.

Limited runs (a subset of questions or variants, e.g. a smoke run) are recorded but are
never used as the previous run by default: their means are over other questions.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from eval_pipeline.common.formatting import float_or_none
from eval_pipeline.history import measurements
from eval_pipeline.metrics.retrieval import HISTORY, metric_names
from eval_pipeline.questions.sets import Question
from eval_pipeline.store.database import DatabaseError, connect

__all__ = [
    "COMPARABILITY_FIELDS",
    "Comparison",
    "PROVENANCE_FIELDS",
    "SCORING_PROTOCOL",
    "TREATMENT_FIELDS",
    "compare_provenance",
    "ensure_tables",
    "labels_fingerprint",
    "accept_reference",
    "benchmark_identity",
    "previous_run",
    "recorded_run_of",
    "read_run",
    "reference_run",
    "record_run",
    "table_names",
]

# Bump when metric conventions change (metric definitions, which questions enter the means,
# how errors or duplicates are scored): runs scored under different protocols are not
# comparable, and compare_provenance reports them as a mismatch.
SCORING_PROTOCOL = "v1"

# Fields whose change makes two runs measure different things.
# The benchmark's identity is its content (eval_pipeline.history.identity.benchmark_fingerprint):
# a reworded question, an edited gold or another scored subset is another benchmark.
COMPARABILITY_FIELDS = ("corpus_signature", "benchmark_fingerprint", "scoring_protocol")
# Fields whose change is the thing being evaluated (reported, still comparable): the run's
# index (a pair's own index stands for it), and the database server and extension versions.
TREATMENT_FIELDS = ("embedder", "embedder_revision", "embedder_identity", "chunking")
RUN_TREATMENT_FIELDS = ("database",)
PROVENANCE_FIELDS = (
    "corpus_signature",
    "question_set_fingerprint",
    "labels_fingerprint",
    "benchmark_fingerprint",
    "embedder",
    "embedder_revision",
    "chunking",
    "scoring_protocol",
    "code_version",
    "variants",
)

# Per-question metrics kept in the history (the full per-question file stays on disk).
QUESTION_METRICS = metric_names(HISTORY)  # kept per question (the registry's HISTORY list)

_PREFIX = re.compile(r"^[a-z_][a-z0-9_]{0,29}$")


# --------------------------------------------------------------------------
# fingerprints
# --------------------------------------------------------------------------


def labels_fingerprint(questions: Iterable[Question]) -> str:
    """Order-independent fingerprint of the labels only: (qid, gold, graded relevance).

    Unlike :func:`eval_pipeline.questions.sets.question_set_fingerprint` it ignores the question
    text, form, hard class and gist, so rewording a question keeps old runs comparable,
    while changing what counts as a correct answer does not. Gold order does not affect any
    metric, so gold ids are sorted. 16 hex characters, like the question-set fingerprint.
    """
    if isinstance(questions, (str, bytes, Question)):
        raise ValueError(f"questions must be an iterable of Question objects, got {questions!r}")
    lines = []
    seen: set[str] = set()
    for q in questions:
        if not isinstance(q, Question):
            raise ValueError(f"questions must contain Question objects, got {type(q).__name__}: {q!r}")
        if q.qid in seen:
            raise ValueError(f"duplicate qid {q.qid!r} in questions")
        seen.add(q.qid)
        record = {"qid": q.qid, "gold": sorted(q.gold), "relevance": {k: int(v) for k, v in q.relevance.items()}}
        lines.append(json.dumps(record, sort_keys=True, ensure_ascii=False))
    return hashlib.sha256("\n".join(sorted(lines)).encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------


def table_names(prefix: str = "eval") -> dict[str, str]:
    """The history's table names for ``prefix`` (a lowercase SQL identifier of 1–30
    characters, so derived index names stay within Postgres's 63-byte limit), each after the
    tables it refers to, so dropping them in reverse order respects their foreign keys."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(
            f"table prefix {prefix!r} must be 1-30 characters of lowercase letters, digits and _, "
            "not starting with a digit"
        )
    return {
        "answer_runs": f"{prefix}_answer_runs",  # the answer rows of a history before measurements: read once
        "runs": f"{prefix}_runs",
        "questions": f"{prefix}_question_results",
        "measurements": f"{prefix}_measurements",
        "metrics": f"{prefix}_variant_metrics",
        "references": f"{prefix}_references",
    }


# SQL: whether every table, column and index `create_tables` makes exists (the placement trigger
# aside): then it runs no DDL at all, which needs the tables' owner, so a role that may only read
# and write their rows records and reads a history in this shape.
_COMPLETE_SQL = " AND ".join([
    *(f"to_regclass(%({table})s) IS NOT NULL" for table in ("runs", "questions", "references", "measurements",
                                                             "metrics")),
    "to_regclass(%(measurements)s || '_variant_idx') IS NOT NULL",
    *(measurements.has_column_sql(table, column) for table, column in (
        ("runs", "eligible"), ("runs", "benchmark_fingerprint"), ("references", "aspect"),
        ("references", "accepted_by"), ("references", "benchmark_fingerprint"), ("references", "position"),
        ("measurements", "accepted_position"), ("measurements", "distrusted"), ("metrics", "aspect")))])


def create_tables(conn: Any, names: Mapping[str, str]) -> None:
    """Create the history's tables in ``conn``'s transaction (idempotent; concurrent callers
    wait on one advisory lock), upgrading an older history in place. A history already in
    this shape gets no DDL, at most its placement trigger back
    (:func:`eval_pipeline.history.measurements.restore_placement_trigger`)."""
    # one statement asks what `check_placement_once` and `restore_placement_trigger` would first ask
    # (one round trip and one snapshot, not four): a history in this shape, checked, marked and with its
    # trigger, the common case, needs nothing more
    complete, checked, marked, triggered = conn.execute(
        f"SELECT ({_COMPLETE_SQL}), {measurements.CLOCK_CHECKED_SQL}, {measurements.BOTH_MARKS_SQL}, "
        f"{measurements.HAS_PLACEMENT_TRIGGER_SQL}", dict(names)).fetchone()
    if complete:
        if not (checked and marked and triggered):
            measurements.check_placement_once(conn, names)
            measurements.restore_placement_trigger(conn, names)
        return
    runs, questions, references = (sql.Identifier(names[k]) for k in ("runs", "questions", "references"))
    # Concurrent first writers would race on CREATE TABLE IF NOT EXISTS (a unique violation
    # in pg_type); a transaction-scoped advisory lock serializes them.
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (names["runs"],))
    conn.execute(
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {runs} (
                run_id text PRIMARY KEY,
                seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
                created_at timestamptz NOT NULL DEFAULT now(),
                limited boolean NOT NULL,
                corpus_signature text,
                question_set_fingerprint text,
                labels_fingerprint text,
                embedder text,
                embedder_revision text,
                chunking jsonb,
                scoring_protocol text,
                code_version text,
                variants jsonb NOT NULL DEFAULT '{{}}'::jsonb,
                provenance jsonb NOT NULL,
                eligible boolean
            )"""
        ).format(runs=runs)
    )
    # Tables created before eligibility was recorded: their rows get it computed on read
    # (see _ELIGIBLE).
    conn.execute(sql.SQL("ALTER TABLE {runs} ADD COLUMN IF NOT EXISTS eligible boolean").format(runs=runs))
    # Histories recorded before the benchmark was identified by content: their runs have no
    # benchmark fingerprint, so they match no current run (the first run after the upgrade is
    # paired with them, or accepted).
    conn.execute(sql.SQL("ALTER TABLE {runs} ADD COLUMN IF NOT EXISTS benchmark_fingerprint text").format(runs=runs))
    conn.execute(
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {questions} (
                run_id text NOT NULL REFERENCES {runs} (run_id) ON DELETE CASCADE,
                variant text NOT NULL,
                qid text NOT NULL,
                answerable boolean NOT NULL,
                errored boolean NOT NULL,
                {hit10} double precision,
                mrr double precision,
                {ndcg10} double precision,
                miss_class text,
                doc_ids jsonb,
                PRIMARY KEY (run_id, variant, qid)
            )"""
        ).format(
            questions=questions, runs=runs, hit10=sql.Identifier("hit@10"), ndcg10=sql.Identifier("ndcg@10")
        )
    )
    conn.execute(
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {references} (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                corpus_signature text,
                labels_fingerprint text,
                scoring_protocol text,
                variant text NOT NULL,
                run_id text NOT NULL REFERENCES {runs} (run_id) ON DELETE CASCADE,
                accepted_at timestamptz NOT NULL DEFAULT now(),
                note text NOT NULL DEFAULT ''
            )"""
        ).format(references=references, runs=runs)
    )
    # One acceptance record for retrieval and answers: `aspect` is `retrieval` or
    # `answers:<grader>`; who accepted, and the benchmark accepted on.
    for column, kind in (("aspect", "text NOT NULL DEFAULT 'retrieval'"), ("accepted_by", "text NOT NULL DEFAULT ''"),
                         ("benchmark_fingerprint", "text")):
        conn.execute(sql.SQL("ALTER TABLE {references} ADD COLUMN IF NOT EXISTS {column} " + kind).format(
            references=references, column=sql.Identifier(column)))
    # the measurements of both aspects, and their metrics (an older history is upgraded here)
    measurements.create(conn, names, legacy_answers=names["answer_runs"], eligible_sql=_ELIGIBLE)


def ensure_tables(connection_string: str, *, prefix: str = "eval") -> None:
    """Create the history tables if they do not exist (idempotent, safe concurrently)."""
    names = table_names(prefix)
    with connect(connection_string) as conn, conn.transaction():
        create_tables(conn, names)


def history_exists(conn: Any, names: Mapping[str, str]) -> bool:
    """Whether there is a history; one in an older shape (no measurements, no references
    table, no eligible column, acceptances without positions or the trigger that places them)
    is upgraded in place first, under the same lock as a first write, so its variants keep
    their yardsticks; one placed without this version's mark is distrusted once
    (:func:`eval_pipeline.history.measurements.check_placement_once`)."""
    # one round trip: every lookup asks it first
    runs, metrics, current, answers, aspect, metrics_aspect, placed, triggered, checked = conn.execute(
        "SELECT to_regclass(%(runs)s) IS NOT NULL, to_regclass(%(metrics)s) IS NOT NULL, "
        "to_regclass(%(measurements)s) IS NOT NULL, to_regclass(%(answer_runs)s) IS NOT NULL, "
        + ", ".join(measurements.has_column_sql(table, "aspect") for table in ("references", "metrics"))
        + ", " + measurements.has_column_sql("references", "position") + " AND "
        + measurements.has_column_sql("measurements", "distrusted")
        + ", " + measurements.HAS_PLACEMENT_TRIGGER_SQL + ", " + measurements.BOTH_MARKS_SQL,
        names,
    ).fetchone()
    # A history missing one of its tables is damaged, not empty: read as empty (or rebuilt
    # empty) it would make every variant a first run.
    if runs != metrics or (current and not runs):
        raise DatabaseError(f"the history is damaged: of {names['runs']}, {names['metrics']} and "
                            f"{names['measurements']}, some exist without the others")
    if metrics and not current and metrics_aspect:
        raise DatabaseError(f"the history is damaged: {names['metrics']} holds measurements' metrics, and "
                            f"{names['measurements']} is missing")
    if not (runs or current or answers):
        return False
    if not (runs and current and aspect and placed):
        with conn.transaction():
            create_tables(conn, names)
        return True
    # without both marks: placed by 87cb394..f19148d^ (distrusted once), or marked by
    # 4fafd48..a7f1507^ (given f19148d's mark)
    if not checked:
        measurements.check_placement_once(conn, names)
    if not triggered:
        measurements.restore_placement_trigger(conn, names)
    return True


# --------------------------------------------------------------------------
# recording
# --------------------------------------------------------------------------


def _doc_ids(value: object) -> list[str] | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (str, bytes)):
        raise ValueError(f"doc_ids must be a list of document ids, got the string {value!r}")
    return [str(d) for d in value]  # type: ignore[attr-defined]  # not iterable: a TypeError, as intended


def _json_or_error(value: object, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serializable (no NaN/inf): {exc}") from exc


def _metric_rows(run_id: str, summary: pd.DataFrame, intervals: pd.DataFrame | None) -> list[tuple]:
    """(run_id, variant, metric, value, ci_low, ci_high) for every numeric summary column."""
    ci: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    if intervals is not None:
        for _, r in intervals.iterrows():
            ci[(str(r["variant"]), str(r["metric"]))] = (float_or_none(r["low"]), float_or_none(r["high"]))
    numeric = [
        c for c in summary.columns
        if c != "variant" and pd.api.types.is_numeric_dtype(summary[c]) and not pd.api.types.is_bool_dtype(summary[c])
    ]
    rows = []
    for _, r in summary.iterrows():
        variant = str(r["variant"])
        for metric in numeric:
            low, high = ci.get((variant, metric), (None, None))
            rows.append((run_id, variant, metric, float_or_none(r[metric]), low, high))
    # CIs for metrics the summary lacks would be silently dropped; refuse instead.
    extra = sorted(set(ci) - {(r[1], r[2]) for r in rows})
    if extra:
        raise ValueError(f"intervals name (variant, metric) pairs absent from the summary: {extra[:10]}")
    return rows


def _question_rows(run_id: str, per_query: Mapping[str, pd.DataFrame]) -> list[tuple]:
    rows = []
    for variant, frame in per_query.items():
        if not isinstance(frame, pd.DataFrame):
            raise ValueError(f"per_query[{variant!r}] must be a DataFrame, got {type(frame).__name__}")
        missing = [c for c in ("qid", "answerable", "errored") if c not in frame.columns]
        if missing:
            raise ValueError(f"per_query[{variant!r}] is missing column(s) {missing}")
        duplicated = frame["qid"][frame["qid"].duplicated()].tolist()
        if duplicated:
            raise ValueError(f"per_query[{variant!r}] has duplicate qid(s) {sorted(set(duplicated))[:10]}")
        # read column by column, the columns kept only: a frame's records (`to_dict`) box every
        # value of every column, 0.48 of this function's 0.63 profiled seconds on the demo
        def column(name: str, frame: pd.DataFrame = frame) -> list:
            return frame[name].tolist() if name in frame.columns else [None] * len(frame)

        metrics = list(zip(*(column(m) for m in QUESTION_METRICS))) or [()] * len(frame)
        for qid, answerable, errored, miss, ids, values in zip(column("qid"), column("answerable"),
                                                               column("errored"), column("miss_class"),
                                                               column("doc_ids"), metrics):
            doc_ids = _doc_ids(ids)
            rows.append((run_id, str(variant), str(qid), bool(answerable), bool(errored),
                         *(float_or_none(v) for v in values), miss if isinstance(miss, str) else None,
                         None if doc_ids is None else Jsonb(doc_ids)))
    return rows


def _insert_question_rows(cur: Any, table: str, rows: list[tuple]) -> None:
    """Insert the per-question rows (a separate function so a test can make it fail midway)."""
    cols = ["run_id", "variant", "qid", "answerable", "errored", *QUESTION_METRICS, "miss_class", "doc_ids"]
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, cols)),
        sql.SQL(", ").join(sql.Placeholder() * len(cols)),
    )
    cur.executemany(query, rows)


def record_run(
    connection_string: str,
    *,
    run_id: str,
    provenance: Mapping[str, Any],
    summary: pd.DataFrame,
    per_query: Mapping[str, pd.DataFrame],
    intervals: pd.DataFrame | None,
    limited: bool,
    eligible: bool | None = None,
    prefix: str = "eval",
) -> None:
    """Record one run, all or nothing, in one transaction.

    * ``provenance``: see :data:`PROVENANCE_FIELDS`; ``variants`` maps variant key -> its
      config (e.g. ``Variant.describe()``). Stored whole as jsonb, plus one column per
      scalar field for ad-hoc SQL. A missing ``scoring_protocol`` is filled in with
      :data:`SCORING_PROTOCOL` (the metrics were computed by this code). Missing other
      fields are stored as missing; :func:`compare_provenance` then reports ``unknown``.
    * ``summary``: :func:`eval_pipeline.scoring.variant.summarize` output; every numeric column is
      stored as a metric of its variant (NaN as NULL).
    * ``per_query``: variant -> :func:`eval_pipeline.scoring.variant.score_variant` frame; must have
      exactly the summary's variants.
    * ``intervals``: :func:`eval_pipeline.metrics.statistics.metric_intervals` output or None; its
      ``low``/``high`` become ``ci_low``/``ci_high``.
    * ``limited``: True for a run on a subset (never used as a previous run by default).
    * ``eligible``: whether the run may serve as a later run's yardstick: it passed every
      blocking check (no errored question, every gate passed) and is not limited. None
      derives it from the data: not limited, no errored question, no ``gate_failed`` in the
      provenance. A limited run is never eligible, whatever is passed.

    Re-recording a ``run_id`` replaces its rows (a retried Dagster step must not duplicate
    history) and keeps its original position in the history (``seq``, ``created_at``).
    All inputs are validated and converted before the database is touched.
    """
    names = table_names(prefix)
    if not isinstance(run_id, str) or not run_id.strip():
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
    if not isinstance(limited, bool):
        raise ValueError(f"limited must be True or False, got {limited!r}")
    if eligible is not None and not isinstance(eligible, bool):
        raise ValueError(f"eligible must be True, False or None, got {eligible!r}")
    if not isinstance(provenance, Mapping):
        raise ValueError(f"provenance must be a mapping, got {type(provenance).__name__}")
    prov = dict(provenance)
    prov.setdefault("scoring_protocol", SCORING_PROTOCOL)
    _json_or_error(prov, "provenance")
    variants_cfg = prov.get("variants")
    if variants_cfg is not None and not isinstance(variants_cfg, Mapping):
        raise ValueError(f"provenance['variants'] must map variant key -> config, got {variants_cfg!r}")
    if not isinstance(summary, pd.DataFrame) or "variant" not in summary.columns:
        raise ValueError("summary must be a DataFrame with a 'variant' column "
                         "(eval_pipeline.scoring.variant.summarize)")
    if summary["variant"].duplicated().any():
        raise ValueError(
            f"summary has duplicate variants: {summary['variant'][summary['variant'].duplicated()].tolist()}")
    if not isinstance(per_query, Mapping):
        raise ValueError(f"per_query must be a mapping of variant -> DataFrame, got {type(per_query).__name__}")
    in_summary, in_per_query = set(map(str, summary["variant"])), set(map(str, per_query))
    if in_summary != in_per_query:
        raise ValueError(
            f"summary and per_query must cover the same variants: only in summary {sorted(in_summary - in_per_query)}, "
            f"only in per_query {sorted(in_per_query - in_summary)}"
        )
    if intervals is not None:
        missing = [c for c in ("variant", "metric", "low", "high") if c not in getattr(intervals, "columns", ())]
        if missing:
            raise ValueError(
                f"intervals is missing column(s) {missing} (eval_pipeline.metrics.statistics.metric_intervals)")

    metric_rows = _metric_rows(run_id, summary, intervals)
    question_rows = _question_rows(run_id, per_query)
    any_errored = any(row[4] for row in question_rows)
    if eligible is None:
        eligible = not any_errored and not prov.get("gate_failed")
    eligible = eligible and not limited and not any_errored

    def text(key: str) -> str | None:
        value = prov.get(key)
        return value if isinstance(value, str) else None

    run_row = {
        "run_id": run_id,
        "limited": limited,
        "corpus_signature": text("corpus_signature"),
        "question_set_fingerprint": text("question_set_fingerprint"),
        "labels_fingerprint": text("labels_fingerprint"),
        "benchmark_fingerprint": text("benchmark_fingerprint"),
        "embedder": text("embedder"),
        "embedder_revision": text("embedder_revision"),
        "chunking": None if prov.get("chunking") is None else Jsonb(prov["chunking"]),
        "scoring_protocol": text("scoring_protocol"),
        "code_version": text("code_version"),
        "variants": Jsonb(dict(variants_cfg or {})),
        "provenance": Jsonb(prov),
        "eligible": eligible,
    }
    cols = list(run_row)
    upsert = sql.SQL(
        "INSERT INTO {runs} ({cols}) VALUES ({vals}) ON CONFLICT (run_id) DO UPDATE SET {updates}"
    ).format(
        runs=sql.Identifier(names["runs"]),
        cols=sql.SQL(", ").join(map(sql.Identifier, cols)),
        vals=sql.SQL(", ").join(sql.Placeholder(c) for c in cols),
        updates=sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in cols if c != "run_id"
        ),
    )

    rows, values = _measurement_rows(run_row, prov, summary, metric_rows, question_rows)
    with connect(connection_string) as conn:
        with conn.transaction(), conn.cursor() as cur:
            create_tables(cur, names)
            cur.execute(upsert, run_row)
            cur.execute(sql.SQL("DELETE FROM {} WHERE run_id = %s").format(sql.Identifier(names["questions"])),
                        (run_id,))
            measurements.write(cur, names, run_id, measurements.RETRIEVAL, rows, values)
            _insert_question_rows(cur, names["questions"], question_rows)


def _measurement_rows(run_row: Mapping[str, Any], prov: Mapping[str, Any], summary: pd.DataFrame,
                      metric_rows: list[tuple], question_rows: list[tuple]) -> tuple[list[dict], dict]:
    """The run's retrieval measurements, one per variant (:mod:`eval_pipeline.history.measurements`),
    and their metrics: the run's benchmark identity, limited and eligible flags (``run_row``,
    as recorded in ``{runs}``) for each. What the run's provenance says of one variant travels
    with it: its configuration fingerprint, the name it inherited in a rename, its gate."""

    def of(key: str, variant: str) -> Any:
        value = prov.get(key)
        return value.get(variant) if isinstance(value, Mapping) else None

    rows, values = [], {}
    for variant in map(str, summary["variant"]):
        asked = [r for r in question_rows if r[1] == variant]
        configuration = of("configurations", variant)
        inherits = of("inherits", variant)
        rows.append({
            "run_id": run_row["run_id"], "variant": variant, "aspect": measurements.RETRIEVAL,
            "corpus_signature": run_row["corpus_signature"], "benchmark_id": measurements.RETRIEVAL_BENCHMARK_ID,
            "benchmark": run_row["benchmark_fingerprint"], "instrument": run_row["scoring_protocol"],
            "configuration": configuration if isinstance(configuration, str) else None, "generator": None,
            "limited": run_row["limited"], "errored": sum(1 for r in asked if r[4]), "eligible": run_row["eligible"],
            "n_scored": len(asked), "variant_config": config if isinstance(config := of("variants", variant), Mapping)
            else {},
            "provenance": {k: v for k, v in (("configuration", configuration), ("inherits", inherits),
                                             ("gate", of("gate", variant))) if v is not None}})
        values[(variant, measurements.RETRIEVAL)] = [r[2:] for r in metric_rows if r[1] == variant]
    return rows, values


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)


def benchmark_identity(provenance: Mapping[str, Any]) -> dict[str, Any]:
    """What a run measured: the comparability fields of its provenance. Only runs with the
    same identity are ever each other's yardstick."""
    return {key: provenance.get(key) for key in COMPARABILITY_FIELDS}


# A run may be a yardstick when it is not limited, no question errored and no gate failed.
# Rows recorded before eligibility was stored (eligible IS NULL) get it computed here.
_ELIGIBLE = """COALESCE(r.eligible,
    NOT r.limited
    AND COALESCE(r.provenance->'gate_failed', '[]'::jsonb) IN ('[]'::jsonb, 'false'::jsonb)
    AND NOT EXISTS (SELECT 1 FROM {questions} q WHERE q.run_id = r.run_id AND q.errored))"""


def _run_with_metrics(conn: Any, names: Mapping[str, str],
                      found: measurements.Yardstick | None) -> dict[str, Any] | None:
    """The retrieval measurement ``found`` with its run's provenance and its metrics, or None."""
    if found is None:
        return None
    run_id, variant = found.run_id, found.variant
    seq, created_at, limited, accepted_at, position, provenance = conn.execute(sql.SQL(
        "SELECT m.seq, m.created_at, m.limited, " + measurements.ACCEPTED_AT + ", "
        + measurements.ACCEPTED_POSITION + ", r.provenance"
        " FROM {measurements} m JOIN {runs} r ON r.run_id = m.run_id"
        " WHERE m.run_id = %s AND m.variant = %s AND m.aspect = %s").format(
            measurements=sql.Identifier(names["measurements"]), runs=sql.Identifier(names["runs"]),
            references=sql.Identifier(names["references"])),
        (run_id, variant, measurements.RETRIEVAL)).fetchone()
    values = conn.execute(
        sql.SQL("SELECT metric, value, ci_low, ci_high FROM {} WHERE run_id = %s AND variant = %s AND aspect = %s"
                " ORDER BY metric").format(sql.Identifier(names["metrics"])),
        (run_id, variant, measurements.RETRIEVAL),
    ).fetchall()
    return {
        "accepted": accepted_at is not None,
        "accepted_at": accepted_at,  # when it was last accepted (None: never)
        "accepted_position": position,  # where that acceptance stands in the history (None: unknown)
        "run_id": run_id,
        "created_at": created_at,
        "seq": seq,  # where the measurement stands in the history
        "limited": limited,
        "variant": variant,  # the name it had in that run: another one when found by its configuration
        "provenance": provenance,
        "metrics": {m: _nan_if_none(v) for m, v, _, _ in values},
        "intervals": {m: (lo, hi) for m, _, lo, hi in values if lo is not None and hi is not None},
        **found.conflict_mark(),
    }


def _measured_identity(identity: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run's benchmark identity (:func:`benchmark_identity`) as its retrieval measurements
    record it (:data:`eval_pipeline.history.measurements.IDENTITY_FIELDS`)."""
    if identity is None:
        return None
    return {"corpus_signature": identity.get("corpus_signature"),
            "benchmark_id": measurements.RETRIEVAL_BENCHMARK_ID,
            "benchmark": identity.get("benchmark_fingerprint"), "instrument": identity.get("scoring_protocol")}


def earlier_names(connection_string: str, *, variant: str, before_run_id: str | None = None,
                  prefix: str = "eval") -> list[str]:
    """The names ``variant`` had before, nearest first: a run that renamed a variant (the new name
    inherited a vanished name's history, same configuration) records it, and the lineage follows
    those records back. The pinned reference follows the lineage (a rename is the same
    variant), so a rename does not re-pin it to the rename run."""
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return []
        return measurements.earlier_names(conn, names, aspect=measurements.RETRIEVAL, variant=variant,
                                          before_run_id=before_run_id)


def recorded_run_of(connection_string: str, *, variant: str, configuration: str | None = None,
                    heirs: Sequence[str] = (), before_run_id: str | None = None,
                    prefix: str = "eval") -> str | None:
    """The latest full run recorded with ``variant`` at all (eligible or not), by its name or,
    with ``configuration``, under one of ``heirs`` with that configuration; None when there is
    none: only then is it a genuinely new variant (a variant added in a run that failed has a
    history, with no yardstick in it). A limited run (a subset of the questions, a smoke run)
    does not count: it measured nothing a full run could be compared with."""
    _check_lookup(variant, before_run_id)
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return None
        return measurements.recorded_of(conn, names, aspect=measurements.RETRIEVAL, variant=variant,
                                        configuration=configuration if heirs else None, heirs=list(heirs),
                                        before_run_id=before_run_id)


def recorded_measurements(connection_string: str, *, variant: str, configuration: str | None = None,
                          live: Mapping[str, str | None] | None = None, before_run_id: str | None = None,
                          prefix: str = "eval") -> list[dict[str, Any]]:
    """Every full run that recorded a retrieval measurement of ``variant`` (eligible or not) under
    its name, or (with ``configuration``) of its configuration under a name ``live`` (today's names,
    each with its configuration) does not have with it (a rename before any run of it was eligible,
    or the old setting moved to a new name), newest first, each ``{"run_id",
    "variant" (the name it was recorded under), "provenance", "metrics"}`` (the run's provenance, the
    measurement's metrics, NULL as NaN): what a verdict that found nothing comparable still reads,
    so that a drop from any of them is shown rather than accepted unseen."""
    _check_lookup(variant, before_run_id)
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return []
        rows = measurements.recorded_rows(conn, names, aspect=measurements.RETRIEVAL, variant=variant,
                                          configuration=configuration, live=live, before_run_id=before_run_id)
    return [{"run_id": str(run_id), "variant": str(name), "provenance": provenance or {},
             "metrics": {str(m): _nan_if_none(v) for m, v in (values or {}).items()}}
            for run_id, name, provenance, values in rows]


def recorded_as_another(connection_string: str, *, configuration: str, live: Mapping[str, str | None],
                        before_run_id: str | None = None, prefix: str = "eval") -> tuple[str, str] | None:
    """(run id, name) of the latest full run that recorded a retrieval measurement of
    ``configuration`` under a name ``live`` (today's names, each with its configuration) does not
    have with it (gone from the variants file, or kept for another setting), or None. A variant
    renamed before any run of it was eligible never became known, so nothing vanished: without
    this, the new name was "never recorded" and passed as a first run. No acceptance limits it (an
    acceptance of another variant once hid it): a configuration recorded under any retired name is
    not new, and a drop from its runs is shown (fail closed: re-adding a retired configuration under
    a new name needs one acceptance)."""
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return None
        return measurements.recorded_elsewhere(conn, names, aspect=measurements.RETRIEVAL,
                                               configuration=configuration, live=live,
                                               before_run_id=before_run_id)


def _check_lookup(variant: object, before_run_id: object) -> None:
    if not isinstance(variant, str) or not variant:
        raise ValueError(f"variant must be a non-empty string, got {variant!r}")
    if before_run_id is not None and not isinstance(before_run_id, str):
        raise ValueError(f"before_run_id must be a string or None, got {before_run_id!r}")


def previous_run(
    connection_string: str,
    *,
    variant: str,
    identity: Mapping[str, Any] | None = None,
    configuration: str | None = None,
    before_run_id: str | None = None,
    prefix: str = "eval",
    heirs: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """The latest earlier run that can be ``variant``'s yardstick, or None.

    Candidates have the variant, by name or, with ``configuration`` (its
    :func:`eval_pipeline.history.identity.configuration_fingerprint`), under another name
    with the same configuration (with ``heirs``, only under one of those names: the names a
    rename may inherit from); are eligible (not limited, no errored question, every gate
    passed: a regression or an incomplete run must not become the yardstick of the next
    run) or were accepted for it by a user; and, with ``identity`` (see
    :func:`benchmark_identity`), measured the same benchmark: a run on other questions in
    between never hides the last comparable one. Without ``identity``, the latest
    candidate of any benchmark (the history a changed benchmark is paired with).

    "Latest" is when the run became a yardstick: recorded eligible, or accepted (so
    re-accepting an older run makes it the previous run again). With ``before_run_id`` of
    a recorded run, only runs recorded before it count; if that run is not recorded yet
    (the verdict is decided before the record), every other run counts. The run
    ``before_run_id`` itself is never returned. No history tables yet means no previous run.

    Returns ``{"run_id", "created_at", "limited", "variant" (its name in that run),
    "provenance", "metrics": {metric: value}, "intervals": {metric: (ci_low, ci_high)}}``;
    metric values stored as NULL come back as NaN, and metrics without an interval are
    absent from ``intervals``.
    """
    _check_lookup(variant, before_run_id)
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return None
        found = measurements.find(conn, names, aspect=measurements.RETRIEVAL, variant=variant, order="latest",
                                  identity=_measured_identity(identity), configuration=configuration, heirs=heirs,
                                  before_run_id=before_run_id)
        return _run_with_metrics(conn, names, found)


def acceptance_conflict(reference: Mapping[str, Any] | None) -> str | None:
    """Why the pinned reference (or an anchor) ``reference`` cannot be trusted: an acceptance of
    another run made after it has no entry in the acceptance log (``acceptance_conflict``, set by
    the lookup: `measurements.Yardstick`), or None."""
    found = reference or {}
    other = found.get("acceptance_conflict")
    if not other:
        return None
    run, variant = str(found.get("run_id")), str(found.get("variant"))
    if other == run:
        return (f"run {run}'s latest acceptance has no entry of its own in the acceptance log (accepted again "
                "with that entry deleted, placed by a trigger this version did not make, or one of several made by "
                "a version that recorded no time): which bar is in force "
                f"cannot be told; accept the intended one again: {accept_command(run, [variant])}, "
                f"or accept a newer run of {variant}")
    return (f"run {other} was accepted after run {run} but that acceptance has no entry in the acceptance log (the "
            "entry deleted, or a run with no run row to log it against): which bar is in force cannot be told; "
            f"accept the intended one again: {accept_command(run, [variant])}, or "
            f"{accept_command(other, [variant])} (a run whose run row is recorded: only it can be logged)")


def moved_reference(previous: Mapping[str, Any] | None, reference: Mapping[str, Any] | None, *, judged: object,
                    inherited: bool = False) -> str | None:
    """Why today's pinned ``reference`` is not one the ``previous`` run (or answer row) was judged
    against and no user chose since, or None. ``judged`` is the previous run's recorded gate (its
    ``reference_run_id``: the reference it was judged against; runs from before that was recorded
    have none). ``inherited``: the reference was found through an earlier name of the variant, so
    an acceptance of it was, if any, for whatever variant has that name now, never for this one.

    The reference moves legitimately in two ways only: it is the one the previous run was judged
    against (or the previous run was the first, judged against none, and is now the reference),
    or a user accepted it after the previous run was recorded (``accepted_position`` after the
    previous's ``seq``: one sequence numbers both). Anything else (the reference's
    run, or its measurement of this variant, deleted; the latest acceptance deleted, so an older
    one came back; a history from before references were recorded) would silently put another
    yardstick in its place, against which a regression in steps can pass."""
    if previous is None or reference is None:
        return None
    conflict = acceptance_conflict(reference)
    if conflict is not None:
        return conflict
    entry = judged if isinstance(judged, Mapping) else {}
    recorded, judged_against = "reference_run_id" in entry, entry.get("reference_run_id")
    now = reference.get("run_id")
    if recorded and judged_against == now:
        return None
    if recorded and judged_against is None and previous.get("run_id") == now:
        return None
    # accepted since: by position in the history, never by time (a clock that ran ahead and was
    # set back would make an old acceptance later than every run since); an acceptance an older
    # install made without a position cannot be placed, and is not taken as accepted since
    position, previous_seq = reference.get("accepted_position"), previous.get("seq")
    if not inherited and position is not None and previous_seq is not None and position > previous_seq:
        return None
    was = (f"against the pinned reference {judged_against}" if recorded and judged_against else
           "against no reference" if recorded else "without recording its reference (an older version)")
    return (f"the previous run {previous.get('run_id')} was judged {was}, and the pinned reference is now {now}, "
            "which no one accepted since (a run, a measurement or an acceptance deleted from the history?)")


def reference_run(
    connection_string: str,
    *,
    variant: str,
    identity: Mapping[str, Any] | None,
    configuration: str | None = None,
    before_run_id: str | None = None,
    prefix: str = "eval",
    heirs: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """The pinned reference of ``variant``: the run a user accepted for it most recently
    (:func:`accept_reference`; by when it was accepted, not when it ran), else the first
    eligible run; of this benchmark with ``identity``, of any benchmark without (the verdict
    keeps the pinned reference across benchmark changes: its configuration is then paired on
    today's questions). Each run is also judged against it, so a regression cannot pass in
    steps that each stay within the tolerance. Same shape and lookup as :func:`previous_run`
    (whose ``"accepted"`` says whether it was accepted)."""
    _check_lookup(variant, before_run_id)
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return None
        found = measurements.find(conn, names, aspect=measurements.RETRIEVAL, variant=variant, order="reference",
                                  identity=_measured_identity(identity), configuration=configuration, heirs=heirs,
                                  before_run_id=before_run_id)
        return _run_with_metrics(conn, names, found)


def project_history(connection_string: str, *, before_run_id: str | None = None,
                    prefix: str = "eval") -> dict[str, Any]:
    """What the history says about the project as a whole:

    * ``has_yardstick``: any run eligible or accepted; ``has_runs``: any full run recorded at
      all (eligible or not; a limited run does not count): a project is new only without one;
    * ``configurations_of``: each known name's configuration fingerprint in its latest run (a
      new name inherits only from a vanished name with its configuration);
    * ``known``: the variants of every eligible or accepted run recorded from the run of the
      latest acceptance on (by name and by the variants file's keys; the whole history when
      nothing was ever accepted). A known variant missing from today's variants file has
      vanished, and accepting a run without it acknowledges the removal;
    * ``established``: the variants of the run of the latest acceptance (else of the first
      eligible run). While a variant has vanished, a variant that is not established, whether
      new today or added since, cannot be told from the vanished one renamed and changed;
    * ``policy``, ``tolerances``: the gate in force (:func:`_pinned_gate`)."""
    names = table_names(prefix)
    empty: dict[str, Any] = {"has_yardstick": False, "has_runs": False, "known": [], "established": [],
                             "configurations_of": {}}
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return empty
        has_runs = conn.execute(sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {runs} r WHERE NOT r.limited"
            " AND (%(before)s::text IS NULL OR r.run_id <> %(before)s::text)"
            # nor one recorded after the run being judged, when it is recorded (read here: no round trip)
            " AND (r.seq < (SELECT c.seq FROM {runs} c WHERE c.run_id = %(before)s::text)) IS NOT FALSE)").format(
                runs=sql.Identifier(names["runs"])),
            {"before": before_run_id}).fetchone()[0]
        empty["has_runs"] = bool(has_runs)
        ident = {"runs": sql.Identifier(names["runs"]), "questions": sql.Identifier(names["questions"]),
                 "references": sql.Identifier(names["references"]),
                 "measurements": sql.Identifier(names["measurements"])}
        usable = ("((" + _ELIGIBLE + ") OR EXISTS (SELECT 1 FROM {references} f WHERE f.run_id = r.run_id"
                  " AND f.aspect = 'retrieval')) AND (%(before)s::text IS NULL OR r.run_id <> %(before)s::text)")
        variants = ("SELECT r.seq, r.provenance->'sweep_keys',"
                    " (SELECT array_agg(m.variant ORDER BY m.variant) FROM {measurements} m"
                    "  WHERE m.run_id = r.run_id AND m.aspect = 'retrieval'),"
                    " r.provenance->'configurations', r.provenance->'gate_policy',"
                    " r.provenance->'effective_gate_policy', r.run_id, r.provenance->'tolerances',"
                    " r.provenance->'effective_tolerances' FROM {runs} r WHERE " + usable)
        accepted = conn.execute(sql.SQL(
            "SELECT r.seq FROM {references} f JOIN {runs} r ON r.run_id = f.run_id WHERE f.aspect = 'retrieval'"
            " AND (%(before)s::text IS NULL OR f.run_id <> %(before)s::text) ORDER BY f.seq DESC LIMIT 1").format(
                **ident), {"before": before_run_id}).fetchone()
        rows = conn.execute(sql.SQL(variants + " AND (%(since)s::bigint IS NULL OR r.seq >= %(since)s::bigint)"
                                    " ORDER BY r.seq").format(**ident),
                            {"before": before_run_id, "since": accepted[0] if accepted else None}).fetchall()
    if not rows:
        return empty

    def named(row: tuple) -> list[str]:
        return [str(n) for n in [*(row[1] if isinstance(row[1], list) else []), *(row[2] or [])]]

    known = list(dict.fromkeys(n for row in rows for n in named(row)))
    configurations = rows[0][3] if isinstance(rows[0][3], dict) else {}
    configurations_of: dict[str, str] = {}  # each known name's configuration in its latest run
    for row in rows:
        configurations_of.update({str(k): str(v) for k, v in (row[3] if isinstance(row[3], dict) else {}).items()})
    # established by name, or by configuration (a rename with the same configuration is the same variant)
    return {"has_yardstick": True, "has_runs": True, "known": known, "configurations_of": configurations_of,
            "established": list(dict.fromkeys([*named(rows[0]), *map(str, configurations.values())])),
            **_pinned_gate(rows, accepted_seq=accepted[0] if accepted else None)}


def gate_in_force(connection_string: str, run_id: str, *, prefix: str = "eval",
                  answers_only: bool = False) -> tuple[bool, str]:
    """The retrieval gate now in force for the project, one line, as an acceptance's closing
    words (the command line prints it, the `accept_reference` job logs it): the accepted run's
    settings after a whole acceptance; after one that pinned no retrieval (``answers_only``: the
    answers alone), the gate as it was, since none of the run's settings were taken. (False, why)
    when the history could not be read: the acceptance of ``run_id`` is committed and stands."""
    try:
        gate = project_history(connection_string, prefix=prefix)
    except (DatabaseError, psycopg.Error) as exc:
        # a query's own error (a lock or statement timeout) by its type only: nothing it might quote
        reason = str(exc) if isinstance(exc, DatabaseError) else type(exc).__name__
        return False, f"run {run_id} is accepted as printed; reading the gate now in force failed: {reason}"
    policy = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in sorted((gate.get("policy") or {}).items()))
    tolerances = ", ".join(f"{m} {v:g}" for m, (v, _) in sorted((gate.get("tolerances") or {}).items()))
    which = ("the retrieval gate in force stays as it was (answers alone were accepted)" if answers_only else
             "the gate in force for the whole project from now on (the accepted run's settings, every variant)")
    return True, f"{which}: {policy or 'strict off'}; tolerances {tolerances or 'none recorded'}"

def _pinned_gate(rows: list[tuple], *, accepted_seq: int | None) -> dict[str, Any]:
    """The gate in force for the whole project, so a setting is never relaxed by the change it
    judges, not even for a variant new today: the accepted run stands for the settings it asked
    for (accepting it accepts them), every later yardstick run for those it was judged with.

    * ``policy``: ``strict`` and ``answer_strict``, on when any of those runs had them on;
    * ``tolerances``: metric -> (the smallest tolerance any of them gated it with, that run's id)."""
    policy: dict[str, bool] = {}
    tolerances: dict[str, tuple[float, str]] = {}
    for seq, _keys, _names, _configurations, asked, effective, run_id, asked_tol, effective_tol in rows:
        accepted = seq == accepted_seq  # rows are ordered by seq, from the accepted run on
        settings = asked if accepted else effective
        for key, value in (settings if isinstance(settings, dict) else {}).items():
            policy[key] = policy.get(key, False) or value is True
        gated = [asked_tol] if accepted else list((effective_tol or {}).values()) if isinstance(effective_tol, dict) \
            else []
        for each in gated:
            for metric, value in (each if isinstance(each, dict) else {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                        (metric not in tolerances or value < tolerances[metric][0]):
                    tolerances[metric] = (float(value), str(run_id))
    return {"policy": policy, "tolerances": tolerances}


class NoRecordedRun(ValueError):
    """The history has no run of that id: none ran, or its answers were recorded through the
    library (`answers.record_answers` writes no run row), which `answers.accept_run` accepts."""


def accept_reference(
    connection_string: str,
    run_id: str,
    *,
    variants: Iterable[str] | None = None,
    note: str = "",
    accepted_by: str | None = None,
    prefix: str = "eval",
) -> list[str]:
    """Accept a recorded run as the pinned reference of ``variants`` (default: all of its
    variants) on its benchmark, for example after a deliberate trade-off the gate failed.
    The run then also serves as the previous run. Refused, with a ValueError naming why
    (:func:`retrieval_to_accept`). Returns the variants accepted. Its answers too:
    `answers.accept_run`, which the command line and the job use.

    The acceptance is recorded with who accepted (``accepted_by``, else the ``USER`` of the
    environment) and when; the latest acceptance wins, whatever the order the runs ran in."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
    names = table_names(prefix)
    with connect(connection_string) as conn:
        chosen = retrieval_to_accept(conn, names, run_id, variants=variants)
        write_acceptance(conn, names, run_id, [(v, measurements.RETRIEVAL) for v in chosen], note=note,
                         accepted_by=accepted_by or who_accepts())
    return chosen


def retrieval_to_accept(conn: Any, names: Mapping[str, str], run_id: str, *, variants: Iterable[str] | None = None,
                        answered: Collection[str] = (), answers_only: bool = False) -> list[str]:
    """The retrieval variants of ``run_id`` an acceptance of ``variants`` (default: all of them)
    takes, or a ValueError naming why it is refused: an unknown run (:class:`NoRecordedRun`), a
    limited run (its means are over other questions), a variant the run does not have, or a
    variant with errored questions (its metrics are incomplete) or reranker fallbacks; and, unless
    ``variants`` names them, a run whose variants failed their gate against a comparable
    yardstick (:func:`failed_against_yardstick`: accepting the whole run must not accept a
    measured regression unnoticed). A variant named in ``answered`` (the run has answers of it)
    that the run did not rank is left to the answers' acceptance, not refused, and so is the whole of
    a run that ranked nothing but has answers. ``answers_only``: the acceptance checked is of the
    answers alone, and a refusal's command is of that kind. Writes nothing."""
    if not history_exists(conn, names):
        raise NoRecordedRun(f"no recorded run {run_id!r}: the history ({names['runs']}) is empty")
    run = conn.execute(sql.SQL("SELECT limited, provenance->'gate', provenance->'gate_failed' FROM {} "
                               "WHERE run_id = %s").format(sql.Identifier(names["runs"])), (run_id,)).fetchone()
    if run is None:
        raise NoRecordedRun(f"no recorded run {run_id!r} in {names['runs']}")
    limited, gate, gate_failed = run
    if limited:
        raise ValueError(f"run {run_id!r} is a limited run (a subset of the questions): it cannot be a reference")
    measured = {r[0]: r[1] for r in conn.execute(
        sql.SQL("SELECT variant, errored FROM {} WHERE run_id = %s AND aspect = %s ORDER BY variant")
        .format(sql.Identifier(names["measurements"])), (run_id, measurements.RETRIEVAL)).fetchall()}
    have = list(measured)
    chosen = sorted(set(variants)) if variants is not None else have
    absent = [v for v in chosen if v not in have and v not in answered]
    answers_alone = variants is None and not have and bool(answered)  # a whole run that measured answers only
    if absent or not (chosen or answers_alone):
        raise ValueError(f"run {run_id!r} has no variant(s) {absent or chosen}; it has: {', '.join(have)}"
                         + (f" (and answers of {', '.join(sorted(answered))})" if answered else ""))
    renamed = {v: e["maybe_renamed_from"] for v, e in (gate if isinstance(gate, Mapping) else {}).items()
               if isinstance(e, Mapping) and e.get("maybe_renamed_from")}
    if renamed:  # whole or by name: any acceptance of this run starts the project's window at it
        raise ValueError(
            f"run {run_id!r} did not measure {', '.join(sorted(renamed))}, which may be "
            f"{', '.join(sorted({str(n) for names in renamed.values() for n in names}))} renamed (vanished from "
            "the variants file in that run): accepting it would acknowledge that removal with nothing of its "
            "history judged; materialize every variant and accept a run that measured them")
    chosen = [v for v in chosen if v in have]  # the others named are answers alone (`answered`)
    if not chosen:
        return []
    if variants is None:  # a whole run: each variant whose gate says more than "not comparable" is named
        _refuse_unnamed(run_id, failed_against_yardstick(gate, have, gate_failed), (
            "failed the gate against a comparable yardstick (a measured regression, not a missing comparison), "
            "or failed it in a run recorded without saying which; accepting the whole run would accept it "
            "unnoticed. Name each variant to accept:"), answers_only=answers_only)
        _refuse_unnamed(run_id, unjudged_in(gate, have), (
            "could not be judged in that run (a comparison failed: the history could not be read, or a "
            "reference could not be ranked), so nothing says whether they regressed; run the job again to judge "
            "them, or name each variant to accept it unjudged:"), answers_only=answers_only)
    errored = [v for v in chosen if measured[v] > 0]
    if errored:
        raise ValueError(f"run {run_id!r} has errored questions for variant(s) {errored}: their metrics are "
                         "incomplete, so it cannot be a reference")
    fell_back = [r[0] for r in conn.execute(
        sql.SQL("SELECT DISTINCT variant FROM {} WHERE run_id = %s AND aspect = %s AND metric = 'n_rerank_fallback'"
                " AND value > 0 AND variant = ANY(%s) ORDER BY variant").format(sql.Identifier(names["metrics"])),
        (run_id, measurements.RETRIEVAL, chosen)).fetchall()]
    if fell_back:
        raise ValueError(f"run {run_id!r} has reranker fallbacks for variant(s) {fell_back}: their numbers are "
                         "the first-stage order's, not their configuration's, so it cannot be a reference")
    return chosen


def write_acceptance(conn: Any, names: Mapping[str, str], run_id: str, measured: Sequence[tuple[str, str]], *,
                     note: str, accepted_by: str) -> None:
    """Record the acceptance of ``run_id``'s (variant, aspect) measurements and commit it, with
    whatever the caller's transaction holds: all of them, or (a DatabaseError saying so, also
    when the server refuses the commit) none. A connection lost at the commit leaves its outcome
    unknown (the server may have committed before its reply was lost), and the error says so."""
    if not measured:
        return
    try:
        with conn.transaction():
            measurements.accept(conn, names, run_id, measured, note=note, accepted_by=accepted_by)
        conn.commit()
    except psycopg.Error as exc:
        if conn.broken:
            raise DatabaseError(
                f"accepting run {run_id!r}: the connection was lost at its commit ({type(exc).__name__}), so "
                "whether it was accepted is unknown: python -m eval_pipeline.history runs shows it") from None
        raise DatabaseError(f"accepting run {run_id!r} failed: {type(exc).__name__}; nothing of it was accepted"
                            ) from None


def failed_against_yardstick(gate: object, variants: Iterable[str], gate_failed: object = None) -> list[str]:
    """The ``variants`` whose recorded gate (a run's ``provenance["gate"]``) failed against a
    comparable yardstick (state ``comparable`` or ``paired``): a regression the verdict measured,
    which only an acceptance naming the variant may accept. A variant the run lists as failed
    (``provenance["gate_failed"]``: a list, or ``true`` in the oldest shape, naming none) with no
    recorded state of its own (a run recorded before the states were kept) counts too: nothing
    says its failure was not a measured regression."""
    states = gate if isinstance(gate, Mapping) else {}
    variants = list(variants)
    # the older shapes: a list of the failed variants, or `true` (some gate failed, not which: any may have)
    listed = set(variants) if gate_failed is True else set(gate_failed) if isinstance(gate_failed, list) else set()
    return sorted(v for v in variants
                  if (isinstance(states.get(v), Mapping)
                      and measurements.failed_measured(states[v].get("passed"), states[v].get("state")))
                  or (not isinstance(states.get(v), Mapping) and v in listed))


def accept_command(run_id: str, variants: Sequence[str], options: Sequence[str] = (), *,
                   answers_only: bool = False) -> str:
    """The exact command that accepts ``run_id`` for ``variants``, each argument quoted for a
    POSIX shell where it needs it (an index x variant pair's key holds ``|``: unquoted, a pasted
    command would pipe into another). Every message that tells a user to accept names it so.
    ``options`` go before ``accept``: the command line's own (``--prefix``, ``--url-env``...),
    when it repeats a command for the history it was given. ``answers_only``: the acceptance of
    their answer rows alone (``--answers-only``), what an answer gate offers."""
    return " ".join(["python -m eval_pipeline.history", *map(shlex.quote, options), "accept",
                     shlex.quote(run_id) if run_id else "RUN_ID", *(f"--variant {shlex.quote(v)}" for v in variants),
                     *(["--answers-only"] if answers_only else [])])


def launchpad_accept(run_id: str, variants: Sequence[str], *, answers_only: bool = False) -> str:
    """The `accept_reference` job's config (its op's, in the Launchpad or a `-c` file) that does what
    `accept_command` does: accept ``run_id`` for ``variants``. One YAML flow mapping, every value a
    double-quoted string (JSON's, which YAML reads alike; characters as they are, not escaped into
    surrogate pairs PyYAML would read as two): a key may hold `|` or `+`, and a run id recorded
    through the library `no`, `0123` or `r1 #2`, which plain YAML would read as another value."""
    def quoted(value: str) -> str:
        return json.dumps(value, ensure_ascii=False)

    return (f"{{run_id: {quoted(run_id)}, variants: [{', '.join(quoted(v) for v in variants)}]"
            + (", answers_only: true}" if answers_only else "}"))


def how_to_accept(run_id: str, variant: str, *, answers_only: bool = False, leaves: Sequence[str] = (),
                  removes: Sequence[str] = (), takes: Sequence[str] = ()) -> str:
    """What a failed gate's check says about accepting ``run_id`` for ``variant``: the
    `accept_reference` job's config and the command; an answer gate's (``answers_only``) accepts
    the variant's answer rows alone, so its retrieval reference stays where it is. The report
    asset records the run (unless its record_history is off); only then can it be accepted.
    ``leaves``: the failed answer graders the acceptance does not take (`answers_left`);
    ``removes``: the graders missing from the run whose removal it acknowledges (`removals_said`);
    ``takes``: the failed answer graders a whole acceptance takes with the retrieval."""
    which = "its answers alone are intended (its retrieval reference stays)" if answers_only else \
        "its numbers are intended"
    return (f"once {which} and the report has recorded this run, launch accept_reference with "
            f"{launchpad_accept(run_id, [variant], answers_only=answers_only)}; or: "
            f"{accept_command(run_id, [variant], answers_only=answers_only)}"
            + (f"; it also accepts answers whose gate failed: {', '.join(takes)}" if takes else "")
            + (f"; {answers_left(leaves)}" if leaves else "") + (f"; {removals_said(removes)}" if removes else ""))


def answers_left(leaves: Sequence[str]) -> str:
    """What an offered acceptance says of the failed answer graders it does not take (``leaves``,
    each "variant grader: why", `RunVerdict.answers_not_taken`), before it is run: the command's
    own output would otherwise be the first to say "answers not accepted"."""
    return ("it takes the retrieval but not these answers, which no acceptance takes (run the job again to "
            f"judge them): {'; '.join(leaves)}")


def removals_said(removes: Sequence[str]) -> str:
    """What an offered acceptance says of the graders missing from the run (``removes``,
    `RunVerdict.removals_acknowledged`): accepting the run acknowledges their removal, so the
    next run without them passes; said before it is run."""
    return f"it also acknowledges the removal of these graders, missing from this run: {'; '.join(removes)}"


class NameTheRun(ValueError):
    """An acceptance refused until it names ``run_id`` by its id and ``variants`` by name (a
    measured regression is accepted only so): ``reason``, then the command that does (`told`),
    then ``tail``. A caller with other words for it reads the fields: the command line repeats its
    own options in the command, the `accept_reference` job gives its Launchpad's config."""

    def __init__(self, reason: str, run_id: str, variants: Sequence[str], *, tail: str = "",
                 answers_only: bool = False):
        self.reason, self.run_id, self.variants, self.tail = reason, run_id, list(variants), tail
        self.answers_only = answers_only  # the refused acceptance's kind: its command is of that kind
        super().__init__(self.told())

    def told(self, options: Sequence[str] = (), *, answers_only: bool | None = None) -> str:
        """The refusal with its command, given ``options`` and ``answers_only`` (`accept_command`'s;
        by default the refused acceptance's own kind: the whole command would pin retrieval too)."""
        only = self.answers_only if answers_only is None else answers_only
        command = accept_command(self.run_id, self.variants, options, answers_only=only)
        return f"{self.reason} {command}{self.tail}"


def _refuse_unnamed(run_id: str, variants: Sequence[str], why: str, *, answers_only: bool) -> None:
    """`NameTheRun` for ``variants`` of ``run_id``, ``why`` a whole acceptance may not take them,
    and the command that accepts them by name, of the refused acceptance's kind; nothing when
    there are none."""
    if variants:
        raise NameTheRun(f"run {run_id!r}: {', '.join(variants)} {why}", run_id, variants, tail=" (and any others)",
                         answers_only=answers_only)


def unjudged_in(gate: object, variants: Iterable[str]) -> list[str]:
    """The ``variants`` whose recorded gate (a run's ``provenance["gate"]``) was not compared
    because a comparison failed (``unjudged``: the history could not be read, a reference's
    ranking raised), not because none could be made: nothing measured whether they regressed,
    and a run again would, so only an acceptance naming the variant may take them unjudged."""
    states = gate if isinstance(gate, Mapping) else {}
    return sorted(v for v in variants if isinstance(states.get(v), Mapping) and states[v].get("unjudged") is True)


def who_accepts() -> str:
    """Who is accepting: the environment's user name (USER, LOGNAME), else 'unknown'."""
    return os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"


LATEST = "latest"


def resolve_run_id(connection_string: str, run_id: str, *, prefix: str = "eval",
                   naming: Sequence[str] | None = None) -> str:
    """`run_id` as given, or for ``latest`` the newest recorded run (the first line of
    ``python -m eval_pipeline.history runs``): what the CLI's `accept` and the `accept_reference`
    job accept. A ValueError when the history holds no run.

    ``latest`` with variants ``naming`` is `NameTheRun`, naming the newest run: naming a variant
    is how a measured regression is accepted, and a command kept in a shell's history or a config
    the Launchpad reopens with would accept whatever run is newest by then, a regression nobody
    has looked at included. So a regression is accepted only with its run named by its id."""
    if run_id.strip().lower() != LATEST:
        return run_id
    newest = recent_runs(connection_string, limit=1, prefix=prefix)
    if not newest:
        raise ValueError(f"no recorded run to accept as '{LATEST}': the history is empty")
    found = newest[0]["run_id"]
    if naming:
        raise NameTheRun(f"'{LATEST}' is not accepted with variants named ({', '.join(naming)}): a variant is named "
                         f"to accept a measured regression, and that needs its run named by its id, which a kept "
                         f"command or config keeps (with '{LATEST}' it would accept whatever run is newest then); "
                         f"the newest recorded run is {found}:", found, naming)
    return found


def read_run(connection_string: str, run_id: str, *, prefix: str = "eval") -> dict[str, Any] | None:
    """Everything recorded for ``run_id``, or None: ``{"run_id", "created_at", "limited",
    "eligible", "provenance", "metrics": DataFrame(variant, metric, value, ci_low, ci_high),
    "questions": DataFrame(variant, qid, answerable, errored, hit@10, mrr, ndcg@10,
    miss_class, doc_ids)}`` (rows sorted; NULL values and bounds as NaN)."""
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return None
        run = conn.execute(
            sql.SQL("SELECT r.run_id, r.created_at, r.limited, " + _ELIGIBLE + ", r.provenance FROM {runs} r "
                    "WHERE r.run_id = %s").format(runs=sql.Identifier(names["runs"]),
                                                  questions=sql.Identifier(names["questions"])),
            (run_id,),
        ).fetchone()
        if run is None:
            return None
        metric_rows = conn.execute(
            sql.SQL(
                "SELECT variant, metric, value, ci_low, ci_high FROM {} WHERE run_id = %s AND aspect = %s"
                " ORDER BY variant, metric"
            ).format(sql.Identifier(names["metrics"])),
            (run_id, measurements.RETRIEVAL),
        ).fetchall()
        qcols = ["variant", "qid", "answerable", "errored", *QUESTION_METRICS, "miss_class", "doc_ids"]
        question_rows = conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE run_id = %s ORDER BY variant, qid").format(
                sql.SQL(", ").join(map(sql.Identifier, qcols)), sql.Identifier(names["questions"])
            ),
            (run_id,),
        ).fetchall()
    metrics_df = pd.DataFrame(metric_rows, columns=["variant", "metric", "value", "ci_low", "ci_high"])
    for col in ("value", "ci_low", "ci_high"):
        metrics_df[col] = metrics_df[col].astype("float64")
    questions_df = pd.DataFrame(question_rows, columns=qcols)
    for m in QUESTION_METRICS:
        questions_df[m] = questions_df[m].astype("float64")
    return {
        "run_id": run[0],
        "created_at": run[1],
        "limited": run[2],
        "eligible": bool(run[3]),
        "provenance": run[4],
        "metrics": metrics_df,
        "questions": questions_df,
    }


def recent_runs(connection_string: str, *, limit: int = 20, prefix: str = "eval") -> list[dict[str, Any]]:
    """The latest runs, newest first: run id, time, limited, eligible, failed gates and the
    variants accepted from it (for `python -m eval_pipeline.history runs`): a variant whose answers
    alone were accepted (`--answers-only`: its retrieval reference is another run) is marked so."""
    names = table_names(prefix)
    with measurements.connection(connection_string) as conn:
        if not history_exists(conn, names):
            return []
        rows = conn.execute(
            sql.SQL("SELECT r.run_id, r.created_at, r.limited, " + _ELIGIBLE + ", r.provenance->'gate_failed', "
                    "(SELECT array_agg(DISTINCT f.variant || CASE WHEN f.variant IN (SELECT g.variant"
                    " FROM {references} g WHERE g.run_id = r.run_id AND g.aspect = 'retrieval') THEN ''"
                    " ELSE ' (answers only)' END) FROM {references} f WHERE f.run_id = r.run_id) "
                    "FROM {runs} r ORDER BY r.seq DESC LIMIT %s").format(
                runs=sql.Identifier(names["runs"]), questions=sql.Identifier(names["questions"]),
                references=sql.Identifier(names["references"])), (limit,)).fetchall()
    return [{"run_id": r[0], "created_at": r[1], "limited": r[2], "eligible": bool(r[3]), "gate_failed": r[4] or [],
             "accepted": sorted(r[5] or [])} for r in rows]


# --------------------------------------------------------------------------
# comparability
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Whether a run can be judged against the previous one, and why.

    ``state`` is one of ``first_run``, ``comparable``, ``mismatch``, ``unknown`` (see the
    module docstring); ``treatment_changes`` lists what changed that is the subject of the
    evaluation; ``reasons`` is human-readable text for reports and check metadata."""

    state: str
    treatment_changes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    previous_run_id: str | None = None

    @property
    def comparable(self) -> bool:
        return self.state == "comparable"


def setting_changes(before: Any, after: Any, path: str = "") -> list[str]:
    """What changed between two recorded settings, one line per setting that differs
    (`depth: 5 -> 3`, `reranker.kind: 'none' -> 'mmr'`, `legs: added`), instead of the two
    whole mappings: what a reader of a treatment change needs."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in before:
                out.append(f"{where}: added {after[key]!r}")
            elif key not in after:
                out.append(f"{where}: removed (was {before[key]!r})")
            elif _canonical(before[key]) != _canonical(after[key]):
                out += setting_changes(before[key], after[key], where)
        return out
    return [f"{path}: {before!r} -> {after!r}" if path else f"{before!r} -> {after!r}"]


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _valid_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def compare_provenance(current: Mapping[str, Any], previous: Mapping[str, Any] | None, variant: str) -> Comparison:
    """Decide whether ``variant`` in the current run can be judged against ``previous``.

    ``previous`` is :func:`previous_run`'s result (its ``provenance`` is used) or a bare
    provenance mapping, or None (→ ``first_run``). The decision, in order:

    1. a comparability field (corpus signature, labels fingerprint, scoring protocol) that
       is valid on both sides and differs → ``mismatch`` (a known difference is decisive,
       even if another field is missing);
    2. a comparability field missing or not a non-empty string on either side → ``unknown``;
    3. otherwise ``comparable``.

    Changes of embedder, embedder revision, chunking, the variant's own config
    (``provenance["variants"][variant]``) or the question wording (a changed question-set
    fingerprint with unchanged labels) are listed in ``treatment_changes`` in every state.
    A changed code version is noted in ``reasons`` only.
    """
    if not isinstance(variant, str) or not variant:
        raise ValueError(f"variant must be a non-empty string, got {variant!r}")
    if not isinstance(current, Mapping):
        return Comparison("unknown", [], [f"current provenance is not a mapping: {current!r}"])
    if previous is None:
        return Comparison("first_run", [], [f"no earlier eligible run has variant {variant!r}: this is its first run"])
    if not isinstance(previous, Mapping):
        return Comparison("unknown", [], [f"previous run is not a mapping: {previous!r}"])
    previous_run_id = previous.get("run_id") if isinstance(previous.get("run_id"), str) else None
    # found by its configuration under another name: that name's record is its history
    previous_name = previous.get("variant") if "provenance" in previous and isinstance(previous.get("variant"), str) \
        else variant
    prev = previous.get("provenance") if "provenance" in previous else previous
    if not isinstance(prev, Mapping):
        return Comparison("unknown", [], [f"previous run's provenance is not a mapping: {prev!r}"], previous_run_id)

    mismatches: list[str] = []
    invalid: list[str] = []
    for key in COMPARABILITY_FIELDS:
        cur_value, prev_value = current.get(key), prev.get(key)
        bad = [side for side, v in (("current", cur_value), ("previous", prev_value)) if not _valid_text(v)]
        if bad:
            invalid.append(f"{key} is missing or invalid in the {' and '.join(bad)} run")
        elif cur_value != prev_value:
            mismatches.append(f"{key} changed: {prev_value!r} -> {cur_value!r}")

    treatment: list[str] = []
    cur_variants, prev_variants = current.get("variants"), prev.get("variants")
    cur_cfg = cur_variants if isinstance(cur_variants, Mapping) else {}
    prev_cfg = prev_variants if isinstance(prev_variants, Mapping) else {}
    # An (index, variant) pair records its own index in its config: that, not the run-level
    # fields (another pair's index), is its embedder and chunking.
    own_index = isinstance(cur_cfg.get(variant), Mapping) and "index" in cur_cfg[variant]
    for key in RUN_TREATMENT_FIELDS + (() if own_index else TREATMENT_FIELDS):
        if _canonical(current.get(key)) != _canonical(prev.get(key)):
            treatment.append(f"{key}: {prev.get(key)!r} -> {current.get(key)!r}")
    if previous_name != variant:
        treatment.append(f"name: {previous_name!r} -> {variant!r} (the same configuration: its history is kept)")
    if _canonical(cur_cfg.get(variant)) != _canonical(prev_cfg.get(previous_name)):
        treatment += [f"variant {variant!r} config {change}"
                      for change in setting_changes(prev_cfg.get(previous_name), cur_cfg.get(variant))]

    # The question texts are in the benchmark's identity (a rewording is another benchmark);
    # what the fingerprint of the set holds beyond them (form, hard class, gist) does not
    # change a metric, and is named so a breakdown that moved is explained.
    qs_cur, qs_prev = current.get("question_set_fingerprint"), prev.get("question_set_fingerprint")
    same_benchmark = current.get("benchmark_fingerprint") == prev.get("benchmark_fingerprint")
    if same_benchmark and _valid_text(qs_cur) and _valid_text(qs_prev) and qs_cur != qs_prev:
        treatment.append(f"question metadata (question_set_fingerprint {qs_prev!r} -> {qs_cur!r})")
    notes: list[str] = []
    if current.get("code_version") != prev.get("code_version"):
        notes.append(f"code_version: {prev.get('code_version')!r} -> {current.get('code_version')!r}")
    treatment_notes = [f"treatment changed: {t}" for t in treatment]

    if mismatches:
        return Comparison(
            "mismatch", treatment,
            [*mismatches, "runs measure different things: metrics recorded, no verdict", *invalid, *treatment_notes,
             *notes],
            previous_run_id,
        )
    if invalid:
        return Comparison("unknown", treatment, [*invalid, *treatment_notes, *notes], previous_run_id)
    reasons = ["same corpus, questions, labels and scoring protocol", *treatment_notes, *notes]
    return Comparison("comparable", treatment, reasons, previous_run_id)
