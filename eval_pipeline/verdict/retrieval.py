"""The run's verdict: intervals, the comparison with the baseline variant, the comparison of
every variant with its own previous run, the regression gate, and the history record.

Kept in one function so the Dagster report asset stays a thin call, and so a CI script or a
notebook gets the same verdict without Dagster.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg

from eval_pipeline.common.checks import is_real
from eval_pipeline.common.formatting import fmt_number
from eval_pipeline.common.keyed_pickle import read_keyed, write_keyed
from eval_pipeline.common.state import PROJECT_ROOT
from eval_pipeline.common.versions import package_code_digest, package_versions
from eval_pipeline.gates.retrieval import EPSILON, GateResult, evaluate_gate, not_compared_unless_measured
from eval_pipeline.gates.rule import within_tolerance, without_yardstick
from eval_pipeline.history.answers import yardstick_problems
from eval_pipeline.history.identity import configuration_fingerprint, scoring_protocol
from eval_pipeline.history.measurements import MEASURED_STATES, failed_measured
from eval_pipeline.history.measurements import session as history_session
from eval_pipeline.history.runs import (
    SCORING_PROTOCOL,
    Comparison,
    accept_command,
    acceptance_conflict,
    benchmark_identity,
    compare_provenance,
    earlier_names,
    moved_reference,
    previous_run,
    project_history,
    record_run,
    recorded_as_another,
    recorded_measurements,
    recorded_run_of,
    reference_run,
)
from eval_pipeline.metrics.retrieval import COMPARED, INTERVAL, PRIMARY_METRIC, at_best, metric_names
from eval_pipeline.ranking.caches import CODE_PATHS, engine_identity
from eval_pipeline.ranking.inputs import InconsistentInputs
from eval_pipeline.scoring.variant import summarize
from eval_pipeline.store.database import DatabaseError
from eval_pipeline.verdict.paired import RankConfiguration, paired_counts, paired_reference

INTERVAL_METRICS = metric_names(INTERVAL)  # a bootstrap interval per variant


COMPARE_METRICS = metric_names(COMPARED)  # compared with the baseline variant (paired tests)


_STATISTICS_SOURCE = Path(__file__).resolve().parents[1] / "metrics" / "statistics.py"


@dataclass
class RunVerdict:
    """The run's numbers and its verdict.

    Each variant is judged twice: against its **previous** eligible run on the same
    benchmark (`previous`, `history`, `previous_gates`) and against its pinned **reference**
    (`reference`, `reference_history`, `reference_gates`: the run a user accepted, else the
    first eligible one). `gates` holds the combined result: it passes only when both do.
    """

    summary: pd.DataFrame
    intervals: pd.DataFrame
    baseline_comparison: pd.DataFrame  # each variant vs the baseline variant, this run
    history: dict[str, Comparison] = field(default_factory=dict)  # each variant vs its previous run
    previous: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    gates: dict[str, GateResult] = field(default_factory=dict)
    limited: bool = False
    previous_gates: dict[str, GateResult] = field(default_factory=dict)
    reference: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    reference_history: dict[str, Comparison | None] = field(default_factory=dict)
    reference_gates: dict[str, GateResult | None] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)  # as judged, with the scoring protocol
    decided_by: dict[str, str] = field(default_factory=dict)  # variant -> what decided its gate
    vanished: list[str] = field(default_factory=list)  # variants of the last yardstick run's file gone now
    loosened: dict[str, list[str]] = field(default_factory=dict)  # variant -> tolerances loosened since its yardstick
    policy: dict[str, bool] = field(default_factory=dict)  # the gate settings in force: strict, answer_strict
    answers: Any = None  # the answer verdict (eval_pipeline.verdict.answers.AnswerVerdict), if answers ran
    run_id: str = ""
    # the setting by which no report records this run ("report.record_history: false"; "" when the
    # report records it once published): `accept` refuses a run the history does not hold, so
    # nothing of such a run is offered
    unrecorded: str = ""
    index_of: dict[str, str] = field(default_factory=dict)  # partition key -> its index's key
    tables: dict[str, str] = field(default_factory=dict)  # partition key -> its vector table
    metrics_digest: str = ""  # of the per-question scores it was decided on (run_verdict.metrics_digest)
    inherits: dict[str, str] = field(default_factory=dict)  # a renamed variant -> the vanished name it inherits
    # variants of the variants file measured before and missing from this run's metrics: each has a
    # not_compared gate and nothing else (no summary row, no scores)
    unmeasured: list[str] = field(default_factory=list)
    # of those, each never measured under its name while variants vanished -> the vanished names it may be
    maybe_renamed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def acceptable_failures(self) -> list[str]:
        """The variants whose gate failed that an acceptance of this run can take, each by name
        (accepting a variant that failed against a comparable yardstick is a deliberate acceptance
        of its regression). What `history.runs.retrieval_to_accept` refuses is never offered:
        nothing of a limited run (never a reference), of a run without an id, of a run the report
        does not record (`unrecorded`: no recorded run to accept), or of a run that did not measure
        a variant that may be a vanished one renamed (`maybe_renamed`: no acceptance of it is
        taken); never a variant this run did not measure (`unmeasured`: nothing of it to accept),
        nor one with errored questions or reranker fallbacks (its numbers are not its
        configuration's)."""
        if not self._acceptance_possible:
            return []
        blocked = set(self.unmeasured) | self._not_its_configuration
        return [v for v, g in self.gates.items() if not g.passed and v not in blocked]

    @property
    def acceptable_answer_failures(self) -> list[str]:
        """The variants whose answer gate failed that an acceptance of this run's answers naming
        them (`history.answers.accept_run(answers_only=True)`) takes whole: every failed grader of
        the variant is taken (`answers_not_taken` names none of it), and nothing of the variant
        makes `retrieval_to_accept` refuse the acceptance (as for `acceptable_failures`: the run,
        errored questions, reranker fallbacks)."""
        answers = self.answers
        if answers is None or not self._acceptance_possible:
            return []
        not_taken = self.answers_not_taken
        blocked = self._not_its_configuration
        return [v for v, graders in answers.gates.items()
                if v not in blocked and v not in not_taken and any(not g.passed for g in graders.values())]

    @property
    def answers_not_taken(self) -> dict[str, list[str]]:
        """Per variant, each failed answer grader an acceptance of this run's answers alone naming
        the variant does not take, with why (`history.answers.answers_to_accept` refuses its row): a
        row with a yardstick problem (errored answers, nothing scored, a limited or otherwise
        uncomparable row), or a grader missing from this run with no row of the variant taken beside
        it (a taken row acknowledges the removal: `answer_graders_of` counts from the variant's
        latest acceptance)."""
        return self._answers_left(whole=False)

    @property
    def whole_acceptance_leaves(self) -> dict[str, list[str]]:
        """Per variant of `acceptable_failures`, each failed answer grader the whole acceptance
        naming it (`accept_command`) does not take, with why: a row with a yardstick problem. It
        takes the variant's retrieval, and so acknowledges the removal of any grader missing from
        this run (`removals_acknowledged`): only rows are left. The console and the check say it
        before the command is run."""
        left = self._answers_left(whole=True)
        return {v: left[v] for v in self.acceptable_failures if v in left}

    def removals_acknowledged(self, variants: Collection[str]) -> list[str]:
        """Each grader missing from this run (its gate failed: not compared) whose removal an
        acceptance of this run naming ``variants`` acknowledges, as "variant grader (last measured
        in run R)": the acceptance starts the window `answer_graders_of` counts graders from. Said
        beside the command, so accepting a run is never also a silent goodbye to a measurement."""
        answers = self.answers
        return [] if answers is None else [f"{v} {g} (last measured in run {last})"
                                           for v, g, last in answers.missing if v in variants]

    def _answers_left(self, *, whole: bool) -> dict[str, list[str]]:
        """Per variant, the failed graders an acceptance naming it leaves, "variant grader: why";
        ``whole``: an acceptance that also takes the retrieval (any acceptance of the variant
        acknowledges a missing grader), else of the answers alone (only beside a row it takes)."""
        answers = self.answers
        if answers is None:
            return {}
        missing = {(v, g) for v, g, _ in answers.missing}
        records = {(r["variant"], r["grader"]): r for r in answers.records}

        def problems(variant: str, grader: str) -> list[str]:
            row = records.get((variant, grader))
            if (variant, grader) in missing:
                return ["missing from this run"]
            return ["no row recorded"] if row is None else yardstick_problems(row)

        out: dict[str, list[str]] = {}
        for variant, graders in answers.gates.items():
            some_taken = any(not problems(variant, g) for g in graders)
            for grader, gate in graders.items():
                why = problems(variant, grader)
                if gate.passed or not why or ((variant, grader) in missing and (whole or some_taken)):
                    continue
                out.setdefault(variant, []).append(f"{variant} {grader}: {'; '.join(why)}")
        return out

    @property
    def acceptance_refusals(self) -> dict[str, str]:
        """The variants no acceptance of this run can take, with why (what `retrieval_to_accept`
        refuses whole or by variant): every variant of a run without an id, of a limited run, of one
        the report does not record (`unrecorded`), or of one that did not measure a variant that may
        be a vanished one renamed; a variant with errored questions or reranker fallbacks. The
        answer gates name no command for them (`judge_answer_run`'s ``refused``)."""
        variants = [*self.gates, *self.unmeasured]
        whole = ("the run has no id" if not self.run_id else "it is a limited run" if self.limited else
                 f"the report does not record it ({self.unrecorded})" if self.unrecorded else
                 "it did not measure a variant that may be a vanished one renamed" if self.maybe_renamed else "")
        if whole:
            return dict.fromkeys(variants, whole)
        return {v: "the variant has errored questions or reranker fallbacks (its numbers are not its configuration's)"
                for v in variants if v in self._not_its_configuration}

    def whole_acceptance_takes(self, variant: str) -> list[str]:
        """The failed answer graders of ``variant`` its whole acceptance (`accept_command`) takes
        with its retrieval, "variant grader": each with a row this run records that an
        acceptance takes (a measured answer regression accepted by name)."""
        taken = self._rows_taken
        return [f"{variant} {g}" for g, gate in (self.answers.gates.get(variant, {}) if self.answers else {}).items()
                if not gate.passed and (variant, g) in taken]

    @property
    def _rows_taken(self) -> set[tuple[str, str]]:
        """The (variant, grader) answer rows this run records that an acceptance naming the variant
        takes (no yardstick problem: `history.answers.answers_to_accept`)."""
        records = self.answers.records if self.answers is not None else []
        return {(r["variant"], r["grader"]) for r in records if not yardstick_problems(r)}

    def disclose_ways_out(self) -> None:
        """Make every retrieval gate's named command, and an answer gate's whole command, say all
        it takes, once the run's answers are judged (the retrieval gates are judged first): a
        variant no acceptance of this run takes (`acceptance_refusals`) names a later run, and
        why, instead; a retrieval gate's command says the failed answer graders it also takes
        (`whole_acceptance_takes`) and the removals it acknowledges; an answer gate's whole
        command (a variant that answered nothing) says when the variant's retrieval gate failed,
        which it accepts too. Called by `decide_run` after `judge_answer_run`."""
        refused = self.acceptance_refusals
        for variant, gate in list(self.gates.items()):
            command = accept_command(self.run_id, [variant])
            if command not in gate.message:
                continue
            if variant in refused:  # the hint's whole sentence, else the command where another names it
                later = f"a later run: no acceptance of this run takes it, {refused[variant]}"
                message = gate.message.replace(accept_hint(self.run_id, [variant]),
                                               f"the reference can only be {later}").replace(command, later)
            else:
                also = self._also_taken(variant)
                message = gate.message + (f"; that command also accepts {'; and '.join(also)}" if also else "")
            self.gates[variant] = replace(gate, message=message)
        for variant, graders in (self.answers.gates.items() if self.answers is not None else []):
            retrieval = self.gates.get(variant)
            command = accept_command(self.run_id, [variant])
            for grader, gate in list(graders.items()):
                if retrieval is not None and not retrieval.passed and f"({command})" in gate.message:
                    graders[grader] = replace(gate, message=f"{gate.message}; and its retrieval gate failed in "
                                              f"this run ({retrieval.state}), which that command accepts too")
        if self.answers is not None:
            self.answers.sync_rows()

    def _also_taken(self, variant: str) -> list[str]:
        """What the whole acceptance of ``variant`` takes beside its retrieval, each a phrase: the
        failed answer graders, the removals it acknowledges, and the looser answer tolerances its
        taken rows asked for."""
        also = []
        failed = self.whole_acceptance_takes(variant)
        if failed:
            also.append(f"answers whose gate failed: {', '.join(failed)}")
        removed = self.removals_acknowledged([variant])
        if removed:
            also.append(f"the removal of graders missing from this run: {', '.join(removed)}")
        if self.answers is not None:
            looser = self.answers.loosened_taken(variant, [g for v, g in self._rows_taken if v == variant])
            if looser:
                also.append(f"the answer tolerances its rows asked for, looser than their yardstick's "
                            f"({'; '.join(looser)})")
        return also

    @property
    def _acceptance_possible(self) -> bool:
        """Whether any acceptance of this run can be taken (see `acceptable_failures`)."""
        return bool(self.run_id) and not self.limited and not self.unrecorded and not self.maybe_renamed

    @property
    def _not_its_configuration(self) -> set[str]:
        """Variants with errored questions or reranker fallbacks: their numbers are not their
        configuration's, and `retrieval_to_accept` refuses an acceptance naming them."""
        blocked: set[str] = set()
        for count in ("n_errored", "n_rerank_fallback"):
            if count in self.summary:
                blocked |= {str(v) for v, n in zip(self.summary["variant"], self.summary[count]) if n and n > 0}
        return blocked

    @property
    def accept_command(self) -> str | None:
        """The command that accepts this run for every variant of `acceptable_failures`, its
        retrieval and its answers (None when there is none)."""
        failed = self.acceptable_failures
        return accept_command(self.run_id, failed) if failed else None

    @property
    def answers_accept_command(self) -> str | None:
        """The command that accepts the answers alone of every variant of
        `acceptable_answer_failures` whose retrieval gate passed (`--answers-only`: its retrieval
        reference stays; one whose retrieval failed too is `accept_command`'s), None when there is
        none."""
        whole = set(self.acceptable_failures)  # a property: taken once, not once per variant
        failed = [v for v in self.acceptable_answer_failures if v not in whole]
        return accept_command(self.run_id, failed, answers_only=True) if failed else None

    @property
    def gate_passed(self) -> bool:
        """Every variant's retrieval gate passed."""
        return all(g.passed for g in self.gates.values())

    @property
    def passed(self) -> bool:
        """The run's one verdict: every retrieval gate and every answer gate passed."""
        return self.gate_passed and (self.answers is None or self.answers.passed)

    @property
    def n_errored(self) -> int:
        return int(self.summary["n_errored"].sum()) if "n_errored" in self.summary else 0

    @property
    def n_rerank_fallback(self) -> int:
        return int(self.summary["n_rerank_fallback"].sum()) if "n_rerank_fallback" in self.summary else 0

    @property
    def eligible(self) -> bool:
        """Whether this run may be a later run's yardstick: a full run the report records
        (`unrecorded`: never a yardstick) whose verdict passed (retrieval and answers), with no
        errored question and no reranker that fell back on the first-stage order (its numbers
        are not the configuration's it claims)."""
        return (not self.limited and not self.unrecorded and self.passed and self.n_errored == 0
                and self.n_rerank_fallback == 0)

    def judged(self, variant: str, gate: GateResult, *, decided_by: str,
               previous: dict[str, Any] | None, history: Comparison, previous_gate: GateResult,
               reference: dict[str, Any] | None, reference_history: Comparison | None,
               reference_gate: GateResult | None) -> None:
        """Record ``variant``'s combined ``gate`` with both of its comparisons (the previous run's
        and the pinned reference's): every field a judged variant has, set in one place."""
        self.gates[variant] = gate
        self.decided_by[variant] = decided_by
        self.previous[variant], self.history[variant], self.previous_gates[variant] = previous, history, previous_gate
        self.reference[variant], self.reference_history[variant] = reference, reference_history
        self.reference_gates[variant] = reference_gate

    def gate_rows(self) -> list[dict[str, Any]]:
        """One row per (variant, comparison, metric); `against` is previous or reference."""
        return [{"variant": v, "state": g.state, **row} for v, g in self.gates.items() for row in g.rows]


def results_provenance(
    per_variant: Mapping[str, pd.DataFrame], *, tables: Mapping[str, str], questions_fingerprint: str,
    tuning_fingerprint: str | None = None, engine: str | None = None,
) -> dict[str, Any]:
    """The provenance of the results themselves: `variants`, each variant's configuration as
    recorded when it was ranked (the `variant_config` column), and `variant_code_versions`,
    the code that ranked it; after checking that every variant was ranked on its table, by
    ``engine`` when given (a partition ranked before a code or package change is stale),
    (`tables`: partition key -> table) and for
    the questions `questions_fingerprint`. The configuration that produced a partition
    travels with it: the current variants file may say something else."""

    configs: dict[str, Any] = {}
    code_versions: dict[str, str] = {}
    problems = []
    for variant, frame in per_variant.items():
        for column, expected in (("store_table", tables[variant]), ("questions_fingerprint", questions_fingerprint)):
            seen = sorted(set(frame[column].dropna().astype(str))) if column in frame else []
            if seen != [expected]:
                problems.append(f"variant {variant!r} was ranked with {column} {seen or 'unknown'}, "
                                f"this run has {expected!r}")
        raw = sorted(set(frame["variant_config"].dropna())) if "variant_config" in frame else []
        if len(raw) != 1:
            problems.append(f"variant {variant!r} has {len(raw)} recorded configurations (expected one)")
        else:
            configs[variant] = json.loads(raw[0])
            # tuned on the question set's tuning part (fusion, or an auto refusal threshold): this run's?
            if "tuned" in configs[variant] or "abstain_tuned" in configs[variant]:
                seen = sorted(set(frame["tuning_fingerprint"].dropna())) if "tuning_fingerprint" in frame else []
                if seen != [tuning_fingerprint]:
                    problems.append(f"variant {variant!r} was tuned on the tuning questions {seen or 'unknown'}, "
                                    f"this run's are {tuning_fingerprint!r}")
        versions = sorted(set(frame["code_version"].dropna())) if "code_version" in frame else []
        code_versions[variant] = versions[0] if len(versions) == 1 else "unknown"
        engines = sorted(set(frame["engine_identity"].dropna())) if "engine_identity" in frame else []
        if engine is not None and engines != [engine]:  # a stale partition: another code or package ranked it
            problems.append(f"variant {variant!r} was ranked by engine {engines or 'unknown'} (code, packages, "
                            f"database), this run's is {engine!r}")
    if problems:
        raise InconsistentInputs("the report's inputs do not belong together: " + "; ".join(problems)
                                 + ". Materialize ranked_results and variant_metrics for these variants again.")
    return {"variants": configs, "variant_code_versions": code_versions}


_LOADED: dict[str, str] = {}


def code_version(repo: Path | None = None) -> str:
    """The version of the code this process loaded: taken once, when this module is imported
    (a `git pull` during a run must not relabel what the loaded code computes); see
    `checkout_version` for what it says."""
    if repo is not None:
        return checkout_version(repo)
    if "version" not in _LOADED:
        _LOADED["version"] = checkout_version(PROJECT_ROOT)
    return _LOADED["version"]


def checkout_version(repo: Path) -> str:
    """The commit of the checkout (`git describe --always --abbrev=40`, the full id), with
    `-dirty` when the code that runs may not be that commit: a tracked file changed, an
    untracked or ignored `.py` file under the code paths (Python imports a package folder in
    preference to a module file, and `git describe --dirty` does not look at untracked files),
    or a file git was told not to look at (assume-unchanged, skip-worktree). 'unknown' outside
    a checkout. Nothing is cached for a dirty or unknown version."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            raise OSError(out.stderr.strip())
        return out.stdout

    try:
        commit = git("describe", "--always", "--abbrev=40").strip()
        paths = [p for p in CODE_PATHS if (repo / p).exists()]
        changed = git("status", "--porcelain", "--untracked-files=all", "--ignored", "--", *paths).splitlines()
        dirty = any(not line.startswith("!!") or line.rstrip().endswith(".py") for line in changed)
        hidden = any(line[:1].islower() or line[:1] == "S"
                     for line in git("ls-files", "-v", "--", *paths).splitlines())
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not commit:
        return "unknown"
    return f"{commit}-dirty" if dirty or hidden else commit


def statistics_key(per_variant: Mapping[str, pd.DataFrame], baseline: str) -> str:
    """A digest of everything the intervals and the baseline comparison depend on: the variants
    in order, the baseline, the answerable questions' qids and metric values, the metrics, and
    the source of `eval_pipeline.metrics.statistics` and the numpy and scipy versions and code (a change there
    invalidates every entry)."""

    metrics = sorted(set(INTERVAL_METRICS) | set(COMPARE_METRICS))
    digest = hashlib.sha256()
    digest.update(_STATISTICS_SOURCE.read_bytes())
    versions = package_versions(["numpy", "scipy"])  # read once per process, as the code digest beside it
    digest.update(f"numpy {versions['numpy']} scipy {versions['scipy']} "
                  f"{package_code_digest(['numpy', 'scipy'])}".encode())
    digest.update(repr((baseline, INTERVAL_METRICS, COMPARE_METRICS)).encode())
    for variant, frame in per_variant.items():
        columns = [c for c in ("qid", "answerable", *metrics) if c in frame.columns]
        digest.update(repr((variant, columns)).encode())
        digest.update(pd.util.hash_pandas_object(frame[columns], index=False).to_numpy().tobytes())
    return digest.hexdigest()


def run_statistics(
    per_variant: Mapping[str, pd.DataFrame], baseline: str, *, cache_dir: Path | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(intervals, comparison with the baseline variant).

    The resampling is seeded, so the result is a pure function of the per-question scores; with
    `cache_dir` it is stored under `statistics_key` and reused by a run whose scores are unchanged.
    That matters for a re-run with nothing changed: the 10,000-permutation tests and bootstraps
    were most of its report step (bench/warm_rerun.py).  An entry stores its own key and is
    used only when that key matches: an unreadable, foreign or misnamed file is recomputed.
    """
    key = statistics_key(per_variant, baseline) if cache_dir is not None else ""  # names an entry: none without a cache
    path = Path(cache_dir) / f"{key}.pkl" if cache_dir is not None else None
    stored = read_keyed(path, key) if path is not None else None
    if isinstance(stored, tuple) and len(stored) == 2 and all(isinstance(f, pd.DataFrame) for f in stored):
        return stored
    # deferred: metrics.statistics imports scipy (~1.3 s)
    from eval_pipeline.metrics.statistics import compare_to_baseline, metric_intervals  # noqa: PLC0415

    intervals = metric_intervals(per_variant, INTERVAL_METRICS)
    compared = baseline in per_variant and len(per_variant) > 1
    comparison = compare_to_baseline(per_variant, baseline, COMPARE_METRICS) if compared else pd.DataFrame()
    if path is not None:
        write_keyed(path, key, (intervals, comparison))
    return intervals, comparison


def _gate_unmeasured(verdict: RunVerdict, missing: Sequence[str], *, connection_string: str, run_id: str,
                     prefix: str, unreadable: str | None, errors: tuple[type[BaseException], ...],
                     established: Sequence[str]) -> None:
    """A not_compared gate for each variant of the variants file that has no metrics in this run
    but was measured before (a partition whose file is gone, a subset of partitions run on a
    fresh state dir against a shared history): judged on the variants it was given alone, the
    run would pass, and be recorded eligible, as if every variant had been judged. So does one
    never measured under its name while a variant vanished from the variants file and it is not
    `established` (accepted since): it may be that variant renamed, its history unjudged (the
    rule the measured variants follow). Else a variant never measured (a new one not
    materialized yet) is only "no results yet", as before."""
    for key in missing:
        last: str | None = None
        reason = unreadable
        if reason is None:
            try:
                last = recorded_run_of(connection_string, variant=key, before_run_id=run_id, prefix=prefix)
            except errors as exc:
                reason = f"{type(exc).__name__}: {exc}"
        renamed = last is None and reason is None and _may_be_a_rename(key, None, verdict.vanished, established)
        if last is None and reason is None and not renamed:
            continue
        was = (f"was measured before (run {last})" if last else
               f"may have a history (it could not be read: {reason})" if reason else
               f"may be {', '.join(map(repr, verdict.vanished))} (vanished from the variants file since) renamed")
        message = (f"FAILED (not compared): {key!r} is in the variants file and {was}, but this run has no metrics "
                   "of it, so nothing judged it: materialize its partition (the whole sweep) and the verdict again, "
                   "or remove it from the variants file")
        gate = GateResult(False, "not_compared", [], message, unjudged=reason is not None)
        verdict.unmeasured.append(key)
        if renamed:
            verdict.maybe_renamed[key] = list(verdict.vanished)
        verdict.judged(key, gate, decided_by="nothing (not measured in this run)", previous=None,
                       history=Comparison("unknown", reasons=[message]), previous_gate=gate, reference=None,
                       reference_history=None, reference_gate=None)


def _may_be_a_rename(variant: str, configuration: str | None, vanished: Sequence[str],
                     established: Sequence[str]) -> bool:
    """Whether ``variant`` (with ``configuration``, when measured) cannot be told from a variant
    that ``vanished`` from the variants file, renamed and changed: some vanished, and neither its
    name nor its configuration is ``established`` (known at the latest acceptance)."""
    return bool(vanished) and variant not in established and configuration not in established


def _measured_today(run: Mapping[str, Any], identity: Mapping[str, Any], incomplete: Sequence[str]) -> bool:
    """Whether a history record measured today's benchmark (``identity``, complete): compared
    directly; else its configuration is paired on today's questions."""
    return benchmark_identity(run["provenance"]) == identity and not incomplete


def _same_measurement(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two history records are one measurement: the same run, under the same name."""
    return (a["run_id"], a["variant"]) == (b["run_id"], b["variant"])


def _shown_against_recorded(gate: GateResult, previous_gate: GateResult, ever: dict[str, Any] | None,
                            variant: str, current: Mapping[str, float], tolerances: Mapping[str, float], *,
                            strict: bool, identity: Mapping[str, Any], incomplete: Sequence[str],
                            connection_string: str | None, run_id: str, prefix: str,
                            configuration: str | None = None, live: Mapping[str, str | None] | None = None,
                            measured: Mapping[str, Any] | None = None,
                            ) -> tuple[GateResult, GateResult, dict[str, Any] | None]:
    """(gate, previous gate, previous run): a gate failed ``not_compared`` (nothing comparable
    judged the variant, and no comparison failed to run) made the measured regression it is when a
    run that recorded the variant on today's benchmark (any, eligible or not, newest first: no
    yardstick by the verdict's rules, but its numbers are this variant's on these questions) shows
    a drop past a tolerance: the drop is shown, and accepting the run whole needs the variant
    named. The runs of its ``configuration`` under a name ``live`` (today's names, each with its
    configuration) does not have with it count as its own (a rename before any run of it was
    eligible, or the old setting moved to a new name). Each is compared with the tolerances it was
    judged with where they are stricter (`pinned_tolerances`), a metric it gated and today's gate
    does not included (``measured``: today's summary row of the variant): loosening the gate, or
    dropping a metric from it, in the same change must not hide the drop. Without a previous run, that run
    becomes the one the report shows. Otherwise all three unchanged; so when the history cannot be
    read here: the gate fails closed either way."""
    unchanged = gate, previous_gate, ever
    if not connection_string or gate.passed or gate.state != "not_compared" or gate.unjudged or incomplete:
        return unchanged
    try:
        recorded = recorded_measurements(connection_string, variant=variant, configuration=configuration, live=live,
                                         before_run_id=run_id, prefix=prefix)
    except _history_errors():
        return unchanged
    best = at_best(measured or {})  # of today's row: the same against every recorded run
    for run in recorded:
        if benchmark_identity(run["provenance"]) != identity or not run["metrics"]:
            continue
        pinned = pinned_tolerances(tolerances, [run])[0]
        today = {**{m: float(v) if is_real(v) else math.nan for m, v in (measured or {}).items() if m in pinned},
                 **current}
        gate_of = evaluate_gate(today, run["metrics"], {m: t for m, t in pinned.items() if m in today},
                                "comparable", strict=strict, at_best=best)
        if failed_measured(gate_of.passed, gate_of.state):
            shown = replace(gate_of, rows=[{**r, "against": "recorded"} for r in gate_of.rows], message=(
                f"{gate_of.message} (against run {run['run_id']}, which recorded it on this benchmark"
                f"{'' if run['variant'] == variant else ' as ' + repr(run['variant'])}: "
                f"{gate.message})"))
            if ever is None:
                return shown, shown, {**run, "accepted": False, "eligible": False}
            return shown, previous_gate, ever
    return unchanged


def _previous_yardstick(ever: Mapping[str, Any], prev: Mapping[str, Any] | None) -> tuple[str, Mapping[str, Any], str]:
    """The previous run as a yardstick: compared directly when it ran on today's benchmark (``prev``),
    else its configuration ranked on today's questions by today's engine."""
    return ("previous", ever, "direct" if prev is not None else "paired-same-engine")


@history_session()  # its lookups on one connection, called by the verdict asset or directly
def judge_run(
    per_variant: Mapping[str, pd.DataFrame],
    *,
    baseline: str,
    provenance: Mapping[str, Any],
    tolerances: Mapping[str, float],
    strict: bool,
    run_id: str,
    limited: bool,
    connection_string: str | None,
    answer_strict: bool = False,
    history_prefix: str = "eval",
    statistics_cache: Path | None = None,
    record: bool = True,
    sweep_keys: Sequence[str] | None = None,
    rank_reference: RankConfiguration | None = None,
) -> RunVerdict:
    """Score, compare and gate a run, then record it (all or nothing). It fails closed.

    Each variant is looked up in the history by its name and by its configuration
    (:func:`eval_pipeline.history.identity.configuration_fingerprint`: a rename with the same
    configuration keeps its history). It is judged against two yardsticks, and passes only
    when both comparisons pass:

    * its **previous** run: the latest eligible or accepted run of the same benchmark
      (compared directly: ``comparable``); when the benchmark changed (the questions, the
      labels, the scored subset, the scoring code), the configuration of its latest yardstick
      run of any benchmark, ranked on today's questions by ``rank_reference``
      (:mod:`eval_pipeline.verdict.paired`), on the same questions (``paired``); that needs
      today's engine to be the one that ranked it, else nothing can judge a code change made
      with the benchmark change;
    * its **pinned reference**, kept across benchmark changes: the latest run accepted for it,
      else its first eligible run; compared directly on the same benchmark, else its
      configuration is paired on today's questions (so a regression cannot pass in steps, nor
      around a question edit).

    ``not_compared`` (fails, strict or not, until a run is accepted,
    :func:`eval_pipeline.history.runs.accept_reference`): a comparison that cannot be made
    (another engine, another index, a configuration today's code refuses, an incomplete
    benchmark identity), or a new variant while a variant known since the last acceptance
    vanished from the variants file (a rename that changed the configuration too).
    ``first_run`` (passes): a brand-new project, or a genuinely new variant; ``strict`` fails
    both, since nothing judged them.

    The tolerances are the variants file's, never looser than those the yardsticks were
    judged with (:func:`pinned_tolerances`); so are ``strict`` and ``answer_strict`` (the
    answer gate's, decided by the caller with ``RunVerdict.policy``): switched off, they stay
    on until a run under the new setting is accepted. ``sweep_keys`` are the variants file's keys
    (default: this run's), recorded so later runs can tell a variant that vanished. Without a
    connection string there is no history: every variant is a ``first_run``. ``record=False``
    still reads the history but writes nothing. The run is recorded with its eligibility
    (``RunVerdict.eligible``). ``statistics_cache``: see ``run_statistics``.
    """
    summary = summarize(per_variant)
    intervals, comparison = run_statistics(per_variant, baseline, cache_dir=statistics_cache)
    keys = list(sweep_keys) if sweep_keys is not None else list(per_variant)
    provenance = {"scoring_protocol": scoring_protocol(SCORING_PROTOCOL), **provenance, "sweep_keys": keys}
    provenance.setdefault("engine_identity", engine_identity(provenance.get("database")))
    configurations = {v: configuration_fingerprint(provenance, v) for v in per_variant}
    provenance["configurations"] = {v: fp for v, fp in configurations.items() if fp is not None}
    # today's names, each with its configuration (None: not measured today, or none known): a measurement
    # of a configuration under a name not here with it is a retired name's (history.measurements)
    live = {k: configurations.get(k) for k in keys}
    asked = dict(tolerances)
    provenance["tolerances"] = asked
    provenance["effective_tolerances"] = {}
    verdict = RunVerdict(summary=summary, intervals=intervals, baseline_comparison=comparison, limited=limited,
                         provenance=provenance, run_id=run_id)
    identity = benchmark_identity(provenance)
    incomplete = [k for k, v in identity.items() if not (isinstance(v, str) and v.strip())]
    history_errors = _history_errors() if connection_string else ()
    unreadable: str | None = None  # why the history could not be read: every variant fails closed
    project: dict[str, Any] = {"has_yardstick": False, "has_runs": False, "known": [], "established": [],
                               "configurations_of": {}}
    if connection_string:
        try:
            project = project_history(connection_string, before_run_id=run_id, prefix=history_prefix)
        except history_errors as exc:
            unreadable = f"{type(exc).__name__}: {exc}"
    verdict.vanished = [k for k in project["known"] if k not in keys]
    asked_policy = {"strict": strict, "answer_strict": answer_strict}
    pinned = project.get("policy") or {}
    verdict.policy = {k: v or pinned.get(k, False) for k, v in asked_policy.items()}
    relaxed = [f"{k} true -> false" for k, v in asked_policy.items() if verdict.policy[k] and not v]
    provenance["gate_policy"], provenance["effective_gate_policy"] = asked_policy, dict(verdict.policy)
    strict = verdict.policy["strict"]
    ranked: dict[str, pd.DataFrame] = {}
    for _, row in summary.iterrows():
        variant = row["variant"]
        hint = accept_hint(run_id, [variant])
        ever = ref = prev = anchor = None
        moved: str | None = None
        heirs: list[str] = []
        recorded: str | None = None
        recorded_as: str | None = None  # the retired name its configuration was recorded under, if not its own
        if connection_string and unreadable is None:
            try:
                # its own name's history first; without a yardstick under its name, only a name that vanished
                # in this run with its configuration (a rename) is its history, never a live variant's nor a
                # retired one's
                own = previous_run(connection_string, variant=variant, before_run_id=run_id, prefix=history_prefix)
                if own is None and configurations[variant] is not None:
                    heirs = [n for n in verdict.vanished
                             if project["configurations_of"].get(n) == configurations[variant]]
                lookup = dict(variant=variant, configuration=configurations[variant] if heirs else None,
                              heirs=heirs or None, before_run_id=run_id, prefix=history_prefix)
                recorded = recorded_run_of(connection_string, variant=variant, heirs=heirs,
                                           configuration=configurations[variant] if heirs else None,
                                           before_run_id=run_id, prefix=history_prefix)
                configuration = configurations[variant]
                if recorded is None and configuration is not None:
                    # renamed before any run of it was eligible: recorded under the name that left, so not new
                    other = recorded_as_another(connection_string, configuration=configuration, live=live,
                                                before_run_id=run_id, prefix=history_prefix)
                    if other is not None:
                        recorded, recorded_as = other
                prev = previous_run(connection_string, identity=identity, **lookup)
                # of any benchmark: the last one judged; without heirs the lookup is `own`'s, not asked again
                latest = own if not heirs else previous_run(connection_string, **lookup)
                ever = prev or latest
                ref = reference_run(connection_string, identity=None, **lookup) if ever is not None else None
                lineage = False
                if ref is not None and not heirs and not ref.get("accepted"):
                    # renamed in an earlier run: its pinned reference is the one of its lineage (the
                    # variant's own name re-pins it only by an acceptance), not the rename run
                    for earlier in earlier_names(connection_string, variant=variant, before_run_id=run_id,
                                                 prefix=history_prefix):
                        older = reference_run(connection_string, identity=None, variant=earlier,
                                              before_run_id=run_id, prefix=history_prefix)
                        if older is not None:
                            ref, lineage = older, True
                            break
                if latest is not None:
                    # the reference the last run judged (of any benchmark: a question edit reverted must not
                    # skip the run in between) recorded; one found through an earlier name was accepted, if at
                    # all, for whatever variant has that name now, never since for this one
                    gates = (latest.get("provenance") or {}).get("gate")
                    moved = moved_reference(latest, ref, inherited=lineage, judged=gates.get(latest.get("variant"))
                                            if isinstance(gates, Mapping) else None)
                if prev is not None and ref is not None and not _same_measurement(ref, prev) and \
                        not _measured_today(ref, identity, incomplete):
                    # the first run on today's benchmark: the anchor of a reference paired below (looked up
                    # here, so an unreadable history leaves this variant unjudged, never without its anchor)
                    anchor = reference_run(connection_string, identity=identity, **lookup)
                    moved = moved or acceptance_conflict(anchor)  # the anchor's acceptances disagree too
            except history_errors as exc:
                unreadable = f"{type(exc).__name__}: {exc}"
        if heirs:
            verdict.inherits[variant] = heirs[0]
            provenance.setdefault("inherits", {})[variant] = heirs[0]  # recorded: the lineage the reference follows
        effective, loosened = pinned_tolerances(asked, [ever, ref], project.get("tolerances"))
        loosened += relaxed
        provenance["effective_tolerances"][variant] = effective
        current = {m: float(row[m]) for m in effective}
        if unreadable is not None:
            gate = previous_gate = GateResult(False, "not_compared", [], (
                f"FAILED (not compared): the history could not be read ({unreadable}): an unreadable history is not "
                "an empty one, so nothing can say whether this run regressed; fix the database (or its URL) and run "
                "again"), unjudged=True)
            ref_gate = None
        elif ever is None:  # no yardstick of any benchmark: the one fail-closed rule
            gate = previous_gate = without_yardstick(
                repr(variant), had_yardstick=None, recorded=recorded, project_has_history=project["has_runs"],
                vanished=verdict.vanished, strict=strict, hint=hint, recorded_as=recorded_as,
                new="a new variant (never recorded, and no vanished variant had its configuration)")
            ref_gate = None
        elif moved is not None:
            # the reference cannot be trusted, the previous run still can: a measured drop from it stays a
            # measured failure (accepting the run whole then needs the variant named); else not compared
            gate, previous_gate, ref_gate = _judge_against(
                variant, current, effective, strict, [_previous_yardstick(ever, prev)],
                provenance=provenance, scores=per_variant[variant], rank=rank_reference, ranked=ranked,
                reference_run_id=None, hint=hint, best=at_best(row))
            gate = not_compared_unless_measured(gate, f"{moved}: judged against it, a regression in steps could "
                                                       f"pass; {hint}")
            ref_gate = None
        elif prev is None and incomplete:
            gate = previous_gate = GateResult(False, "not_compared", [], (
                f"FAILED (not compared): this run's benchmark identity is incomplete ({', '.join(incomplete)} "
                f"missing or invalid): no run can be compared with it, nor paired by configuration; {hint}"))
            ref_gate = None
        else:
            same_ref = ref is not None and _same_measurement(ref, ever)
            yardsticks = [_previous_yardstick(ever, prev)]
            if ref is not None and not same_ref:
                direct = _measured_today(ref, identity, incomplete)
                yardsticks.append(("reference", ref, "direct" if direct else "paired"))
                if not direct and prev is not None:
                    # the pinned reference's configuration, ranked today, cannot see what changed in the
                    # code since: the first run on today's benchmark anchors that, on the same questions
                    if anchor is not None and anchor["run_id"] not in (prev["run_id"], ref["run_id"]):
                        yardsticks.append(("anchor", anchor, "direct"))
            elif ref is not None and prev is None and \
                    (ever.get("provenance") or {}).get("engine_identity") != provenance.get("engine_identity"):
                # the previous run is the pinned reference, on another benchmark and another engine: it cannot be
                # paired as the previous run (today's code would be on both sides), but as the reference it is,
                # by its configuration alone, as a reference that is another run would be
                yardsticks.append(("reference", ref, "paired"))
            gate, previous_gate, ref_gate = _judge_against(
                variant, current, effective, strict, yardsticks, provenance=provenance, scores=per_variant[variant],
                rank=rank_reference, ranked=ranked, reference_run_id=ref["run_id"] if ref is not None else None,
                hint=hint, best=at_best(row))
            if gate.state in MEASURED_STATES and ref is not None:
                reference_direct = (prev is not None) if same_ref else yardsticks[1][2] == "direct"
                drift = carried_drift(ever, ref, previous_gate, ref_gate, reference_direct=reference_direct)
                if drift is not None:
                    provenance.setdefault("drift", {})[variant] = {"reference": ref["run_id"], "metrics": drift}
                    if not reference_direct:
                        gate = _check_drift(gate, drift, effective, ref["run_id"], ever["run_id"])
                elif not reference_direct:
                    # the previous run recorded no drift from this reference for every gated metric: the
                    # code's steps since the reference cannot be counted across the benchmark change
                    gate = not_compared_unless_measured(gate, (
                        f"the benchmark changed since the pinned reference {ref['run_id']}, and the previous run "
                        f"{ever['run_id']} {_uncounted(ever, ref, previous_gate)}, so the code's changes since the "
                        f"reference cannot be counted across the change; {hint}"))
        def shown(gate: GateResult, previous_gate: GateResult, ever: dict[str, Any] | None):
            return _shown_against_recorded(gate, previous_gate, ever, variant, current, effective, strict=strict,
                                           identity=identity, incomplete=incomplete,
                                           connection_string=connection_string, run_id=run_id, prefix=history_prefix,
                                           configuration=configurations[variant], live=live,
                                           measured={m: row[m] for m in row.index if isinstance(m, str)})

        if unreadable is None:  # nothing comparable decided it: a drop from a run that recorded it is still shown
            gate, previous_gate, ever = shown(gate, previous_gate, ever)
        if unreadable is None and ever is not None and \
                _may_be_a_rename(variant, configurations[variant], verdict.vanished, project["established"]):
            # added since the last acceptance while another vanished: it may be that variant renamed, whose
            # yardsticks are not its own. Judged against its own first (above): a measured drop stays a measured
            # failure, the suspicion added; else nothing can judge it
            rename = (f"{variant!r} was added since the last acceptance and {', '.join(map(repr, verdict.vanished))} "
                      "vanished from the variants file since: a rename done as an addition and a removal cannot be "
                      "told from a new variant, so nothing can judge it against the vanished variant's yardsticks; "
                      f"{hint} (accepting a run without the vanished variants acknowledges their removal)")
            if not gate.passed and gate.state == "not_compared":  # already not compared: both reasons said
                gate = replace(gate, message=f"{gate.message}; also a possible rename: {rename}")
            else:  # a pass made not compared: a recorded run's drop is shown as for any other
                gate = not_compared_unless_measured(gate, rename, also="a possible rename")
                gate, previous_gate, ever = shown(gate, previous_gate, ever)
        fell_back = int(row.get("n_rerank_fallback", 0) or 0)
        if fell_back and gate.passed:
            # an LLM reranker whose answer named no candidate kept the first stage's order: the numbers
            # are another configuration's, so nothing judged this one (never cached: a run asks again)
            gate = replace(gate, passed=False, message=(
                f"FAILED: the reranker fell back on the first-stage order for {fell_back} of "
                f"{len(per_variant[variant])} questions, so these are not {variant!r}'s numbers and nothing judged "
                f"its configuration; fallbacks are never cached: run again once the reranker answers "
                f"({gate.message})"))
        if loosened:
            verdict.loosened[variant] = loosened
            gate = replace(gate, message=f"{gate.message} (the gate was loosened since its yardstick: "
                           f"{'; '.join(loosened)}; judged with the stricter settings until a run under the new "
                           "ones is accepted)")
        gate = with_exact_command(gate, run_id, variant)
        verdict.judged(variant, gate, decided_by=_decided_by(gate), previous=ever,
                       history=compare_provenance(provenance, ever, variant), previous_gate=previous_gate,
                       reference=ref, reference_history=None if ref is None else compare_provenance(
                           provenance, ref, variant), reference_gate=ref_gate)
    if connection_string:
        _gate_unmeasured(verdict, [k for k in keys if k not in per_variant], connection_string=connection_string,
                         run_id=run_id, prefix=history_prefix, unreadable=unreadable, errors=history_errors,
                         established=project["established"])
    if connection_string and record:
        record_verdict(verdict, connection_string, run_id=run_id, per_variant=per_variant,
                       history_prefix=history_prefix)
    return verdict


ACCEPT_HINT = "accept a run to make it the reference: python -m eval_pipeline.history accept RUN_ID"
GENERIC_ACCEPT_COMMAND = "python -m eval_pipeline.history accept RUN_ID"


def accept_hint(run_id: str, variants: Sequence[str]) -> str:
    """What a not-compared gate tells the user: the exact command for this run and variant."""
    return (f"to make this run the reference once its numbers are intended and the report has recorded it: "
            f"{accept_command(run_id, variants)}")


def with_exact_command(gate: GateResult, run_id: str, variant: str, *, answers_only: bool = False) -> GateResult:
    """``gate`` with the generic ``accept RUN_ID`` of a gate's message made the exact command (an
    answer gate's: the answers alone, where the run has answer rows of the variant to accept)."""
    if GENERIC_ACCEPT_COMMAND not in gate.message:
        return gate
    command = accept_command(run_id, [variant], answers_only=answers_only)
    return replace(gate, message=gate.message.replace(GENERIC_ACCEPT_COMMAND, command))


def _history_errors() -> tuple[type[BaseException], ...]:
    """The errors of a history that cannot be read (a refused connection, a permission, a damaged
    table): the verdict fails closed on them, it never takes them for an empty history."""
    return (DatabaseError, psycopg.Error, OSError)


def _decided_by(gate: GateResult) -> str:
    return {"comparable": "history: its previous run and pinned reference on the same benchmark",
            "paired": "paired: its reference configurations ranked on today's questions",
            "first_run": "nothing (a first run)", "not_compared": "nothing (not compared)"}.get(gate.state, gate.state)


def pinned_tolerances(asked: Mapping[str, float], yardsticks: Sequence[Mapping[str, Any] | None],
                      project: Mapping[str, tuple[float, str]] | None = None) -> tuple[dict[str, float], list[str]]:
    """The tolerances a variant is judged with: the variants file's (``asked``), but never looser
    than those its yardstick runs were judged with: a metric's tolerance raised, or a gated
    metric dropped, in the same change as a regression would let it through. A yardstick run
    recorded the tolerances it was judged with (``effective_tolerances``); an accepted run
    stands for the tolerances it asked for (accepting it accepts its gate too). ``project``: the
    project's gate in force (metric -> (tolerance, run id), ``project_history``), which binds a
    variant new today as well. Returns (tolerances, what was loosened)."""
    effective = dict(asked)
    loosened: list[str] = []
    pinned_runs: list[Mapping[str, Any]] = [
        {"run_id": run_id, "accepted": True, "provenance": {"tolerances": {metric: value}}}
        for metric, (value, run_id) in (project or {}).items()]
    for run in [*yardsticks, *pinned_runs]:
        provenance = (run or {}).get("provenance") or {}
        recorded = provenance.get("tolerances")
        judged_with = (provenance.get("effective_tolerances") or {}).get((run or {}).get("variant"))
        if not run or not run.get("accepted"):
            recorded = judged_with if isinstance(judged_with, Mapping) else recorded
        if run is None or not isinstance(recorded, Mapping):  # no run: nothing recorded
            continue
        for metric, value in recorded.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if metric not in effective or value < effective[metric] - EPSILON:
                was = "not gated" if metric not in asked else f"{asked[metric]:g}"
                note = f"{metric} {value:g} -> {was} (run {run['run_id']})"
                if note not in loosened:
                    loosened.append(note)
                effective[metric] = min(value, effective.get(metric, value))
    return effective, loosened


def _judge_against(variant: str, current: Mapping[str, float], tolerances: Mapping[str, float], strict: bool,
                   yardsticks: Sequence[tuple[str, Mapping[str, Any], str]], *, provenance: Mapping[str, Any],
                   scores: pd.DataFrame, rank: RankConfiguration | None, ranked: dict[str, pd.DataFrame],
                   reference_run_id: str | None, hint: str = "", best: Collection[str] = (),
                   ) -> tuple[GateResult, GateResult, GateResult | None]:
    """(combined, previous, reference) gates of a variant against its yardsticks, each
    (against, run, how): ``direct`` on its recorded metrics (the same benchmark), ``paired``
    with its configuration ranked on today's questions (``paired-same-engine``: only if
    today's engine ranked it). ``not_compared`` when any cannot be made. ``best``: today's
    metrics NaN because the run is at their best (``evaluate_gate``'s ``at_best``)."""
    gates: dict[str, GateResult] = {}
    problems = []
    failed_ranking = False  # a comparison that failed (not one that cannot be made): the variant is unjudged
    for against, run, how in yardsticks:
        if how == "direct":
            gates[against] = evaluate_gate(current, run["metrics"], tolerances, "comparable", strict=strict,
                                           at_best=best)
            continue
        paired = paired_reference(run, variant=variant, provenance=provenance, current_scores=scores,
                                  engine=provenance["engine_identity"] if how == "paired-same-engine" else None,
                                  rank=rank, ranked=ranked)
        if paired.scores is None:
            problems.append(paired.why)
            failed_ranking |= paired.failed
            continue
        metrics = summarize({variant: paired.scores}).iloc[0]
        gate = evaluate_gate(current, {m: float(metrics[m]) for m in tolerances}, tolerances, "paired", strict=strict,
                             at_best=best)
        worse, tied, better = paired_counts(scores, paired.scores)
        gates[against] = replace(gate, message=(f"{gate.message} ({paired.why}; {PRIMARY_METRIC} question by question: "
                                                f"{worse} worse, {tied} tied, {better} better)"))
    if problems:
        # A comparison that was made and failed is a measured regression, whatever else could not
        # be compared: it is reported (and recorded) as such, never hidden as "not compared", so
        # accepting the run needs the variant named.
        measured = [(against, gate) for against, gate in gates.items() if not gate.passed]
        unmade = f"{'; '.join(problems)} (that comparison could not be made)"
        if measured:
            rows = [{**row, "against": row.get("against", against)} for against, gate in measured for row in gate.rows]
            message = "; ".join(f"against the {against}: {gate.message}" for against, gate in measured)
            # the state of a comparison that measured a drop, when one did (one that only lacks a metric in its
            # yardstick is not_compared): the recorded state decides whether accepting the run whole is refused
            state = next((gate.state for _, gate in measured if failed_measured(gate.passed, gate.state)),
                         measured[0][1].state)
            failed = GateResult(False, state, rows, f"{message}; and {unmade}")
            return failed, gates.get("previous", failed), gates.get("reference")
        failed = GateResult(False, "not_compared", [], (
            "FAILED (not compared): a yardstick of this variant measured another benchmark and no paired "
            f"comparison could be made: {'; '.join(problems)}; "
            + (f"run again to judge it (accepting this run needs the variant named); {hint}" if failed_ranking
               else hint or ACCEPT_HINT)), unjudged=failed_ranking)
        return failed, failed, None
    previous, reference = gates["previous"], gates.get("reference")
    combined = combine_gates(previous, reference, reference_run_id=reference_run_id)
    if "anchor" in gates:
        anchor, run = gates["anchor"], next(r for against, r, _ in yardsticks if against == "anchor")
        combined = replace(combined, passed=combined.passed and anchor.passed,
                           rows=combined.rows + [{**r, "against": "anchor"} for r in anchor.rows],
                           message=f"{combined.message}; against the first run on this benchmark {run['run_id']}: "
                                   f"{anchor.message}")
    paired_any = any(how != "direct" for _, _, how in yardsticks)
    state = "comparable" if yardsticks[0][2] == "direct" else "paired"
    if paired_any and state == "comparable":  # the previous run on this benchmark, the reference paired
        combined = replace(combined, message=combined.message + " (the pinned reference measured another "
                           "benchmark: its configuration was ranked on today's questions)")
    return replace(combined, state=state), previous, reference


def carried_drift(previous: Mapping[str, Any], reference: Mapping[str, Any], previous_gate: GateResult,
                  reference_gate: GateResult | None, *, reference_direct: bool) -> dict[str, float] | None:
    """How far this run's metrics are from its pinned reference's (metric -> delta), as a ledger
    carried run to run: exact when the reference measured today's benchmark (``reference_direct``);
    else the previous run's recorded drift plus today's step from the previous run. A paired
    ranking of the reference's configuration runs today's code, so it cannot see a regression
    the code made before the benchmark changed; the ledger does (two code steps of 0.03 around
    a question edit are 0.06 from the reference). None when the previous run recorded no drift
    against this reference (a history from before the ledger), or none for a gated metric
    (gated since the ledger's last entry): its drift is unknown, not zero."""
    if reference_direct:
        return _steps(reference_gate or previous_gate)
    if previous["run_id"] == reference["run_id"]:
        carried: Mapping[str, Any] = {}
    else:
        entry = _ledger_entry(previous)
        if not isinstance(entry, Mapping) or entry.get("reference") != reference["run_id"]:
            return None
        carried = entry.get("metrics") or {}
    steps = _steps(previous_gate)
    if previous["run_id"] != reference["run_id"] and any(m not in carried for m in steps):
        return None  # a gated metric the ledger never carried (gated since): its drift is unknown, not zero
    return {m: float(carried.get(m, 0.0)) + step for m, step in steps.items()}


def _uncounted(previous: Mapping[str, Any], reference: Mapping[str, Any], previous_gate: GateResult) -> str:
    """Why ``previous``'s drift ledger cannot be carried from ``reference`` (`carried_drift` gave None),
    in words that hold for this history: no ledger, another reference's, or gated metrics missing
    from it (gated since that run, or undefined in it because that run was at its best, so it had no
    number to carry)."""
    entry = _ledger_entry(previous)
    if not isinstance(entry, Mapping):
        return "recorded no drift from it (recorded by an older version, or its gate never reached the reference)"
    if entry.get("reference") != reference["run_id"]:
        return f"recorded its drift from another reference ({entry.get('reference')})"
    carried = entry.get("metrics") or {}
    best = at_best(previous.get("metrics") or {})
    why = [f"{m} undefined in it (that run was at its best)" if m in best else f"{m} gated since"
           for m in _steps(previous_gate) if m not in carried]
    return f"recorded no drift of {', '.join(why)}"


def _ledger_entry(previous: Mapping[str, Any]) -> Any:
    """``previous``'s drift ledger entry for its variant, as recorded (anything: checked by the caller)."""
    return ((previous.get("provenance") or {}).get("drift") or {}).get(previous.get("variant"))


def _steps(gate: GateResult) -> dict[str, float]:
    """The change ``gate`` measured per metric (a row without a delta measured none)."""
    return {r["metric"]: r["delta"] for r in gate.rows if r.get("delta") is not None}


def _check_drift(gate: GateResult, drift: Mapping[str, float], tolerances: Mapping[str, float], reference_run_id: str,
                 previous_run_id: str) -> GateResult:
    """The gate, failed when the drift carried from the pinned reference exceeds a tolerance."""
    rows = [{"metric": m, "actual": math.nan, "yardstick": None, "delta": drift[m], "tolerance": tolerances[m],
             "passed": within_tolerance(drift[m], tolerances[m]), "against": "reference (carried)"}
            for m in tolerances if m in drift]
    failures = [r for r in rows if not r["passed"]]
    if not failures:
        return replace(gate, rows=gate.rows + rows)
    why = "; ".join(f"{r['metric']} {fmt_number(r['delta'], 4, signed=True)} (tolerance {r['tolerance']:g})"
                    for r in failures)
    return replace(gate, passed=False, rows=gate.rows + rows, message=(
        f"FAILED: drifted beyond tolerance from the pinned reference {reference_run_id}, counted run to run "
        f"through {previous_run_id} across the benchmark change: {why}; {gate.message}"))


def record_verdict(verdict: RunVerdict, connection_string: str, *, run_id: str,
                   per_variant: Mapping[str, pd.DataFrame], history_prefix: str = "eval") -> None:
    """Record a judged run in the history with its eligibility and, per variant, the gate
    state and the runs it was compared with (all or nothing). Never a verdict decided as not
    recorded (`RunVerdict.unrecorded`): it told the user no acceptance of the run can be taken,
    which a record would make false (a ValueError names the run and the setting)."""
    if verdict.unrecorded:
        raise ValueError(f"run {run_id}'s verdict was decided for a run the report does not record "
                         f"({verdict.unrecorded}): it is not recorded")
    failed = sorted(v for v, g in verdict.gates.items() if not g.passed)
    gate = {v: {"state": g.state, "passed": g.passed, "unjudged": g.unjudged,
                # not measured, and maybe a vanished variant renamed: accepting this run would acknowledge
                # that variant's removal with nothing of its lineage judged (accept_reference refuses)
                **({"maybe_renamed_from": verdict.maybe_renamed[v]} if v in verdict.maybe_renamed else {}),
                "decided_by": verdict.decided_by.get(v, ""),
                "previous_run_id": (verdict.previous[v] or {}).get("run_id"),
                "reference_run_id": (verdict.reference[v] or {}).get("run_id")} for v, g in verdict.gates.items()}
    record_run(connection_string, run_id=run_id, provenance={**verdict.provenance, "gate_failed": failed, "gate": gate},
               summary=verdict.summary, per_query=per_variant, intervals=verdict.intervals, limited=verdict.limited,
               eligible=verdict.eligible, prefix=history_prefix)


def combine_gates(previous: GateResult, reference: GateResult | None, *, reference_run_id: str | None) -> GateResult:
    """One verdict from the two comparisons: passes only when both pass; rows tagged with
    `against` (previous | reference); the state is the previous comparison's. `reference`
    None: no separate reference (none yet, or it is the previous run itself)."""
    rows = [{**r, "against": "previous"} for r in previous.rows]
    if reference is None:
        note = " (the previous run is also the pinned reference)" if reference_run_id else ""
        return GateResult(previous.passed, previous.state, rows, previous.message + note)
    rows += [{**r, "against": "reference"} for r in reference.rows]
    message = (f"against the previous run: {previous.message}; against the reference run {reference_run_id}: "
               f"{reference.message}")
    return GateResult(previous.passed and reference.passed, previous.state, rows, message)


code_version()  # taken at import: see code_version
