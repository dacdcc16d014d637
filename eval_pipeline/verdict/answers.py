"""The answer verdict: the answer gate of each (variant, grader) of a run, and the answer rows
recorded in the history.

Each (variant, grader) of this run is judged against the previous eligible run and the pinned
reference of the *same* measurement: golden set (id and fingerprint, over every prompt and
assertion), corpus, grading yardstick, variant and grader (`eval_pipeline.history.answers`);
the generator is the treatment, named when it changed. It fails closed: a measurement with a
history and no comparable run (the set, the corpus or the yardstick changed under it) is
`not_compared` and fails until a run is accepted. A run that answered part of the set is never
compared. An answer that could not be generated fails the gate (the metrics are incomplete), and
so does a grader that scored a smaller share of the prompts than its yardstick did (an answer it
cannot judge is outside its pass rate: a generator that starts hedging must not read as an
improvement). A variant's answer gate passes when every grader's gate passes.

A run is recorded only after the results are published, and its rows become yardsticks for
later runs (`eligible`) only when the whole run's verdict passed, retrieval and answers. No
answer text is ever recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from eval_pipeline.common.checks import finite_number, missing
from eval_pipeline.gates.answers import evaluate_answer_gate, shown_against_recorded, validate_answer_tolerances
from eval_pipeline.gates.retrieval import GateResult, not_compared_unless_measured
from eval_pipeline.grading.registry import GRADER_KINDS
from eval_pipeline.history.answers import (
    answer_comparable,
    answer_earlier_names,
    answer_graders_of,
    answer_history_exists,
    answer_history_of,
    answer_recorded_elsewhere,
    answer_recorded_of,
    answer_tolerance_floor,
    previous_answer_run,
    record_answer_run,
    recorded_answer_rows,
    reference_answer_run,
    yardstick_problems,
)
from eval_pipeline.history.identity import RUN_OUTCOMES
from eval_pipeline.history.measurements import session as history_session
from eval_pipeline.history.runs import moved_reference, setting_changes
from eval_pipeline.ranking.inputs import InconsistentInputs
from eval_pipeline.verdict.retrieval import GENERIC_ACCEPT_COMMAND, pinned_tolerances, with_exact_command


@dataclass
class AnswerVerdict:
    """The answer gate of each (variant, grader), and the rows to record."""

    evaluated: bool
    reason: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per (variant, grader): metrics and verdict
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> grader -> AnswerGateResult
    records: list[dict[str, Any]] = field(default_factory=list)  # for record_answer_run
    missing: list[tuple[str, str, str]] = field(default_factory=list)  # (variant, grader, last run) not measured
    # (variant, grader) -> the tolerances its row asked for looser than its yardstick's: an acceptance of the row
    # puts them in force, so a command that takes it says so (`loosened_taken`)
    loosened: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # the run's `RunVerdict.unrecorded` (set by decide_run): its rows are never recorded
    unrecorded: str = ""

    def sync_rows(self) -> None:
        """Each row's ``gate`` the one `gates` holds, after a gate was reworded (the report reads rows)."""
        for row in self.rows:
            row["gate"] = self.gates[row["variant"]][row["grader"]]

    def loosened_taken(self, variant: str, graders: Collection[str]) -> list[str]:
        """The looser answer tolerances an acceptance taking ``graders`` of ``variant`` puts in force."""
        return sorted({item for g in graders for item in self.loosened.get((variant, g), [])})

    def variant_passed(self, variant: str) -> bool:
        return all(g.passed for g in self.gates.get(variant, {}).values())

    @property
    def passed(self) -> bool:
        """Every (variant, grader) gate passed (nothing judged passes: no answers ran)."""
        return all(g.passed for graders in self.gates.values() for g in graders.values())


