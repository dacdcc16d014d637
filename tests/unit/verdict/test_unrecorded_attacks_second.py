"""Second review of 9e25a61 and daf27e8 (`RunVerdict.unrecorded`: a run whose report does not record it offers no
acceptance of it; `render_run` does not record such a verdict, `record_verdict` refuses one; the console's and
the retrieval gates' offers say "once ... the report has recorded it"; op_config processes another asset's
settings by Dagster's rules). Direct calls on the embedded Postgres (``embedded_pg``), each run judged as the
verdict asset judges it (`decide_run`'s order: judge_run, run_id, unrecorded, the answers with the refusals,
disclose_ways_out). Not repeated: tests/unit/verdict/test_unrecorded_attacks.py and
tests/orchestration/test_unrecorded_attacks_job.py.

Holes (each was a strict xfail confirmed failing on its own assertion with --runxfail, a passing control beside
each; all three closed since by the lead, their tests now plain: 1. the answer gates' and the retrieval gates'
generic ways out say "once the report has recorded it"; 2. `record_answers` refuses an answer verdict decided
as not recorded (`AnswerVerdict.unrecorded`, set by decide_run from the run's); 3. `eligible` is False for an
unrecorded verdict):

1. A WAY OUT OFFERED THAT CANNOT BE TAKEN, without the hedge daf27e8 promises. The answer gates' messages name
   the exact command (`accept RUN --variant V --answers-only`, or the whole command for a removed grader) from
   gates/answers.py:69 (`_ACCEPT`, "accept a run of it once its numbers are intended (...)") and the missing-grader
   text of verdict/answers.py:166-169, made exact by `_name_ways_out` (verdict/answers.py:304/309 via
   `with_exact_command`, verdict/retrieval.py:787-793). Neither says it needs the report to have recorded the
   run, unlike the retrieval gates (`accept_hint`, retrieval.py:781-784), the console and the checks' `accept`
   (history/runs.py:1088). For a verdict decided with record_history on that no report recorded (the verdict
   materialized alone, a report that failed after it: hC's hole 2 situations), the answer check's
   "deterministic message" / "static message" metadata and results.md offer a command `accept` refuses ("no
   recorded run"); README.md:995 says "Every offered command says it works once the report has recorded the run".
   `test_hole_answer_gate_messages_offer_a_command_without_saying_it_needs_the_record[...]` (two texts).
2. A REFUSAL OF SOMETHING THAT WORKS (the guard has a twin that is missing). daf27e8 makes `record_verdict`
   refuse a verdict decided as not recorded, so "no acceptance of this run takes it" stays true; its other half,
   `record_answers(verdict.answers, ...)` (verdict/answers.py:386-392, what render_run calls next, and the
   documented library path "a run with no run row but answer rows ... has its answers accepted alone",
   history/answers.py:703-706), records the same unrecorded run's answer rows without a word, and then
   `accept RUN --variant V --answers-only` TAKES them: the verdict's refusal is false. No asset path reaches it
   (render_run skips both, reporting/run.py:156-162); it is the library's. The answer verdict was judged with the
   refusals (`judge_answer_run(refused=...)`) and could refuse as record_verdict does.
   `test_hole_record_answers_of_an_unrecorded_verdict_makes_its_answers_acceptable`.
3. TEXT THAT SAYS SOMETHING FALSE ABOUT RECORDING (low). `RunVerdict.eligible` ("whether this run may be a later
   run's yardstick", verdict/retrieval.py:322-326) is True for a verdict that knows no report will record the run,
   and the verdict asset shows it as its "eligible" metadata (reporting/run.py:306): the run can never be a
   yardstick. `test_hole_an_unrecorded_verdict_says_it_is_eligible_as_a_yardstick`.

Held (plain tests): op_config (assets/run.py:13) gives exactly what Dagster hands the op itself for every
config class the assets read through it: the demo's run.yaml, the tests' tiny_job_config, a graders list with
an enum, nested compare_with, `{env: VAR}`, a section empty or absent (`config: null` Dagster refuses, so it
never reaches op_config); a verdict pickled before 9e25a61 (no `unrecorded` in its state) reads as recorded,
offers its command, is recorded by `record_verdict` and accepted; `judge_run(record=True)` (the library's
one-call path) never meets `record_verdict`'s refusal and its run is accepted; an unrecorded verdict's answer
texts name no command of the run (each failed one says "a later run"); once recorded, the answer gate's offer
is taken.
"""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from tests.unit.verdict import test_unrecorded_run as base
from tests.unit.verdict.test_answer_accept_attacks import TOL, _frame

