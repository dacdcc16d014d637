"""Answer-quality history in Postgres, and the answer gate: did the answers get worse?

Answer runs are recorded and judged the way retrieval runs are: one measurement per (run,
variant, grader), aspect ``answers:<grader>``, in the same table as the retrieval measurements
(:mod:`eval_pipeline.history.measurements`: one schema, one lookup, one eligibility rule, one
acceptance record). This module speaks in answer rows: a row is read and written with
``set_id`` (the measurement's benchmark id), ``set_fingerprint`` (its benchmark),
``yardstick`` (its instrument), ``generator``, ``limited``, ``errored``, ``eligible``,
``n_scored``, ``pass_rate`` and ``mean_score`` with their confidence bounds (its metrics),
``variant_config`` and ``provenance``.

Only numbers and identities are stored: no answer text, ever (:func:`record_answer_run`
refuses any key it does not know, so a stray ``answers`` column cannot slip in).

The key. Two rows measure the same thing only when they share the **key**: set id, set
fingerprint, corpus signature, generator, yardstick, variant and grader. Nothing else is
ever compared: another prompt set, an edited set, another corpus, another generating model
or another grading model/profile is a different measurement, never a yardstick.

Comparable (:func:`answer_comparable`): the generator is known (``run_generator`` found a
single one), the yardstick names a single grader under one version, the run is not limited,
and the set id, set fingerprint and corpus signature are known. Yardsticks:

* an offline registered grader's ``<grader>:v<version>…`` (``deterministic:v1+…``,
  ``static:v2+…``, ``grounding:v1+…``, a plugin's ``toy_length:v1+60``): comparable;
* a token-spending grader's ``<grader>:<provider>:<model>:v<version>…`` (``judge``,
  ``decision``: the rules of :func:`eval_pipeline.grading.judges.comparable_yardstick`):
  comparable;
* a bare name (no single grader), ``<grader>:failed``, a yardstick of another grader than the
  row's, an unregistered grader's, or anything else: never.

Eligible: a row may be a later run's yardstick only when it is comparable, no answer
errored, it scored at least one answer with finite pass rate and mean score, and (the
caller's part) its gates passed. The caller computes ``eligible``; :func:`record_answer_run`
refuses ``eligible=True`` on a row that breaks any of the rules above (the table's CHECK
constraint refuses the worst of them too).

Which rows are the yardsticks: :func:`previous_answer_run` is the latest eligible row with
the same key, :func:`reference_answer_run` the latest accepted row, else the first eligible
one (a pinned reference: a regression in small steps, each within the tolerance, fails
against it), both through :func:`eval_pipeline.history.measurements.find`, the retrieval
history's lookup. Both exclude the current run (and, when it is recorded, everything
recorded after it). A fresh database (no history) has no yardstick, never an error.

The gate that reads these rows, its states (a measurement with history is never passed for
lack of a comparison) and its tolerances: :mod:`eval_pipeline.gates.answers`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from eval_pipeline.common.checks import as_flag, is_integer, is_real, is_text, unit_value
from eval_pipeline.common.metadata import RunLink
from eval_pipeline.grading.judges import GRADERS, comparable_yardstick
from eval_pipeline.grading.registry import GRADER_KINDS
from eval_pipeline.history import measurements
from eval_pipeline.history.measurements import ANSWER_METRICS, answers_aspect
from eval_pipeline.history.runs import (
    NoRecordedRun,
    accept_command,
    create_tables,
    history_exists,
    retrieval_to_accept,
    table_names,
    who_accepts,
    write_acceptance,
)
from eval_pipeline.store.database import call_redacted, connect

__all__ = [
    "ANSWER_METRICS",
    "ROW_FIELDS",
    "RunAcceptance",
    "accept_run",
    "answer_comparable",
    "previous_answer_run",
    "read_answer_runs",
    "record_answer_run",
    "reference_answer_run",
]


# What makes two rows the same measurement: the benchmark (set, its fingerprint over every
# prompt and assertion, the corpus), the instrument (grader and its yardstick) and the variant.
# The generator is not in it: another generating model or prompt is the treatment a team tunes,
# judged against the same measurement and named in the report.
KEY_FIELDS = ("variant", "grader", "set_id", "set_fingerprint", "corpus_signature", "yardstick")
# The keys record_answer_run accepts in a row (required ones first).
REQUIRED_FIELDS = ("variant", "grader", "set_id", "set_fingerprint", "corpus_signature", "generator", "yardstick",
                   "limited", "errored", "eligible", "n_scored", "pass_rate", "mean_score")
OPTIONAL_FIELDS = ("run_id", "pass_rate_ci_low", "pass_rate_ci_high", "mean_ci_low", "mean_ci_high",
                   "variant_config", "provenance")
ROW_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS
_CI_FIELDS = ("pass_rate_ci_low", "pass_rate_ci_high", "mean_ci_low", "mean_ci_high")
_STORED = ("run_id", "variant", "grader", "set_id", "set_fingerprint", "corpus_signature", "generator", "yardstick",
           "limited", "errored", "eligible", "n_scored", "pass_rate", "mean_score", *_CI_FIELDS,
           "variant_config", "provenance")
_READ = ("run_id", "variant", "grader", "seq", "created_at", *_STORED[3:], "accepted", "accepted_at",
         "accepted_position")
_FLOATS = ("pass_rate", "mean_score", *_CI_FIELDS)

# An offline grader's yardstick: `<name>:v<version>…` (the version and whatever else it holds, no
# colon after it); a grader that calls a model: `<name>:<provider>:<model>:v<version>…`.
_OFFLINE = r"(?P<grader>[^:\s]+):v[^:\s]+"
_MODEL_GRADED = r"(?P<grader>[^:\s]+):(?P<who>.+):v(?P<version>[^:\s]+)"


# --------------------------------------------------------------------------
# comparability
# --------------------------------------------------------------------------


def _yardstick_problem(yardstick: object, grader: object) -> str | None:
    """Why ``yardstick`` cannot be compared for ``grader``, or None when it can. The grader
    must be registered (`eval_pipeline.grading.registry.GRADER_KINDS`, a plugin's too): an
    offline one's yardstick is ``<grader>:v<version>…``; one that spends tokens needs the
    ``<grader>:<provider>:<model>:v<version>…`` form naming a single grading model (not
    ``failed``, not a bare name)."""
    if not is_text(yardstick):
        return f"the yardstick is missing or invalid ({yardstick!r})"
    owner = yardstick.partition(":")[0]
    if isinstance(grader, str) and owner != grader and owner in GRADER_KINDS:
        return f"the yardstick {yardstick!r} does not belong to grader {grader!r}"
    kind = GRADER_KINDS.get(grader)
    if kind is None:
        return f"the yardstick {yardstick!r} is of grader {grader!r}, which is not registered: it is never compared"
    if not kind.spends_tokens:
        match = re.fullmatch(_OFFLINE, yardstick)
    else:
        match = re.fullmatch(_MODEL_GRADED, yardstick)
        if match is not None:
            provider, _, model = match["who"].partition(":")
            if not provider or not model or match["who"] == "failed":
                match = None
    if match is None:
        return (f"the yardstick {yardstick!r} names no single grader under one version (a grading model "
                "failed, changed between calls or is unknown): it is never compared")
    if match["grader"] != grader:
        return f"the yardstick {yardstick!r} does not belong to grader {grader!r}"
    # answer_judges' rules for the built-in model graders (a provider and a model)
    if kind.spends_tokens and grader in ("judge", "decision") and \
            not comparable_yardstick(f"decision:{match['who']}:v{match['version']}"):
        return f"the yardstick {yardstick!r} names no single grading model: it is never compared"
    return None


def answer_comparable(row: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ``row`` (a recorded row, or one about to be) can be compared with another
    run's, and why not: its run is limited (``limited`` must be a False bool, not merely falsy), its
    generator is unknown (None, empty: the answers named none or more than one), its
    yardstick names no single grader (see the module docstring), or its set id, set
    fingerprint or corpus signature is unknown (then no key can match exactly)."""
    if not isinstance(row, Mapping):
        return False, f"the row is not a mapping: {row!r}"
    limited = as_flag(row.get("limited"))
    if limited is not False:
        return False, ("the run is limited (a subset of the prompts or variants): its means are over other prompts"
                       if limited else f"the row's limited flag is missing or invalid ({row.get('limited')!r})")
    if not is_text(row.get("generator")):
        return False, ("the generator is unknown: an answer named no model, or the answers came from more than "
                       "one generator")
    problem = _yardstick_problem(row.get("yardstick"), row.get("grader"))
    if problem is not None:
        return False, problem
    missing = [key for key in ("set_id", "set_fingerprint", "corpus_signature") if not is_text(row.get(key))]
    if missing:
        return False, f"{', '.join(missing)} unknown: the row cannot be matched with another run's"
    return True, f"generator {row['generator']!r}, yardstick {row['yardstick']!r}"


def yardstick_problems(row: Mapping[str, Any]) -> list[str]:
    """Why a validated row may not be a later run's yardstick (empty: it may, once its gate
    passed): not comparable, errored answers, nothing scored, a missing metric."""
    reasons = []
    ok, why = answer_comparable(row)
    if not ok:
        reasons.append(why)
    if row["errored"] > 0:
        reasons.append(f"{row['errored']} answer(s) could not be generated (or graded): the metrics are incomplete")
    if row["n_scored"] == 0:
        reasons.append("no answer was scored")
    nan = [m for m in ANSWER_METRICS if row[m] is None]
    if nan:
        reasons.append(f"{', '.join(nan)} is missing or NaN")
    return reasons


# --------------------------------------------------------------------------
# the rows, as measurements
# --------------------------------------------------------------------------


def _rows(names: Mapping[str, str]) -> sql.Composed:
    """The answer measurements in the shape of an answer row (:data:`_READ`): a derived table
    every reading query selects from, so each row reads the way :func:`record_answer_run`
    took it."""
    return sql.SQL(
        "(SELECT m.run_id, m.variant, substr(m.aspect, {skip}) AS grader, m.seq, m.created_at,"
        " m.benchmark_id AS set_id, m.benchmark AS set_fingerprint, m.corpus_signature, m.generator,"
        " m.instrument AS yardstick, m.limited, m.errored, m.eligible, m.n_scored, p.value AS pass_rate,"
        " s.value AS mean_score, p.ci_low AS pass_rate_ci_low, p.ci_high AS pass_rate_ci_high,"
        " s.ci_low AS mean_ci_low, s.ci_high AS mean_ci_high, m.variant_config, m.provenance,"
        " " + measurements.ACCEPTED_AT + " IS NOT NULL AS accepted, " + measurements.ACCEPTED_AT + " AS accepted_at,"
        " " + measurements.ACCEPTED_POSITION + " AS accepted_position,"
        " m.configuration"
        " FROM {measurements} m"
        " LEFT JOIN {metrics} p ON (p.run_id, p.variant, p.aspect, p.metric)"
        "  = (m.run_id, m.variant, m.aspect, 'pass_rate')"
        " LEFT JOIN {metrics} s ON (s.run_id, s.variant, s.aspect, s.metric)"
        "  = (m.run_id, m.variant, m.aspect, 'mean_score')"
        " WHERE m.aspect LIKE 'answers:%%') m").format(
            skip=sql.Literal(len(answers_aspect("")) + 1), measurements=sql.Identifier(names["measurements"]),
            metrics=sql.Identifier(names["metrics"]), references=sql.Identifier(names["references"]))


# --------------------------------------------------------------------------
# recording
# --------------------------------------------------------------------------


def _json_mapping(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping or None, got {type(value).__name__}")
    try:
        json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serializable (no NaN/inf): {exc}") from None
    return dict(value)


def _check_row(run_id: str, raw: object, index: int) -> dict[str, Any]:
    where = f"rows[{index}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(raw).__name__}")
    unknown = sorted(map(str, set(raw) - set(ROW_FIELDS)))
    if unknown:
        raise ValueError(f"{where} has unknown key(s) {unknown} (no answer text is stored); "
                         f"valid keys: {', '.join(ROW_FIELDS)}")
    missing = [key for key in REQUIRED_FIELDS if key not in raw]
    if missing:
        raise ValueError(f"{where} is missing key(s) {missing}")
    if "run_id" in raw and raw["run_id"] != run_id:
        raise ValueError(f"{where} has run_id {raw['run_id']!r}, but the run being recorded is {run_id!r}")
    where = f"{where} ({raw.get('variant')!r}, {raw.get('grader')!r})"
    for key in ("variant", "set_id", "set_fingerprint", "yardstick"):
        if not is_text(raw[key]):
            raise ValueError(f"{where}: {key} must be a non-empty string, got {raw[key]!r}")
    if raw["grader"] not in GRADERS:
        raise ValueError(f"{where}: grader must be one of {', '.join(GRADERS)}, got {raw['grader']!r}")
    for key in ("corpus_signature", "generator"):
        if raw[key] is not None and not isinstance(raw[key], str):
            raise ValueError(f"{where}: {key} must be a string or None (unknown), got {raw[key]!r}")
    for key in ("limited", "eligible"):
        if as_flag(raw[key]) is None:
            raise ValueError(f"{where}: {key} must be True or False, got {raw[key]!r}")
    for key in ("errored", "n_scored"):
        if not is_integer(raw[key]) or raw[key] < 0:
            raise ValueError(f"{where}: {key} must be an integer >= 0, got {raw[key]!r}")
    row: dict[str, Any] = {
        "run_id": run_id,
        "variant": raw["variant"],
        "grader": raw["grader"],
        "set_id": raw["set_id"],
        "set_fingerprint": raw["set_fingerprint"],
        # a blank identity is an unknown one: stored as NULL, never matched as a key
        "corpus_signature": raw["corpus_signature"] if is_text(raw["corpus_signature"]) else None,
        "generator": raw["generator"] if is_text(raw["generator"]) else None,
        "yardstick": raw["yardstick"],
        "limited": as_flag(raw["limited"]),
        "errored": int(raw["errored"]),
        "eligible": as_flag(raw["eligible"]),
        "n_scored": int(raw["n_scored"]),
        "variant_config": _json_mapping(raw.get("variant_config"), f"{where}: variant_config"),
        "provenance": _json_mapping(raw.get("provenance"), f"{where}: provenance"),
    }
    for key in _FLOATS:
        row[key] = unit_value(raw.get(key), f"{where}: {key}")
    for low, high in (("pass_rate_ci_low", "pass_rate_ci_high"), ("mean_ci_low", "mean_ci_high")):
        if row[low] is not None and row[high] is not None and row[low] > row[high]:
            raise ValueError(f"{where}: {low} {row[low]!r} is above {high} {row[high]!r}")
    if row["eligible"]:
        reasons = yardstick_problems(row)
        if reasons:
            raise ValueError(f"{where} claims eligible=True but cannot be a later run's yardstick: "
                             + "; ".join(reasons))
    return row


def record_answer_run(connection_string: str, run_id: str, rows: Sequence[Mapping[str, Any]], *,
                      prefix: str = "eval") -> None:
    """Record one answer run's rows, one per (variant, grader), all or nothing, in one
    transaction; the table is created on first write.

    Each row holds the keys of :data:`ROW_FIELDS`: required ``variant``, ``grader`` (one of
    ``answer_judges.GRADERS``), ``set_id``, ``set_fingerprint`` (non-empty strings),
    ``corpus_signature``, ``generator`` (strings, or None when unknown; blank is unknown too),
    ``yardstick`` (non-empty string), ``limited``, ``eligible`` (bools), ``errored``,
    ``n_scored`` (integers >= 0), ``pass_rate``, ``mean_score`` (in [0, 1], or NaN/None:
    stored as NULL); optional ``pass_rate_ci_low``, ``pass_rate_ci_high``, ``mean_ci_low``,
    ``mean_ci_high`` (same rules), ``variant_config``, ``provenance`` (JSON mappings; no
    answer text) and ``run_id`` (must equal ``run_id``). Any other key is refused.

    ``eligible`` is the caller's verdict, but a row claiming ``eligible=True`` that is
    limited, has errored answers, an unknown generator, an uncomparable yardstick, an
    unknown set id, set fingerprint or corpus signature, no scored answer or a NaN metric is
    refused (ValueError) before the database is touched.

    Re-recording ``run_id`` replaces its rows: a (variant, grader) recorded again is updated
    in place (keeping its ``seq`` and ``created_at``, its position in the history), one no
    longer present is deleted."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ValueError(f"rows must be a list of row mappings, got {type(rows).__name__}")
    if not rows:
        raise ValueError(f"run {run_id!r} has no rows to record")
    checked = [_check_row(run_id, raw, i) for i, raw in enumerate(rows)]
    pairs = [(r["variant"], r["grader"]) for r in checked]
    duplicated = sorted({p for p in pairs if pairs.count(p) > 1})
    if duplicated:
        raise ValueError(f"run {run_id!r} has more than one row for (variant, grader) {duplicated}")
    names = table_names(prefix)
    rows = [{**{k: r[k] for k in measurements.COLUMNS if k in r}, "aspect": answers_aspect(r["grader"]),
             "benchmark_id": r["set_id"], "benchmark": r["set_fingerprint"], "instrument": r["yardstick"],
             "configuration": r["provenance"].get("configuration")
             if isinstance(r["provenance"].get("configuration"), str) else None} for r in checked]
    values = {(r["variant"], answers_aspect(r["grader"])): [
        ("pass_rate", r["pass_rate"], r["pass_rate_ci_low"], r["pass_rate_ci_high"]),
        ("mean_score", r["mean_score"], r["mean_ci_low"], r["mean_ci_high"])] for r in checked}

    def write() -> None:
        with connect(connection_string) as conn, conn.transaction(), conn.cursor() as cur:
            create_tables(cur, names)
            measurements.write(cur, names, run_id, measurements.ANSWER_ASPECTS, rows, values)

    call_redacted(connection_string, f"recording answer run {run_id!r}", write)


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------


def _as_dict(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_READ, values))
    for key in _FLOATS:
        row[key] = math.nan if row[key] is None else float(row[key])
    return row


def _read_row(conn: Any, names: Mapping[str, str], found: measurements.Yardstick | None,
              grader: str) -> dict[str, Any] | None:
    """The answer row of the measurement ``found`` for ``grader`` (with its
    ``acceptance_conflict``, when the lookup found one), or None."""
    if found is None:
        return None
    row = conn.execute(sql.SQL("SELECT {cols} FROM {rows} WHERE run_id = %s AND variant = %s AND grader = %s").format(
        cols=sql.SQL(", ").join(map(sql.Identifier, _READ)), rows=_rows(names)),
        (found.run_id, found.variant, grader)).fetchone()
    return None if row is None else {**_as_dict(row), **found.conflict_mark()}


def _check_key(key: Mapping[str, Any], before_run_id: object) -> None:
    for name, value in key.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string or None, got {value!r}")
    if before_run_id is not None and not isinstance(before_run_id, str):
        raise ValueError(f"before_run_id must be a string or None, got {before_run_id!r}")


def _lookup(connection_string: str, key: Mapping[str, Any], before_run_id: str | None, prefix: str,
            order: measurements.Order, configuration: str | None = None) -> dict[str, Any] | None:
    """The yardstick in ``order`` of the measurement ``key`` names
    (:func:`eval_pipeline.history.measurements.find`: the one lookup of both aspects)."""
    _check_key(key, before_run_id)
    # An incomplete key, or one whose yardstick is not comparable, matches nothing: such a run
    # has no yardstick, whatever the history holds.
    if not all(is_text(v) for v in key.values()) or _yardstick_problem(key["yardstick"], key["grader"]) is not None:
        return None
    names = table_names(prefix)
    identity = {"corpus_signature": key["corpus_signature"], "benchmark_id": key["set_id"],
                "benchmark": key["set_fingerprint"], "instrument": key["yardstick"]}

    def find() -> dict[str, Any] | None:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return None
            found = measurements.find(conn, names, aspect=answers_aspect(key["grader"]), variant=key["variant"],
                                      order=order, identity=identity, configuration=configuration,
                                      before_run_id=before_run_id)
            return _read_row(conn, names, found, key["grader"])

    return call_redacted(connection_string, "looking up the answer history", find)


def previous_answer_run(connection_string: str, *, variant: str, grader: str, set_id: str, set_fingerprint: str,
                        corpus_signature: str | None, yardstick: str, generator: str | None = None,
                        configuration: str | None = None,
                        before_run_id: str | None = None, prefix: str = "eval") -> dict[str, Any] | None:
    """The latest eligible (or accepted: `accept_answer_run`) row with exactly this key (set id,
    set fingerprint, corpus signature, yardstick, variant, grader), or None. ``generator`` is
    the current run's (its treatment, not part of the key): accepted and ignored.

    ``before_run_id`` (the current run) is never returned; when it is already recorded, only
    rows recorded before it count. None when the key is incomplete (a None or blank field),
    its yardstick is not comparable, or there is no history yet. Returns the row as
    :func:`read_answer_runs` does."""
    key = {"variant": variant, "grader": grader, "set_id": set_id, "set_fingerprint": set_fingerprint,
           "corpus_signature": corpus_signature, "yardstick": yardstick}
    return _lookup(connection_string, key, before_run_id, prefix, "latest", configuration)


def reference_answer_run(connection_string: str, *, variant: str, grader: str, set_id: str, set_fingerprint: str,
                         corpus_signature: str | None, yardstick: str, generator: str | None = None,
                         configuration: str | None = None,
                         before_run_id: str | None = None, prefix: str = "eval") -> dict[str, Any] | None:
    """The pinned reference every later run of the key is also judged against, so a regression
    in small steps is caught: the latest accepted row (`accept_answer_run`), else the first
    eligible row with exactly this key. Same rules and shape as :func:`previous_answer_run`."""
    key = {"variant": variant, "grader": grader, "set_id": set_id, "set_fingerprint": set_fingerprint,
           "corpus_signature": corpus_signature, "yardstick": yardstick}
    return _lookup(connection_string, key, before_run_id, prefix, "reference", configuration)


def answer_history_of(connection_string: str, *, variant: str, grader: str, configuration: str | None = None,
                      before_run_id: str | None = None, prefix: str = "eval") -> dict[str, Any] | None:
    """The latest row of (``variant``, ``grader``) that was ever a yardstick (eligible or
    accepted), whatever its set, corpus or yardstick; None when there is none (a genuinely
    new measurement). A run with no yardstick of its own key but such a row has had its
    benchmark or instrument changed under it: the gate fails closed (``not_compared``)."""
    _check_key({"variant": variant, "grader": grader, "configuration": configuration}, before_run_id)
    names = table_names(prefix)

    def find() -> dict[str, Any] | None:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return None
            found = measurements.find(conn, names, aspect=answers_aspect(grader), variant=variant, order="latest",
                                      configuration=configuration, before_run_id=before_run_id)
            return _read_row(conn, names, found, grader)

    return call_redacted(connection_string, "looking up the answer history", find)


def answer_earlier_names(connection_string: str, *, variant: str, grader: str, before_run_id: str | None = None,
                         prefix: str = "eval") -> list[str]:
    """The names ``variant``'s (``grader``) measurement had before, nearest first: a row recorded
    when a rename inherited a vanished name's answer history says so (``inherits`` in its
    provenance), and the lineage follows those rows back. The pinned reference follows it: a
    rename does not re-pin the reference to the rename run."""
    names = table_names(prefix)

    def find() -> list[str]:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return []
            return measurements.earlier_names(conn, names, aspect=answers_aspect(grader), variant=variant,
                                              before_run_id=before_run_id)

    return call_redacted(connection_string, "looking up the answer history", find)


def answer_recorded_of(connection_string: str, *, variant: str, grader: str, configuration: str | None = None,
                       before_run_id: str | None = None, prefix: str = "eval") -> str | None:
    """The run id of the latest row of (``variant``, ``grader``) recorded at all (eligible or
    not), or None: only then is the measurement genuinely new. One recorded in a run that
    failed has a history with no yardstick in it, and is judged only once a run of it is
    accepted. A row that measured nothing does not count, as a limited one does not: a grader
    that applies to no prompt of the set (n_scored 0, nothing errored) is never a yardstick, and
    counting it would fail every later run of the same set as not compared."""
    names = table_names(prefix)

    def find() -> str | None:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return None
            return measurements.recorded_of(conn, names, aspect=answers_aspect(grader), variant=variant,
                                            configuration=configuration, before_run_id=before_run_id)

    return call_redacted(connection_string, "looking up the answer history", find)


def recorded_answer_rows(connection_string: str, *, variant: str, grader: str, set_id: str, set_fingerprint: str,
                         corpus_signature: str | None, yardstick: str, configuration: str | None = None,
                         live: Mapping[str, str | None] | None = None, before_run_id: str | None = None,
                         prefix: str = "eval") -> list[dict[str, Any]]:
    """Every full row of exactly this key recorded before ``before_run_id``, eligible or not,
    newest first (:func:`read_answer_runs`' shape), under ``variant``'s name or (with
    ``configuration``) its configuration's under a name ``live`` (today's names, each with its
    configuration) does not have with it
    (`measurements.recorded_of_identity`): none may be a yardstick, but each measured this
    variant's answers on this set, corpus and yardstick, so a drop from one is shown when nothing
    comparable can judge the run (`eval_pipeline.gates.answers.shown_against_recorded`). An
    incomplete key matches nothing."""
    key = {"variant": variant, "grader": grader, "set_id": set_id, "set_fingerprint": set_fingerprint,
           "corpus_signature": corpus_signature, "yardstick": yardstick}
    _check_key({**key, "configuration": configuration}, before_run_id)
    if not all(is_text(v) for v in key.values()):
        return []
    names = table_names(prefix)
    identity = {"corpus_signature": corpus_signature, "benchmark_id": set_id, "benchmark": set_fingerprint,
                "instrument": yardstick}

    def find() -> list[dict[str, Any]]:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return []
            found = measurements.recorded_of_identity(conn, names, aspect=answers_aspect(grader), variant=variant,
                                                      identity=identity, configuration=configuration, live=live,
                                                      before_run_id=before_run_id)
            if not found:
                return []
            # every row in one query: with no acceptance window, a query per row would grow with the history
            read = conn.execute(sql.SQL(
                "SELECT {cols} FROM {rows} WHERE grader = %s AND (run_id, variant) IN"
                " (SELECT * FROM unnest(%s::text[], %s::text[]))").format(
                cols=sql.SQL(", ").join(map(sql.Identifier, _READ)), rows=_rows(names)),
                (grader, [f.run_id for f in found], [f.variant for f in found])).fetchall()
        rows = {(row["run_id"], row["variant"]): row for row in map(_as_dict, read)}
        return [rows[key] for key in ((f.run_id, f.variant) for f in found) if key in rows]  # newest first

    return call_redacted(connection_string, "looking up the answer history", find)


def answer_recorded_elsewhere(connection_string: str, *, grader: str, configuration: str,
                              live: Mapping[str, str | None],
                              before_run_id: str | None = None, prefix: str = "eval") -> tuple[str, str] | None:
    """(run id, name) of the latest full row of ``grader`` that measured the answers of
    ``configuration`` under a name ``live`` does not have with it (gone from today's variants
    file), or None: a variant renamed before any run of it was eligible is not new (the retrieval
    side's `eval_pipeline.history.runs.recorded_as_another`)."""
    names = table_names(prefix)

    def find() -> tuple[str, str] | None:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return None
            return measurements.recorded_elsewhere(conn, names, aspect=answers_aspect(grader),
                                                   configuration=configuration, live=live,
                                                   before_run_id=before_run_id)

    return call_redacted(connection_string, "looking up the answer history", find)


def _since_acceptance(conn: Any, names: Mapping[str, str], variant: str | None) -> dict[str, Any]:
    """Where "since the latest acceptance" starts among the answer rows, in recording order (not
    by time: re-accepting an older run must not forget what was measured after it): the latest
    acceptance of ``variant`` (None: of any variant), its run, and that run's first measurement
    of any aspect (``since_seq``), else (a history from before measurements) the time that run
    was recorded (``since_time``). All None when nothing was ever accepted."""
    none: dict[str, Any] = {"accepted_run": None, "since_seq": None, "since_time": None}
    found = conn.execute(sql.SQL("SELECT run_id FROM {} WHERE (%(variant)s::text IS NULL OR variant = %(variant)s)"
                                 " ORDER BY seq DESC LIMIT 1").format(sql.Identifier(names["references"])),
                         {"variant": variant}).fetchone()
    if found is None:
        return none
    accepted_run = found[0]
    # its first measurement of any aspect (one sequence numbers both): a run accepted for its
    # retrieval alone still starts the window by position, never by a clock that may have stepped
    since_seq = conn.execute(sql.SQL("SELECT min(seq) FROM {} WHERE run_id = %s").format(
        sql.Identifier(names["measurements"])), (accepted_run,)).fetchone()[0]
    since_time = None if since_seq is not None else conn.execute(sql.SQL(
        "SELECT created_at FROM {} WHERE run_id = %s").format(sql.Identifier(names["runs"])),
        (accepted_run,)).fetchone()
    return {"accepted_run": accepted_run, "since_seq": since_seq,
            "since_time": since_time[0] if since_time else None}


_SINCE = (" AND ((%(since_seq)s::bigint IS NULL AND %(since_time)s::timestamptz IS NULL)"
          " OR seq >= %(since_seq)s::bigint OR created_at >= %(since_time)s::timestamptz)")


def answer_graders_of(connection_string: str, *, variant: str, configuration: str | None = None,
                      before_run_id: str | None = None, prefix: str = "eval") -> dict[str, str]:
    """{grader: the run id of its latest yardstick row} for ``variant`` (by name or
    configuration), counting only rows recorded since the variant's latest acceptance (of its
    retrieval or answers; accepting a run without a measurement acknowledges its removal), in
    recording order, the accepted run's own rows included even when they could not be accepted
    (that run measured them: accepting it acknowledges no removal)."""
    names = table_names(prefix)

    def find() -> dict[str, str]:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return {}
            since = _since_acceptance(conn, names, variant)
            rows = conn.execute(sql.SQL(
                "SELECT DISTINCT ON (grader) grader, run_id FROM {} WHERE (eligible OR accepted"
                " OR run_id = %(accepted_run)s::text) AND " + measurements.SAME_VARIANT
                + " AND (%(before)s::text IS NULL OR run_id <> %(before)s::text)" + _SINCE
                + " ORDER BY grader, seq DESC").format(_rows(names)),
                {"variant": variant, "configuration": configuration, "heirs": None, "before": before_run_id,
                 **since}).fetchall()
        return {grader: run_id for grader, run_id in rows}

    return call_redacted(connection_string, "looking up the answer history", find)


def answer_tolerance_floor(connection_string: str, *, before_run_id: str | None = None,
                           prefix: str = "eval") -> dict[str, tuple[float, str]]:
    """The answer gate's tolerances in force for the whole project (metric tolerance -> (value,
    run id)): from the latest acceptance on, the accepted run's rows for the tolerances they
    asked for, every later yardstick row for those it was judged with; the smallest wins. A
    grader or variant new today is bound by them too, so loosening the gate in the same change
    as a new measurement does not judge it loosely (the retrieval gate's rule, `_pinned_gate`)."""
    names = table_names(prefix)

    def find() -> dict[str, tuple[float, str]]:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return {}
            since = _since_acceptance(conn, names, None)
            rows = conn.execute(sql.SQL(
                "SELECT run_id, run_id = %(accepted_run)s::text, provenance->'tolerances',"
                " provenance->'effective_tolerances' FROM {} WHERE (eligible OR accepted)"
                " AND (%(before)s::text IS NULL OR run_id <> %(before)s::text)" + _SINCE
                + " ORDER BY seq").format(_rows(names)), {"before": before_run_id, **since}).fetchall()
        floor: dict[str, tuple[float, str]] = {}
        for run_id, accepted, asked, judged in rows:
            for each in [asked] if accepted else list(judged.values()) if isinstance(judged, dict) else []:
                for name, value in (each if isinstance(each, dict) else {}).items():
                    if is_real(value) and (name not in floor or float(value) < floor[name][0]):
                        floor[name] = (float(value), str(run_id))
        return floor

    return call_redacted(connection_string, "looking up the answer gate in force", find)


def answer_history_exists(connection_string: str, *, before_run_id: str | None = None, prefix: str = "eval") -> bool:
    """Whether any answer row was ever a yardstick (eligible or accepted): a project with answer
    history, where ``strict`` judges a new measurement only once it is accepted."""
    names = table_names(prefix)

    def find() -> bool:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return False
            return bool(conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE (eligible OR accepted) AND "
                                             "(%(before)s::text IS NULL OR run_id <> %(before)s::text))").format(
                _rows(names)), {"before": before_run_id}).fetchone()[0])

    return call_redacted(connection_string, "looking up the answer history", find)