def check_answers_belong(answer_metrics: Mapping[str, pd.DataFrame], *, corpus_signature: str,
                         tables: Mapping[str, str], variant_configs: Mapping[str, Any],
                         engine: str | None = None) -> None:
    """The answers were produced from this run's corpus, each partition's vector table
    (`tables`: partition key -> table) and each variant's
    configuration as ranked (a report reads the latest materialization of every partition, which
    may be another run's), and, with `engine` (this run's `engine_identity`), their context
    ranked by this run's code, packages and database, as a retrieval partition must be (answers
    materialized before a code change would be judged and recorded as this run's): refuse
    otherwise, naming what to materialize again."""
    problems = []
    for variant, frame in answer_metrics.items():
        if not len(frame):
            continue
        if variant not in tables:
            continue  # no retrieval metrics for it in this run: its answers are not judged either
        row = frame.iloc[0]
        expected = tables[variant]
        if row["corpus_signature"] != corpus_signature or row["store_table"] != expected:
            problems.append(f"variant {variant!r} answered from corpus {row['corpus_signature']!r} table "
                            f"{row['store_table']!r}, this run has {corpus_signature!r} {expected!r}")
        elif (variant in variant_configs
              and json.loads(row["variant_config"]) != _ranked_config(variant_configs[variant])):
            problems.append(f"variant {variant!r} answered with another configuration than it was ranked with")
        elif engine is not None and (ranked_by := row.get("engine_identity")) != engine:
            problems.append(f"variant {variant!r} answered from a context ranked by engine "
                            f"{ranked_by if not missing(ranked_by) else 'unknown'} (code, packages, database), "
                            f"this run's is {engine!r}")
    if problems:
        raise InconsistentInputs("the answer metrics do not belong to this run: " + "; ".join(problems)
                                 + ". Materialize answers, graded_answers and answer_metrics for these variants again.")


def _ranked_config(config: Any) -> Any:
    """A variant's configuration as its results record it: without the `index` the report adds."""
    return {k: v for k, v in config.items() if k != "index"} if isinstance(config, Mapping) else config


def _answer_row(row: Mapping[str, Any], *, run_id: str, corpus_signature: str) -> dict[str, Any]:
    """An answer_metrics row as the history records it (what `yardstick_problems` and the gate
    read; its record adds the grading calls that failed to ``errored``)."""
    return {"run_id": run_id, "variant": row["variant"], "grader": row["grader"], "set_id": row["set_id"],
            "set_fingerprint": row["set_fingerprint"], "corpus_signature": corpus_signature,
            "generator": None if missing(row["generator"]) else row["generator"],
            "yardstick": recorded_yardstick(row["grader"], row["yardstick"]), "limited": bool(row["limited"]),
            "errored": int(row["n_errored"]), "n_scored": int(row["n_scored"]),
            "pass_rate": finite_number(row["pass_rate"]), "mean_score": finite_number(row["mean_score"]),
            "pass_rate_ci_low": finite_number(row["pass_rate_low"]),
            "pass_rate_ci_high": finite_number(row["pass_rate_high"]),
            "mean_ci_low": finite_number(row["mean_low"]), "mean_ci_high": finite_number(row["mean_high"])}