pytestmark = pytest.mark.integration

CHANGED_YARDSTICK = {"deterministic": {"pass_rate": 0.9, "yardstick": "deterministic:v2"}}


judge = base.judge  # the base file's: each run judged as the verdict asset judges it


def _accepts(uri: str, run_id: str, variants: list[str] | None, *, answers_only: bool = False) -> str:
    """'' when `accept run_id --variant ...` (the CLI's and the accept_reference job's call) takes it, else why."""
    from eval_pipeline.history.answers import accept_run

    try:
        accept_run(uri, run_id, variants=variants, answers_only=answers_only, note="test", accepted_by="t")
    except ValueError as exc:
        return str(exc) or type(exc).__name__
    return ""


def _answer_checks(verdict) -> dict[str, dict]:
    from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks

    return {k: m for k, (_, m) in answer_gate_checks(answer_check_output(verdict), list(verdict.gates)).items()}


def _answer_messages(verdict) -> list[str]:
    return [g.message for graders in verdict.answers.gates.values() for g in graders.values()]


# the two answer texts that name a command of this run: a measurement whose yardstick changed (gates/answers.py:69),
# and a grader missing from the run beside its answer rows (verdict/answers.py:167-169)
SCENARIOS = {
    "yardstick_changed": ({"a": 0.9, "b": 0.9}, {"a": 0.9, "b": CHANGED_YARDSTICK}, "b"),
    "grader_missing": ({"a": 0.9, "b": {"deterministic": 0.9, "static": 0.9}}, {"a": 0.9, "b": 0.9}, "b"),
}


# --------------------------------------------------------------------------------------------
# 1. the answer gates' offers, for a run the report has not recorded (yet)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_hole_answer_gate_messages_offer_a_command_without_saying_it_needs_the_record(judge, scenario):
    before, after, variant = SCENARIOS[scenario]
    judge("r0", {"a": 40, "b": 40}, before)
    # decided with record_history on (the default), then no report recorded it: the verdict alone, a failed report
    verdict, _ = judge("r1", {"a": 40, "b": 40}, after, recorded=True, record=False)
    offering = [m for m in _answer_messages(verdict) if "eval_pipeline.history accept r1" in m]
    assert offering, _answer_messages(verdict)  # the gate names this run's command...
    assert "no recorded run" in _accepts(judge.uri, "r1", [variant], answers_only=True)  # ...which accept refuses
    check = _answer_checks(verdict)[variant]
    shown = [str(v) for k, v in check.items() if k.endswith("message") and "accept r1" in str(v)]
    assert shown, check  # and the answer check shows it in the UI beside its hedged `accept`
    # README.md:995: "Every offered command says it works once the report has recorded the run"
    assert all("recorded" in m for m in offering), offering


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_control_the_answer_checks_accept_and_the_retrieval_hint_say_they_need_the_record(judge, scenario):
    before, after, variant = SCENARIOS[scenario]
    judge("r0", {"a": 40, "b": 40}, before)
    verdict, _ = judge("r1", {"a": 40, "b": 40}, after, recorded=True, record=False)
    check = _answer_checks(verdict)[variant]
    assert "the report has recorded this run" in check.get("accept", ""), check
    # a retrieval gate that offers a command says it (accept_hint): a strict first run of a new variant
    from eval_pipeline.verdict.retrieval import accept_hint

    assert "and the report has recorded it: " in accept_hint("r1", ["c"])