def read_answer_runs(connection_string: str, *, variant: str | None = None, run_id: str | None = None,
                     prefix: str = "eval") -> list[dict[str, Any]]:
    """Every recorded row (of ``variant`` / ``run_id`` when given), in insertion order: dicts
    with ``run_id, variant, grader, seq, created_at`` and the stored fields of
    :data:`ROW_FIELDS`; NULL metrics and bounds come back as NaN. No history yet: ``[]``."""
    for name, value in (("variant", variant), ("run_id", run_id)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string or None, got {value!r}")
    names = table_names(prefix)

    def read() -> list[dict[str, Any]]:
        with measurements.connection(connection_string) as conn:
            if not history_exists(conn, names):
                return []
            rows = conn.execute(
                sql.SQL("SELECT {cols} FROM {rows} WHERE (%(variant)s::text IS NULL OR variant = %(variant)s::text)"
                        " AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s::text) ORDER BY seq").format(
                    cols=sql.SQL(", ").join(map(sql.Identifier, _READ)), rows=_rows(names)),
                {"variant": variant, "run_id": run_id}).fetchall()
        return [_as_dict(r) for r in rows]

    return call_redacted(connection_string, "reading the answer history", read)


def accept_answer_run(connection_string: str, run_id: str, *, variants: Sequence[str] | None = None, note: str = "",
                      accepted_by: str | None = None,
                      prefix: str = "eval") -> tuple[list[tuple[str, str]], list[str]]:
    """Accept a recorded run's answer rows (of `variants`, default all) alone as the pinned
    reference and the previous run of their keys, for example after a deliberate trade-off the
    answer gate failed: the answers-only acceptance (``accept_run(..., answers_only=True)``, what
    an answer gate offers), so every refusal of it stands and a refused row names its
    ``--answers-only`` command. Returns ((variant, grader) accepted, why each other row was not),
    nothing accepted returned rather than raised: a limited row, one with errored answers, an
    unknown generator or a yardstick without a single grader can never be a yardstick; and, unless
    `variants` names its variant, a row whose gate failed against a comparable yardstick (a
    measured regression is accepted only deliberately, by name), or whose treatment changed in the
    run that changed its key (its set, corpus or grader: nothing measured that change). A refusal
    of the run's retrieval step (a limited run, errored questions, reranker fallbacks, an unnamed
    measured retrieval regression) raises its ValueError, as the command line's does."""
    done = _accept(connection_string, run_id, variants=variants, note=note, accepted_by=accepted_by, prefix=prefix,
                   answers_only=True, required=False)
    return done.answers, done.refused


def answers_to_accept(rows: Sequence[Mapping[str, Any]], *, run_id: str, variants: Sequence[str] | None = None,
                      answers_only: bool = False) -> tuple[list[tuple[str, str]], list[str]]:
    """Of a run's answer rows (:func:`read_answer_runs`), those of `variants` (default all) an
    acceptance takes, as (variant, grader), and why each other was not (:func:`accept_answer_run`);
    a refusal's command is of the same kind as the acceptance (``answers_only``: the answers
    alone; the whole acceptance would also pin the variant's retrieval)."""
    accepted: list[tuple[str, str]] = []
    refused: list[str] = []
    for r in rows:
        if variants is not None and r["variant"] not in set(variants):
            continue
        metrics = {m: None if isinstance(r[m], float) and math.isnan(r[m]) else r[m] for m in ANSWER_METRICS}
        reasons = yardstick_problems({**r, **metrics})
        gate = (r.get("provenance") or {}).get("gate")
        if isinstance(gate, Mapping):
            measured = measurements.failed_measured(gate.get("passed"), gate.get("state"))
        else:  # recorded before rows kept their gate's state: an ineligible row may be a measured regression
            measured = not r.get("eligible")
        if variants is None and measured and not reasons:
            reasons.append(f"its answer gate failed against a comparable yardstick (a measured regression), or "
                           f"it was recorded not eligible without saying why: name the variant to accept it "
                           f"({accept_command(run_id, [r['variant']], answers_only=answers_only)})")
        changed = gate.get("treatment_changed") if isinstance(gate, Mapping) else None
        if variants is None and changed and not reasons:
            reasons.append(f"its treatment changed in the run that changed its golden set, corpus or grader "
                           f"({'; '.join(map(str, changed))}), and nothing measured that change: name the variant "
                           f"to accept it ({accept_command(run_id, [r['variant']], answers_only=answers_only)})")
        if reasons:
            refused.append(f"{r['variant']} {r['grader']}: " + "; ".join(reasons))
        else:
            accepted.append((r["variant"], r["grader"]))
    return accepted, refused


@dataclass(frozen=True)
class RunAcceptance:
    """What accepting a run did: the retrieval variants pinned (None for a run with no run row,
    whose answers were recorded through the library), the (variant, grader) answer rows
    accepted, and why each other answer row was not."""

    retrieval: list[str] | None
    answers: list[tuple[str, str]]
    refused: list[str]

    def summary(self, run_id: str) -> list[str]:
        """What was accepted, two lines, as the command line prints them and the job logs them."""
        if self.retrieval is None:
            head = f"run {run_id} has no run row (its answers were recorded through the library): its answers alone"
        else:
            head = (f"run {run_id} is now the pinned reference of: "
                    f"{', '.join(self.retrieval) or 'no retrieval variant (answers alone)'}")
        return [head, f"answers accepted: {', '.join(f'{v} {g}' for v, g in self.answers) or 'none'}"]

    def metadata(self, run_id: str, asked_for: str) -> dict[str, Any]:
        """What the `accept_reference` job records of it (the step's metadata in the UI): the run
        (a link), what was asked for, the variants pinned, the answers accepted and refused."""
        return {"run_id": RunLink(run_id), "asked for": asked_for,
                # an empty value read as nothing accepted, after an acceptance of answers alone
                "variants": ", ".join(self.retrieval or []) or ("none (answers alone)" if self.answers else "none"),
                "answers": ", ".join(f"{v} {g}" for v, g in self.answers) or "none",
                "answers not accepted": "; ".join(self.refused) or "none"}


def accept_run(connection_string: str, run_id: str, *, variants: Sequence[str] | None = None, note: str = "",
               accepted_by: str | None = None, prefix: str = "eval", answers_only: bool = False) -> RunAcceptance:
    """Accept a recorded run as the pinned reference of its variants, retrieval
    (`runs.retrieval_to_accept`) and answers (:func:`answers_to_accept`) alike, in one
    transaction: all of it or nothing. What the command line's ``accept`` and the
    ``accept_reference`` job do. A run with no run row but answer rows (recorded through the
    library, by `record_answers`) has its answers accepted alone, the way out a not-compared
    message names for it; with neither, or with nothing accepted, a ValueError says why.

    ``answers_only``: the answer rows alone, what an answer gate offers. Accepting a variant's
    answers must not also make this run its retrieval reference: that would pin a retrieval step
    the user never looked at (a drop within tolerance, or a tolerance the run loosened), and the
    next step would be measured from it. Every refusal of the whole acceptance stands (a limited
    run, a variant that may be renamed, errored questions, reranker fallbacks)."""
    return _accept(connection_string, run_id, variants=variants, note=note, accepted_by=accepted_by, prefix=prefix,
                   answers_only=answers_only, required=True)


def _accept(connection_string: str, run_id: str, *, variants: Sequence[str] | None, note: str,
            accepted_by: str | None, prefix: str, answers_only: bool, required: bool) -> RunAcceptance:
    """:func:`accept_run`, whose nothing-accepted ValueError is raised only when ``required``
    (:func:`accept_answer_run` returns nothing accepted instead)."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
    names = table_names(prefix)
    rows = read_answer_runs(connection_string, run_id=run_id, prefix=prefix)
    answers, refused = answers_to_accept(rows, run_id=run_id, variants=variants, answers_only=answers_only)
    with connect(connection_string) as conn:
        try:
            retrieval: list[str] | None = retrieval_to_accept(conn, names, run_id, variants=variants,
                                                              answered={r["variant"] for r in rows},
                                                              answers_only=answers_only)
        except NoRecordedRun as missing:
            retrieval, no_run = None, missing
        if answers_only and retrieval is not None:
            retrieval = []  # checked, not taken: its refusals stand
        if not retrieval and not answers:  # nothing to accept: no run, or only answer rows named, all refused
            if not required:
                return RunAcceptance(retrieval, [], refused)
            refusals = f"; its answer rows were not accepted: {'; '.join(refused)}" if refused else ""
            named = ", ".join(sorted(variants or []))
            if retrieval is None:
                why = f"{no_run}{refusals or ', nor any answer row of it'}"
            elif answers_only:
                why = f"run {run_id!r} has no answer row to accept{f' of {named}' if named else ''}{refusals}"
            else:  # named: none of them ranked; whole: a run that ranked nothing (its answers alone)
                ranked = f"ranked none of {named}" if named else "ranked no variant"
                why = f"run {run_id!r} {ranked}{refusals or ', nor any answer row of it'}"
            raise ValueError(why)
        write_acceptance(conn, names, run_id, [(v, measurements.RETRIEVAL) for v in retrieval or []]
                         + [(v, answers_aspect(g)) for v, g in answers], note=note,
                         accepted_by=accepted_by or who_accepts())
    return RunAcceptance(retrieval, answers, refused)