@history_session()  # its lookups on one connection, called by the verdict asset or directly
def judge_answer_run(answer_metrics: Mapping[str, pd.DataFrame], *, order: Sequence[str], corpus_signature: str,
                     tolerances: Mapping[str, float], strict: bool, connection_string: str | None,
                     run_id: str, configurations: Mapping[str, str] | None = None,
                     vanished: Sequence[str] = (), renamed: Collection[str] | None = None,
                     refused: Mapping[str, str] | None = None, live: Sequence[str] | None = None) -> AnswerVerdict:
    """The answer gate of every (variant, grader) in `answer_metrics` (the answer_metrics
    asset's frames, checked with `check_answers_belong` first), looked up in the history at
    `connection_string` (None: no history, every comparable run is a first run), by variant
    name or by its retrieval configuration (`configurations`: partition key -> fingerprint, a
    rename keeps the history; with `renamed`, only those variants, the new names the retrieval
    verdict found inheriting a vanished name's history, `RunVerdict.inherits`: a new name never
    takes a live variant's history). Fails closed: a measurement with a history and nothing
    comparable; a variant of this run whose measurement (a grader) has a history since its last
    acceptance but is missing from this run; a new measurement while variants `vanished`.
    The tolerances are never looser than the yardstick rows' (`pinned_tolerances`). ``refused``:
    the variants no acceptance of this run can take, with why (`RunVerdict.acceptance_refusals`:
    errored questions, reranker fallbacks, a limited run...): their gates name no command for
    this run (`_name_ways_out`). ``live``: the variants file's names (default `order`): a name
    here with today's configuration is never another variant's retired name."""

    recorded_configurations = dict(configurations or {})  # recorded with every row, for a later rename
    today = {name: recorded_configurations.get(name) for name in (order if live is None else live)}
    configurations = {v: c for v, c in recorded_configurations.items() if renamed is None or v in renamed}
    tolerances = validate_answer_tolerances(tolerances, "answers.gate")  # the defaults filled in, as recorded
    frames = [answer_metrics[v] for v in order if v in answer_metrics and len(answer_metrics[v])]
    verdict = AnswerVerdict(bool(frames), "" if frames else "no variant has answer metrics (no golden prompt set, "
                            "or answers not materialized)")
    rows = [(row, _answer_row(row, run_id=run_id, corpus_signature=corpus_signature))
            for f in frames for row in f.to_dict(orient="records")]
    if connection_string:  # a measurement with a history that this run does not make fails closed
        measured = {(r["variant"], r["grader"]) for _, r in rows}
        for variant in order:
            graders = answer_graders_of(connection_string, variant=variant, before_run_id=run_id) or \
                answer_graders_of(connection_string, variant=variant, configuration=configurations.get(variant),
                                  before_run_id=run_id)
            for grader, last in graders.items():
                if (variant, grader) not in measured:
                    verdict.gates.setdefault(variant, {})[grader] = GateResult(False, "not_compared", [], (
                        f"FAILED (not compared): the {grader} grades of this variant were measured (run {last}) and "
                        "are missing from this run (no golden prompts, another grader list, answers not "
                        "materialized?); accept a run without them once the report has recorded it (python -m "
                        # the command: `_name_ways_out`
                        "eval_pipeline.history accept RUN_ID) to acknowledge their removal"))
                    verdict.missing.append((variant, grader, last))
    problems = {(r["variant"], r["grader"]): yardstick_problems(
        {**r, "errored": r["errored"] + int(row.get("n_grader_failed") or 0)}) for row, r in rows}
    if not frames:
        return _name_ways_out(verdict, run_id, problems, refused or {})
    project_has_history = bool(connection_string and answer_history_exists(connection_string, before_run_id=run_id))
    floor = answer_tolerance_floor(connection_string, before_run_id=run_id) if connection_string else {}
    for row, current in rows:
        metrics = json.loads(row["metrics_json"])
        comparable, _ = answer_comparable(current)
        key = {k: current[k] for k in ("variant", "grader", "set_id", "set_fingerprint", "corpus_signature",
                                       "yardstick")}
        configuration = configurations.get(row["variant"])
        previous = reference = history = None
        recorded: str | None = None
        recorded_as: str | None = None  # the retired name its configuration was recorded under, if not its own
        lineage: list[str] = []
        inherited_reference = False  # found through an earlier name: accepted, if at all, for another variant
        own = answer_history_of(connection_string, variant=row["variant"], grader=row["grader"],
                                before_run_id=run_id) if connection_string else None
        if own is not None:
            configuration = None  # its own name's history: another name's is used only for a rename
        if connection_string:
            if comparable:
                previous = previous_answer_run(connection_string, **key, configuration=configuration,
                                               before_run_id=run_id)
                reference = reference_answer_run(connection_string, **key, configuration=configuration,
                                                 before_run_id=run_id)
                if reference is not None and configuration is None and not reference.get("accepted"):
                    # renamed in an earlier run: the pinned reference follows the lineage
                    lineage = answer_earlier_names(connection_string, variant=row["variant"], grader=row["grader"],
                                                   before_run_id=run_id)
                    for earlier in lineage:
                        older = reference_answer_run(connection_string, **{**key, "variant": earlier},
                                                     before_run_id=run_id)
                        if older is not None:
                            reference, inherited_reference = older, True
                            break
            # without a configuration (its own name's history, or none to follow) the lookup is the one just
            # made: not asked again
            history = own if configuration is None else answer_history_of(
                connection_string, variant=row["variant"], grader=row["grader"], configuration=configuration,
                before_run_id=run_id)
            if history is None:  # never a yardstick: genuinely new only if never recorded at all
                recorded = answer_recorded_of(connection_string, variant=row["variant"], grader=row["grader"],
                                              configuration=configuration, before_run_id=run_id)
                renamed_from = recorded_configurations.get(row["variant"])
                if recorded is None and renamed_from is not None:
                    # renamed before any run of it was eligible: recorded under the name that left, so not new
                    other = answer_recorded_elsewhere(connection_string, grader=row["grader"],
                                                      configuration=renamed_from, live=today, before_run_id=run_id)
                    recorded, recorded_as = (None, None) if other is None else other
        effective, loosened = pinned_tolerances(tolerances, [_as_run(previous), _as_run(reference)], floor)
        prompts = row.get("n_prompts")  # the share scored is over them (the same set as the yardsticks')
        gate = evaluate_answer_gate({**current, "grader_failed": int(row.get("n_grader_failed") or 0),
                                     "n_prompts": None if missing(prompts) else int(prompts),
                                     "configuration": configuration, "lineage": lineage}, previous,
                                    reference, effective, strict=strict, history=history,
                                    project_has_history=project_has_history, vanished=vanished, recorded=recorded,
                                    recorded_as=recorded_as)
        moved = moved_reference(previous, reference, inherited=inherited_reference,
                                judged=((previous or {}).get("provenance") or {}).get("gate"))
        if moved is not None:  # a measured drop from the previous row stays one (accepting then names it)
            gate = not_compared_unless_measured(gate, f"{moved}: judged against it, a regression in steps could "
                                                      "pass; accept a run to make it the reference")
        if loosened:
            verdict.loosened[(row["variant"], row["grader"])] = list(loosened)
            gate = replace(gate, message=f"{gate.message} (the answer gate was loosened since its yardstick: "
                           f"{'; '.join(loosened)}; judged with the stricter tolerances until a run is accepted)")
        treatment = json.loads(row["treatment_json"])
        # what changed in the treatment: since the previous row of this key, else (the set, the corpus or
        # the grader's yardstick changed too) since this grader's last row of any key, else (a grader new
        # today) since the last row of a grader of this variant dropped today: nothing here can measure it
        before = previous or history
        if before is None and connection_string:
            before = _dropped_graders_row(connection_string, verdict.missing, variant=row["variant"],
                                          configuration=configuration, run_id=run_id)
        engine = None if missing(row.get("engine_identity")) else str(row["engine_identity"])
        changes = treatment_changes_since(treatment, current["generator"], before,
                                          configuration=recorded_configurations.get(row["variant"]),
                                          variant_config=None if missing(row.get("variant_config"))
                                          else json.loads(row["variant_config"]), engine=engine)
        unmeasured_changes = changes if previous is None and (gate.state == "not_compared" or history is None) \
            else []
        if unmeasured_changes:
            gate = replace(gate, passed=False, state="not_compared", message=(
                f"{gate.message if gate.state == 'not_compared' else 'FAILED (not compared): a grader new today'}"
                f"; and the treatment changed in the same run ({'; '.join(unmeasured_changes)}): no answer "
                "comparison can measure it across the change, so accepting this run needs the variant named"))
        if connection_string and gate.state == "not_compared" and not gate.passed:
            # nothing comparable judged it: a row of this key recorded before, eligible or not, under its name or
            # its configuration's retired one, still shows a drop, judged with the stricter of its tolerances
            recorded_rows = recorded_answer_rows(connection_string, **key,
                                                 configuration=recorded_configurations.get(row["variant"]),
                                                 live=today, before_run_id=run_id)
            gate = shown_against_recorded(gate, {**current, "n_prompts": None if missing(prompts) else int(prompts)},
                                          [(other, pinned_tolerances(effective, [_as_run(other)])[0])
                                           for other in recorded_rows])
        inherited = next((r["variant"] for r in (reference, previous) if r is not None and configuration is not None
                          and r.get("variant") not in (None, row["variant"])), None)
        inherits = {"inherits": inherited} if inherited else {}  # a rename: the lineage later runs follow
        verdict.gates.setdefault(row["variant"], {})[row["grader"]] = gate
        eligible = bool(gate.passed and not yardstick_problems(current))
        config = {} if missing(row.get("variant_config")) else json.loads(row["variant_config"])
        # recorded errored: answers not generated, and answers whose grading call failed (neither
        # has a grade), so a row whose grading failed counts as recorded (never "measured nothing")
        verdict.records.append({**current, "errored": current["errored"] + int(row.get("n_grader_failed") or 0),
                                "eligible": eligible, "variant_config": config,
                                "provenance": {"set_name": row["set_name"], "treatment": treatment,
                                               "metrics": _no_nan(metrics),
                                               "configuration": recorded_configurations.get(row["variant"]),
                                               # what ranked the context: a later run names its change
                                               "engine_identity": engine,
                                               "tolerances": dict(tolerances),
                                               "effective_tolerances": {row["variant"]: effective},
                                               # what the gate decided: accepting a row that failed against
                                               # a comparable yardstick needs its variant named
                                               "gate": {"state": gate.state, "passed": bool(gate.passed),
                                                        # the reference it was judged against: one deleted
                                                        # later must not be replaced silently (moved_reference)
                                                        "reference_run_id": (reference or {}).get("run_id"),
                                                        # changed with the set: never accepted unnamed
                                                        "treatment_changed": unmeasured_changes},
                                               **inherits}})
        verdict.rows.append({**row, "metrics": metrics, "gate": gate, "previous": previous, "reference": reference,
                             "treatment_changes": changes})
    return _name_ways_out(verdict, run_id, problems, refused or {})