def test_held_once_recorded_the_answer_gates_command_is_taken(judge):
    """The same offer is true once the report records the run (what the hedge is for)."""
    judge("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict, _ = judge("r1", {"a": 40, "b": 40}, {"a": 0.9, "b": CHANGED_YARDSTICK})
    assert verdict.answers_accept_command == "python -m eval_pipeline.history accept r1 --variant b --answers-only"
    assert _accepts(judge.uri, "r1", ["b"], answers_only=True) == ""


def test_held_an_unrecorded_verdicts_answer_texts_name_no_command_of_the_run(judge):
    for scenario, (before, after, variant) in SCENARIOS.items():
        judge(f"{scenario}-r0", {"a": 40, "b": 40}, before)
        verdict, _ = judge(f"{scenario}-r1", {"a": 40, "b": 40}, after, recorded=False)
        messages = _answer_messages(verdict)
        assert not any(f"accept {scenario}-r1" in m for m in messages), messages
        failed = [g.message for g in verdict.answers.gates[variant].values() if not g.passed]
        assert failed and all("a later run: no acceptance of this run takes it, the report does not record it "
                              "(report.record_history: false)" in m for m in failed), failed
        assert "accept" not in _answer_checks(verdict)[variant]


# --------------------------------------------------------------------------------------------
# 2. record_answers: the twin of record_verdict's refusal
# --------------------------------------------------------------------------------------------


def test_hole_record_answers_of_an_unrecorded_verdict_makes_its_answers_acceptable(judge):
    from eval_pipeline.verdict.answers import record_answers
    from eval_pipeline.verdict.retrieval import record_verdict

    judge("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict, per_variant = judge("r1", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.5}, recorded=False)
    assert verdict.answers_accept_command is None  # the verdict: no acceptance of this run takes it
    with pytest.raises(ValueError, match="it is not recorded"):  # daf27e8: the retrieval record refuses it
        record_verdict(verdict, judge.uri, run_id="r1", per_variant=per_variant)
    refused = ""
    try:  # the answers' record of the same verdict (what render_run calls next; the library's answers-only path)
        record_answers(verdict.answers, judge.uri, "r1", run_eligible=verdict.eligible)
    except ValueError as exc:
        refused = str(exc)
    taken = _accepts(judge.uri, "r1", ["b"], answers_only=True)
    # what the verdict said must hold: either the record is refused, or accept refuses the run
    assert refused or taken != "", "record_answers recorded r1's answers and accept --answers-only took them"


def test_control_record_answers_of_a_recorded_verdict_is_the_documented_answers_only_path(judge):
    from eval_pipeline.verdict.answers import record_answers

    judge("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict, _ = judge("r1", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.5}, recorded=True, record=False)
    assert verdict.answers_accept_command == "python -m eval_pipeline.history accept r1 --variant b --answers-only"
    record_answers(verdict.answers, judge.uri, "r1", run_eligible=verdict.eligible)
    assert _accepts(judge.uri, "r1", ["b"], answers_only=True) == ""


# --------------------------------------------------------------------------------------------
# 3. eligible
# --------------------------------------------------------------------------------------------


def test_hole_an_unrecorded_verdict_says_it_is_eligible_as_a_yardstick(judge):
    from eval_pipeline.history.runs import previous_run
    from eval_pipeline.reporting.run import verdict_metadata

    judge("r0", {"a": 40})
    verdict, _ = judge("r1", {"a": 40}, recorded=False)
    assert verdict.passed and previous_run(judge.uri, variant="a")["run_id"] == "r0"  # r1 is never a yardstick
    assert verdict_metadata(verdict, "a")["eligible"] is False, "the verdict asset's metadata: eligible True"


def test_control_a_recorded_passing_run_is_eligible_and_is_the_next_yardstick(judge):
    from eval_pipeline.history.runs import previous_run
    from eval_pipeline.reporting.run import verdict_metadata

    judge("r0", {"a": 40})
    verdict, _ = judge("r1", {"a": 40})
    assert verdict_metadata(verdict, "a")["eligible"] is True
    assert previous_run(judge.uri, variant="a")["run_id"] == "r1"


# --------------------------------------------------------------------------------------------
# held: op_config against what Dagster hands the op itself
# --------------------------------------------------------------------------------------------


def _as_dagster_gives(cls, section):
    """The config object Dagster hands an op of ``cls`` for the run config ``{"ops": {op: section}}``."""
    from dagster import job, op

    got = {}

    def probe(config):
        got["config"] = config

    probe.__annotations__ = {"config": cls}  # the class itself (this module's annotations are strings)
    probe = op(name="probe")(probe)

    @job(name="probe_job")
    def probe_job():
        probe()

    ops = {"probe": section} if section is not None else {}
    result = probe_job.execute_in_process(run_config={"ops": ops})
    assert result.success
    return got["config"]


def _op_config(cls, section):
    from assets.run import op_config

    ops = {"probe": section} if section is not None else {}
    return op_config(SimpleNamespace(run=SimpleNamespace(run_config={"ops": ops})), "probe", cls)


def _sections():
    import yaml

    from assets import CorpusConfig, FindingsConfig, QuestionSetConfig, ReportConfig
    from assets.answer_quality import AnswersConfig, GoldenPromptsConfig, GradedAnswersConfig
    from assets.ranking import RankingConfig
    from assets.store import StoreConfig
    from eval_pipeline.common.state import PROJECT_ROOT
    from tests.integration.cli import tiny_job_config

    demo = yaml.safe_load((PROJECT_ROOT / "eval_pipeline/demo_data/run.yaml").read_text())["ops"]
    tiny = tiny_job_config(PROJECT_ROOT / "results-hd")["ops"]
    classes = {"corpus_snapshot": CorpusConfig, "question_set": QuestionSetConfig, "pgvector_store": StoreConfig,
               "report": ReportConfig}
    cases = [(QuestionSetConfig, demo["question_set"])]
    cases += [(classes[op], section) for op, section in tiny.items()]
    cases += [(GradedAnswersConfig, {"config": {"graders": ["deterministic", "static", "judge"], "max_tokens": 9}}),
              (GradedAnswersConfig, {"config": {}}), (GoldenPromptsConfig, {"config": {"source": "none"}}),
              (AnswersConfig, {"config": {"generator": "llm", "max_tokens": None}}),
              (RankingConfig, {"config": {"miss_k": 5, "workers": 2}}),
              (FindingsConfig, {"config": {"grade_holes": True}}),
              (QuestionSetConfig, {"config": {"compare_with": None, "limit": 3}}),
              (QuestionSetConfig, {"config": {"compare_with": {"source": "file", "path": "x.jsonl"}}}),
              (ReportConfig, {"config": {"record_history": {"env": "HD_RECORD_HISTORY"}}}),
              (ReportConfig, {}), (ReportConfig, None), (StoreConfig, {"config": {"shards": 3}})]
    return cases


def test_held_op_config_is_what_dagster_hands_the_op(monkeypatch):
    monkeypatch.setenv("HD_RECORD_HISTORY", "false")
    for cls, section in _sections():
        given, read = _as_dagster_gives(cls, section), _op_config(cls, section)
        assert type(read) is cls and read == given, (cls.__name__, section, read, given)
        assert read.model_dump() == given.model_dump(), (cls.__name__, section)
    from assets import ReportConfig
    from assets.answer_quality import GradedAnswersConfig

    assert _op_config(ReportConfig, {"config": {"record_history": {"env": "HD_RECORD_HISTORY"}}}).record_history \
        is False
    graded = _op_config(GradedAnswersConfig, {"config": {"graders": ["deterministic", "judge"]}})
    assert graded.grader_names() == ["deterministic", "judge"]
    # `config: null` is refused by Dagster itself (the run never starts): op_config's reading of it never matters
    from dagster import DagsterInvalidConfigError

    with pytest.raises(DagsterInvalidConfigError, match="must not be None"):
        _as_dagster_gives(ReportConfig, {"config": None})


# --------------------------------------------------------------------------------------------
# held: a verdict pickled before 9e25a61; judge_run(record=True)
# --------------------------------------------------------------------------------------------


def test_held_a_verdict_pickled_before_the_field_reads_as_recorded_and_is_accepted(judge):
    from eval_pipeline.verdict.retrieval import RunVerdict, record_verdict

    judge("r0", {"a": 40, "b": 40})
    verdict, per_variant = judge("r1", {"a": 20, "b": 40}, record=False)
    state = dict(verdict.__dict__)
    del state["unrecorded"]  # what a verdict stored by the IO manager before 9e25a61 holds
    old = RunVerdict.__new__(RunVerdict)
    old.__dict__.update(state)
    old = pickle.loads(pickle.dumps(old))
    assert old.unrecorded == "" and "unrecorded" not in old.__dict__
    assert old.accept_command == "python -m eval_pipeline.history accept r1 --variant a"
    record_verdict(old, judge.uri, run_id="r1", per_variant=per_variant)  # what render_run does with it
    assert _accepts(judge.uri, "r1", ["a"]) == ""


def test_held_judge_run_record_true_never_meets_the_refusal(judge):
    """The library's one-call path (judge_run records itself) builds a fresh verdict: never unrecorded."""
    from eval_pipeline.history.runs import SCORING_PROTOCOL
    from eval_pipeline.verdict.retrieval import judge_run

    judge("r0", {"a": 40})
    provenance = {"corpus_signature": "corpus-1", "question_set_fingerprint": "qs-1", "labels_fingerprint": "l-1",
                  "benchmark_fingerprint": "bench-1", "embedder": "minilm", "embedder_revision": "rev-1",
                  "chunking": {"split_length": 150}, "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
                  "variants": {"a": {"engine": "pg-dense", "knob": "a"}}}
    verdict = judge_run({"a": _frame("a", 20)}, baseline="a", provenance=provenance, tolerances=TOL, strict=False,
                        run_id="r1", limited=False, connection_string=judge.uri, record=True)
    assert verdict.unrecorded == "" and not verdict.gates["a"].passed
    assert _accepts(judge.uri, "r1", ["a"]) == ""