def _name_ways_out(verdict: AnswerVerdict, run_id: str, problems: Mapping[tuple[str, str], list[str]],
                   refused: Mapping[str, str]) -> AnswerVerdict:
    """Each answer gate whose message names the generic way out (``accept RUN_ID``) made to name
    one that does what the message says, and says what else it takes; else why this run offers
    none. ``problems``: this run's answer rows by (variant, grader), each with why an acceptance
    refuses it (empty: taken). The way out, for a variant's gate:

    - none for this run where an acceptance of the variant is refused whole (``refused``), or the
      gate's own row is refused (errored answers, an unknown generator...), or a grader missing
      beside rows none of which is taken: the message says a later run, and why;
    - the whole acceptance for a grader missing from a variant with no answer row in this run
      (only it can acknowledge the removal), saying it also makes the run the variant's
      retrieval reference, and the settings it ran with the project's gate (every variant's:
      `history.runs._pinned_gate`);
    - else the answers alone (``--answers-only``), saying what else it takes (it names the
      variant, not a grader): the variant's other failed graders, the removals of its other
      missing graders, and the looser answer tolerances its rows asked for.
    A retrieval-level account of the same commands follows once the run's answers are judged
    (`RunVerdict.disclose_ways_out`)."""
    for variant, graders in verdict.gates.items():
        rows = {g for v, g in problems if v == variant}
        taken = {g for g in rows if not problems[(variant, g)]}
        for grader, gate in list(graders.items()):
            if GENERIC_ACCEPT_COMMAND not in gate.message:
                continue
            why = refused.get(variant) or (
                "; ".join(problems[(variant, grader)]) if grader in rows
                else "none of its answer rows can be accepted" if rows and not taken else "")
            if why:  # refused whole: nothing of this run; else its whole acceptance still could (with retrieval)
                which = "this run" if variant in refused else "this run's answers"
                exact = replace(gate, message=gate.message.replace(
                    GENERIC_ACCEPT_COMMAND, f"a later run: no acceptance of {which} takes it, {why}"))
            elif not rows:  # a grader missing from a variant that answered nothing in this run
                exact = with_exact_command(gate, run_id, variant)
                exact = replace(exact, message=f"{exact.message}; this run has no answer row of the variant, so only "
                                "the whole acceptance can: it also makes this run the variant's retrieval reference, "
                                "and the tolerances and strictness this run ran with the gate in force for every "
                                "variant of the project")
            else:
                exact = with_exact_command(gate, run_id, variant, answers_only=True)
                also = sorted(g for g, other in graders.items() if g != grader and not other.passed and g in taken)
                gone = sorted(g for v, g, _ in verdict.missing if v == variant and g != grader)
                looser = verdict.loosened_taken(variant, taken)
                notes = ([f"this run's {', '.join(also)} of the variant, whose gate failed"] if also else []) + (
                    [f"the removal of {', '.join(gone)} (missing from this run)"] if gone else []) + (
                    [f"the answer tolerances its rows asked for, looser than their yardstick's "
                     f"({'; '.join(looser)})"] if looser else [])
                if notes:
                    exact = replace(exact, message=f"{exact.message}; that command also accepts {'; and '.join(notes)}")
            graders[grader] = exact
    verdict.sync_rows()
    return verdict


def _dropped_graders_row(connection_string: str, missing: Sequence[tuple[str, str, str]], *, variant: str,
                         configuration: str | None, run_id: str) -> dict[str, Any] | None:
    """The last yardstick row of a grader of ``variant`` that this run dropped (``missing``:
    (variant, grader, last run) of the measurements missing from it), or None: what a grader new
    today is compared with for a treatment change."""
    for each, grader, _ in missing:
        if each == variant:
            row = answer_history_of(connection_string, variant=variant, grader=grader, configuration=configuration,
                                    before_run_id=run_id)
            if row is not None:
                return row
    return None


def recorded_yardstick(grader: str, yardstick: Any) -> Any:
    """The yardstick a row is judged and recorded under: a plugin grader's (registered from
    outside the package) with the digest of its code appended (``+plugin-<digest>``): its
    own yardstick says only what its author wrote, so an edit of its code is another
    measurement, never compared with the grades before it. A built-in grader's (its code is in
    its yardstick already) and a yardstick that is not a text are kept as they are."""
    digest = GRADER_KINDS.code_digest([grader]) if isinstance(yardstick, str) and grader in GRADER_KINDS else ""
    return f"{yardstick}+plugin-{digest}" if digest else yardstick


def _as_run(row: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """An answer history row in the shape `pinned_tolerances` reads (a run record)."""
    if row is None:
        return None
    return {"run_id": row["run_id"], "variant": row["variant"], "accepted": bool(row.get("accepted")),
            "provenance": row.get("provenance") or {}}


def treatment_changes_since(treatment: Mapping[str, Any], generator: str | None,
                            before: Mapping[str, Any] | None, *, configuration: str | None = None,
                            variant_config: Mapping[str, Any] | None = None, engine: str | None = None) -> list[str]:
    """The generator's change, `treatment_changes` and `retrieval_changes` since the history row
    `before` ([] without one)."""
    if before is None:
        return []
    moved = [f"generator {before.get('generator')!r} -> {generator!r}"] if before.get("generator") != generator else []
    return moved + treatment_changes(treatment, before) + retrieval_changes(configuration, variant_config, before,
                                                                            engine=engine)


def retrieval_changes(configuration: str | None, variant_config: Mapping[str, Any] | None,
                      before: Mapping[str, Any], *, engine: str | None = None) -> list[str]:
    """What changed since the history row `before` in the retrieval that gave the answers their
    context: the variant's settings, one line each ("retrieval depth: 5 -> 3"), else its
    configuration's fingerprint (an index or embedder change the settings do not show), and the
    engine that ranked it (`engine`: code, packages, database). As much the answers' treatment
    as the generator: a golden-set edit made with it must name it, or accepting the run whole
    would take the answers' drop it caused unnamed. Of what a run's tuning recorded
    (`RUN_OUTCOMES`) only what it chose is a setting ("retrieval tuned.chosen.rrf_k: 60 -> 5"):
    its scores move with the corpus. [] when either side recorded nothing to compare."""
    def settings(config: Any) -> Any:
        chosen = {k: {"chosen": config[k]["chosen"]} for k in RUN_OUTCOMES
                  if isinstance(config.get(k), Mapping) and "chosen" in config[k]}
        return {**{k: v for k, v in config.items() if k not in RUN_OUTCOMES and k != "index"}, **chosen}

    earlier = before.get("variant_config")
    lines = [f"retrieval {line}" for line in setting_changes(settings(earlier), settings(variant_config))] \
        if isinstance(earlier, Mapping) and earlier and isinstance(variant_config, Mapping) and variant_config else []
    provenance = before.get("provenance") or {}
    recorded = provenance.get("configuration")
    if not lines and recorded and configuration and recorded != configuration:
        lines = [f"retrieval configuration {recorded!r} -> {configuration!r}"]
    ranked_by = provenance.get("engine_identity")
    if ranked_by and engine and ranked_by != engine:
        lines.append(f"retrieval engine {ranked_by!r} -> {engine!r} (code, packages, database)")
    return lines


def treatment_changes(treatment: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[str]:
    """What changed since the previous run in what the key does not hold, one line per setting
    as the retrieval history writes it (`history.runs.setting_changes`: "context_k: 5 -> 3",
    "generator.max_tokens: None -> 200"); [] when nothing did or there is no previous run."""
    before = ((previous or {}).get("provenance") or {}).get("treatment")
    if not isinstance(before, Mapping):
        return []
    return setting_changes(before, treatment)


def _no_nan(value: Any) -> Any:
    """`value` with every NaN (a metric over nothing) as None, so it can be stored as JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value


def record_answers(verdict: AnswerVerdict, connection_string: str, run_id: str, *, run_eligible: bool) -> None:
    """Record this run's answer rows (after the results are published). A row is a later run's
    yardstick only when the whole run is (`run_eligible`: the run's one verdict passed, retrieval
    and answers, with no errored question) and its own gate passed. Never the rows of a run
    decided as not recorded (`unrecorded`): its verdict said no acceptance of it can be taken,
    which recorded rows would make false (a ValueError names the run and the setting)."""
    if verdict.unrecorded:
        raise ValueError(f"run {run_id}'s answers were judged for a run the report does not record "
                         f"({verdict.unrecorded}): they are not recorded")
    if verdict.records:
        record_answer_run(connection_string, run_id,
                          [{**r, "eligible": bool(r["eligible"] and run_eligible)} for r in verdict.records])
