"""Attacks on 98e3198: a failed ``answer_gate__<variant>`` check carries ``accept`` (``history.runs.how_to_accept``:
the Launchpad's config and ``python -m eval_pipeline.history accept RUN --variant V``) and the console's accept
line (``RunVerdict.accept_command``) names V, only where ``RunVerdict.acceptable_answer_failures`` says an
acceptance naming V takes every failed grader of V (``history.answers.answers_to_accept``: nothing refused)
and ``history.runs.retrieval_to_accept`` would not refuse it.

Attacked, each run judged as the verdict asset does (``judge_run`` then ``judge_answer_run``) and recorded as
the report asset does (``record_verdict``, ``record_answers``) in a database of its own, the offer then
followed through the command line (``history.__main__.main``) or the ``accept_reference`` job: a plain answer
drop; a pair key with ``|``; a self-judged row; a grader failing as not_compared (set and treatment changed);
a rename the verdict follows (``inherits``); a run without a run row (library); a row with a NaN pass rate,
an unknown generator, limited answers, nothing scored, errored answers, failed grading calls; two graders
(failed+failed with a problem, failed+passed with a problem); a limited run, errored questions, reranker
fallbacks, a run that may have renamed a variant; record=False; a report that recorded its run row and not
its answer rows; a variant the run did not measure; the console line with two variants; what a later run
judges after the offer is followed; a grader missing from the run.

Holes (strict xfails, each confirmed failing on its assertion with --runxfail, each with a passing control).
Closed since by the lead, their tests now plain: 1 (the answer gate offers the answers alone,
``accept ... --answers-only`` / ``answers_only: true``: ``history.answers.accept_run(answers_only=True)``
checks every refusal of the whole acceptance and pins no retrieval; the console names such a variant on a
line of its own, and the answer gates' messages name that command), 2 (the console's accept line and the
variant gate's ``accept`` say up front which failed graders the whole acceptance leaves, and why:
``RunVerdict.answers_not_taken``) and 3 (a grader missing beside a row the acceptance takes is offered:
accepting that row acknowledges the removal).

1. FAILS OPEN: the answer gate's ``accept`` pins V's RETRIEVAL too. ``acceptable_answer_failures``
   (verdict/retrieval.py:118) offers ``accept RUN --variant V`` (history/runs.py:1052 ``how_to_accept``), and
   ``answers.accept_run`` (history/answers.py:706-715) accepts V's retrieval measurement with its answer rows
   in one write; an accepted run is then V's pinned reference and stands for the tolerances it ASKED for
   (verdict/retrieval.py:663 ``pinned_tolerances``, and the project's gate in force). So accepting an intended
   answer drop also (a) makes V's within-tolerance retrieval step of that run its bar: the next step (r0 40/40,
   r1 38/40 passed, r2 36/40: -0.10 from r0) PASSES, where without the acceptance it fails against r0 (the
   small-steps regression the pinned reference exists to catch); (b) puts the loosening the run asked for
   (hit@1/mrr 0.05 -> 0.5, judged at 0.05 "until a run is accepted") in force for V: r2 at 28/40 (-0.30)
   PASSES. The check says neither (its text: "once its numbers are intended"; the command's output says "now
   the pinned reference of: a" only after the fact). New with 98e3198: before, a plain answer drop offered no
   command at all.
2. OFFERED, REFUSED IN PART (pre-existing on the retrieval side, left beside the new answer rule): the
   console's accept line names V for its failed RETRIEVAL gate (``acceptable_failures``,
   verdict/retrieval.py:103-115, merged in ``accept_command`` :159; the same for variant_gate__V's ``accept``,
   reporting/run.py:278) without ``acceptable_answer_failures``' test: where V's answer gate also failed on a
   row no acceptance takes (errored answers, an unknown generator), the command exits 0 printing "answers not
   accepted: a deterministic: ...": V's failed grader is refused, against the promise.
3. (the reverse) a grader MISSING from the run: ``takes`` (verdict/retrieval.py:133, ``not in missing``) never
   offers it, and the README says no acceptance can take it; yet the acceptance naming V does
   (``answer_graders_of`` counts only rows since V's latest acceptance: the next run without the grader
   passes), and the gate's own message names that very command ("accept a run without them (python -m
   eval_pipeline.history accept r1 --variant a) to acknowledge their removal"). With a retrieval failure of V
   the console names V anyway and the same command acknowledges the removal (asserted as a fact): the rule
   differs with whether retrieval failed.

Held (plain tests): a plain answer drop is offered on the check and the console and the command (and the
Launchpad config through the job) accepts every failed grader, nothing refused; ``idx|dense`` round-trips;
a self-judged row, a not_compared grader (the next drop then fails against it) and a followed rename are
offered and taken; a run with no run row has its answers accepted alone; NaN, unknown generator, limited
answers, nothing scored, errored answers, failed grading calls: not offered, and the acceptance by name
refuses that row (so not offering is right); a failed grader with a problem beside a fine failed one: not
offered; a fine failed grader beside a PASSED one with a problem: offered, the failed one accepted (the passed
one's refusal is printed: noted, within the promise); a limited run, errored questions, reranker fallbacks, a
maybe-renamed variant: not offered, and the command is refused; record=False: the text says the run must be
recorded, the command is refused naming the run, nothing accepted; a variant not measured has no answer gate
and no accept; the console names exactly the variants that failed, each once.

Noted (a fact test, not a hole): a report that recorded its run row and failed before its answer rows
(reporting/run.py:156-157, two writes, not one transaction): the offered command exits 0, pins V's retrieval
and accepts none of the failed graders ("answers accepted: none"); the text's "once the report has recorded
this run" covers it, and a retried report records both.
"""

from __future__ import annotations

import shlex

import pandas as pd
import psycopg
import pytest
import yaml

from tests.history_schema import fresh_history_uri

pytestmark = pytest.mark.integration

N = 40
URL_ENV = "ATK17_URL"
TOL = {"hit@1": 0.05, "mrr": 0.05}
LOOSE = {"hit@1": 0.5, "mrr": 0.5}
ANSWER_TOL = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}
YARDSTICKS = {"deterministic": "deterministic:v1", "static": "static:v2", "judge": "judge:openai:gpt-4o:v1"}


def _frame(variant: str, hits: int, *, errored: int = 0, fallback: int = 0) -> pd.DataFrame:
    from tests.verdict_frames import scored_frame

    df = scored_frame(variant, hits, N)
    if errored:  # the last `errored` questions errored
        df.loc[df.index[-errored:], "errored"] = True
    if fallback:  # the reranker fell back on the first `fallback` questions
        df.loc[df.index[:fallback], "rerank_fallback"] = True
    return df


def _answers(variant: str, grades) -> pd.DataFrame:
    """`variant`'s answer_metrics: {grader: pass_rate or {column: value}} (a number alone: deterministic)."""
    from tests.verdict_frames import answer_frame_with

    rows = []
    for grader, spec in (grades if isinstance(grades, dict) else {"deterministic": grades}).items():
        columns = dict(spec) if isinstance(spec, dict) else {"pass_rate": spec}
        rate = columns.pop("pass_rate", 0.9)
        columns.setdefault("yardstick", YARDSTICKS[grader])
        rows.append(answer_frame_with(variant, rate, grader=grader, **columns))
    return pd.concat(rows, ignore_index=True)


@pytest.fixture
def history(embedded_pg, tmp_path_factory):
    """A fresh database; `history(run_id, {variant: hits}, {variant: grades})` judges a run as the verdict
    asset does and records it as the report asset does (nothing with record=False; the run row alone
    with answers=False)."""
    from eval_pipeline.history.runs import SCORING_PROTOCOL
    from eval_pipeline.verdict.answers import record_answers
    from eval_pipeline.verdict.retrieval import judge_run, record_verdict
    from eval_pipeline.verdict.run import complete_verdict

    uri = fresh_history_uri(embedded_pg, "atk17")  # a schema of its own (tests/history_schema.py)
    statistics = tmp_path_factory.getbasetemp() / "statistics_cache"  # one a session, as the asset's is its state dir's

    def run(run_id: str, hits: dict[str, int], grades: dict | None = None, *, frames: dict | None = None,
            sweep_keys=None, record: bool = True, run_row: bool = True, answers: bool = True,
            limited: bool = False, tolerances=None, configs: dict | None = None):
        provenance = {"corpus_signature": "corpus-1", "question_set_fingerprint": "qs-1", "labels_fingerprint": "l-1",
                      "benchmark_fingerprint": "bench-1", "embedder": "minilm", "embedder_revision": "rev-1",
                      "chunking": {"split_length": 150}, "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
                      "variants": {v: {"engine": "pg-dense", "knob": (configs or {}).get(v, v)} for v in hits}}
        per_variant = {v: (frames or {}).get(v, _frame(v, h)) for v, h in hits.items()}
        verdict = judge_run(per_variant, baseline=next(iter(hits)), provenance=provenance,
                            tolerances=tolerances or TOL, strict=False, run_id=run_id, limited=limited,
                            connection_string=uri, sweep_keys=sweep_keys or list(hits), record=False,
                            statistics_cache=statistics)
        complete_verdict(verdict, {v: _answers(v, g) for v, g in (grades or {}).items()}, run_id=run_id,
                         record_history=True, order=list(per_variant), corpus_signature="corpus-1",
                         answer_tolerances=ANSWER_TOL, connection_string=uri)  # as the verdict asset does
        if record and run_row:
            record_verdict(verdict, uri, run_id=run_id, per_variant=per_variant)
        if record and answers and verdict.answers.records:
            record_answers(verdict.answers, uri, run_id, run_eligible=verdict.eligible)
        return verdict

    run.uri = uri
    return run


def _cli(history, monkeypatch, capsys, *arguments: str) -> tuple[int, str]:
    from eval_pipeline.history.__main__ import main

    monkeypatch.setenv(URL_ENV, history.uri)
    capsys.readouterr()
    code = main(["--url-env", URL_ENV, *arguments])
    out = capsys.readouterr()
    return code, out.out + out.err


def _check(verdict, variant: str) -> tuple[bool, dict]:
    from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks

    return answer_gate_checks(answer_check_output(verdict), list(verdict.gates))[variant]


def _offered(verdict, variant: str) -> list[str] | None:
    """The answer gate check's `accept` command, its arguments after the module (None: not offered)."""
    text = _check(verdict, variant)[1].get("accept")
    if text is None:
        return None
    command = shlex.split(text.split("; or: ", 1)[1].split("; it ", 1)[0])  # what follows says what it takes
    assert command[:3] == ["python", "-m", "eval_pipeline.history"], command
    return command[3:]


def _console(verdict) -> list[str] | None:
    """The console's whole acceptance (a retrieval failure), its arguments after the module."""
    return None if verdict.accept_command is None else shlex.split(verdict.accept_command)[3:]


def _console_answers(verdict) -> list[str] | None:
    """The console's acceptance of answers alone (an answer gate alone failed)."""
    return None if verdict.answers_accept_command is None else shlex.split(verdict.answers_accept_command)[3:]


def _accepted(history, run_id: str = "r1") -> list[tuple[str, str]]:
    """(variant, aspect) of `run_id` stamped accepted (with or without a run row)."""
    with psycopg.connect(history.uri, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('eval_measurements')").fetchone()[0] is None:
            return []
        return conn.execute("SELECT variant, aspect FROM eval_measurements WHERE run_id = %s AND accepted_at IS NOT "
                            "NULL ORDER BY variant, aspect", (run_id,)).fetchall()


def _dropped(history, **settings):
    """r0: a (and b) at 0.9; r1: a's deterministic pass rate 0.6 (a measured answer drop), b kept."""
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict = history("r1", {"a": 40, "b": 40}, {"a": 0.6, "b": 0.9}, **settings)
    assert not verdict.answers.gates["a"]["deterministic"].passed and verdict.answers.gates["b"]["deterministic"].passed
    return verdict


# --------------------------------------------------------------------------------------------
# held: offered exactly where the acceptance takes every failed grader
# --------------------------------------------------------------------------------------------


def test_held_control_a_plain_answer_drop_is_offered_and_the_command_takes_it(history, monkeypatch, capsys):
    verdict = _dropped(history)
    assert _offered(verdict, "a") == ["accept", "r1", "--variant", "a", "--answers-only"] == _console_answers(verdict)
    assert _console(verdict) is None and "accept" not in _check(verdict, "b")[1]
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, "a"))
    assert code == 0 and "answers not accepted" not in out, out
    assert _accepted(history) == [("a", "answers:deterministic")]  # its retrieval reference stays


def test_held_control_the_offered_launchpad_config_takes_it_through_the_job(history):
    from tests.unit.verdict import test_verdict_attacks_thirtyfifth as thirtyfifth

    verdict = _dropped(history)
    text = _check(verdict, "a")[1]["accept"]
    config = yaml.safe_load(text.split(" launch accept_reference with ", 1)[1].split("; or: ", 1)[0])
    assert config == {"run_id": "r1", "variants": ["a"], "answers_only": True}
    result = thirtyfifth._job(history.uri, **config)
    assert result.success, result.text
    assert _accepted(history) == [("a", "answers:deterministic")]
    (step,) = [ev for ev in result.all_events if ev.is_successful_output]  # its metadata, as the UI shows it
    metadata = {k: v.value for k, v in step.event_specific_data.metadata.items()}
    assert metadata["variants"] == "none (answers alone)" and metadata["answers"] == "a deterministic", metadata


@pytest.mark.parametrize("case", ["pair key", "self-judged", "not compared", "renamed"])
def test_held_offered_and_taken(history, monkeypatch, capsys, case):
    """A pair key with `|`; a self-judged judge row; a grader not compared (its set and the treatment changed:
    the next drop then fails against the accepted row); a rename the verdict follows (a2 inherits a)."""
    key = "idx|dense" if case == "pair key" else "a"
    first = {"judge": {"pass_rate": 0.9, "yardstick": "judge:openai:gpt-4o:v1+self-judged"}} \
        if case == "self-judged" else 0.9
    history("r0", {key: 40}, {key: first})
    later = {"deterministic": {"pass_rate": 0.5, "set_fingerprint": "fp-2", "treatment_json": '{"context_k": 3}'}}
    if case == "renamed":
        key = "a2"
        verdict = history("r1", {key: 40}, {key: 0.5}, configs={"a2": "a"})
        assert verdict.inherits == {"a2": "a"}
    else:
        grades = later if case == "not compared" else {"judge": {**first["judge"], "pass_rate": 0.5}} \
            if case == "self-judged" else 0.5
        verdict = history("r1", {key: 40}, {key: grades})
    assert not _check(verdict, key)[0]
    assert _offered(verdict, key) == ["accept", "r1", "--variant", key, "--answers-only"] == _console_answers(verdict)
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, key))
    assert code == 0 and "answers not accepted" not in out, out
    grader = "judge" if case == "self-judged" else "deterministic"
    assert _accepted(history) == [(key, f"answers:{grader}")]
    if case == "not compared":
        later["deterministic"]["pass_rate"] = 0.3
        gate = history("r2", {key: 40}, {key: later}).answers.gates[key]["deterministic"]
        assert not gate.passed and gate.state == "comparable", gate.message


def test_held_a_run_without_a_run_row_is_offered_and_its_answers_accepted_alone(history, monkeypatch, capsys):
    verdict = _dropped(history, run_row=False)  # recorded through the library: record_answers, no run row
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, "a"))
    assert code == 0 and "has no run row" in out and "answers not accepted" not in out, out
    assert _accepted(history) == [("a", "answers:deterministic")]


PROBLEMS = {"NaN pass rate": {"pass_rate": float("nan")}, "unknown generator": {"generator": None},
            "limited answers": {"limited": True}, "nothing scored": {"n_scored": 0},
            "errored answers": {"n_errored": 3}, "grading calls failed": {"n_grader_failed": 2}}


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_held_a_failed_row_no_acceptance_takes_is_not_offered(history, monkeypatch, capsys, problem):
    """Not offered; and rightly: the acceptance naming the variant refuses that very row."""
    history("r0", {"a": 40}, {"a": 0.9})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": {"pass_rate": 0.5, **PROBLEMS[problem]}}})
    assert not _check(verdict, "a")[0]
    assert _offered(verdict, "a") is None and _console(verdict) is None
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1", "--variant", "a")
    assert "answers not accepted: a deterministic" in out, out
    assert ("a", "answers:deterministic") not in _accepted(history)


@pytest.mark.parametrize("beside", ["failed with a problem", "passed with a problem"])
def test_held_two_graders(history, monkeypatch, capsys, beside):
    """A fine failed grader beside a failed one with a problem (errored): not offered. Beside a PASSED one
    with a problem (a grading model unknown, never compared, no history: a warning): offered, and the failed
    one is accepted; the passed one's refusal is printed (within the promise: it did not fail)."""
    judge = {"pass_rate": 0.3, "n_errored": 1} if beside.startswith("failed") else \
        {"pass_rate": 0.9, "yardstick": "judge:failed"}
    history("r0", {"a": 40}, {"a": 0.9})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": 0.5, "judge": judge}})
    gate = verdict.answers.gates["a"]["judge"]
    assert not verdict.answers.gates["a"]["deterministic"].passed
    if beside.startswith("failed"):
        assert not gate.passed and _offered(verdict, "a") is None
        assert _console(verdict) is None and _console_answers(verdict) is None
        return
    assert gate.passed and gate.state == "not_comparable", gate.message
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, "a"))
    assert code == 0 and "answers not accepted: a judge" in out, out
    assert "answers not accepted: a deterministic" not in out, out
    assert ("a", "answers:deterministic") in _accepted(history)


@pytest.mark.parametrize("case", ["limited run", "errored questions", "reranker fallbacks", "maybe renamed"])
def test_held_no_offer_where_the_retrieval_acceptance_is_refused(history, monkeypatch, capsys, case):
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    if case == "maybe renamed":  # b vanished, c in the file and not measured: c may be b renamed
        verdict = history("r1", {"a": 40}, {"a": 0.5}, sweep_keys=["a", "c"])
        assert verdict.maybe_renamed == {"c": ["b"]}
    else:
        flaw = {"errored questions": {"errored": 2}, "reranker fallbacks": {"fallback": 3}}.get(case)
        verdict = history("r1", {"a": 40, "b": 40}, {"a": 0.5, "b": 0.9}, limited=case == "limited run",
                          frames={"a": _frame("a", 40, **flaw)} if flaw else None)
    assert not _check(verdict, "a")[0]
    assert _offered(verdict, "a") is None and verdict.acceptable_answer_failures == []
    assert "--variant a" not in (verdict.accept_command or "")
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1", "--variant", "a")
    assert code == 2, out  # what the offer would have met
    assert _accepted(history) == []


def test_held_a_run_not_recorded_says_so_and_its_command_is_refused(history, monkeypatch, capsys):
    verdict = _dropped(history, record=False)  # the report with record_history: false
    assert "the report has recorded this run" in _check(verdict, "a")[1]["accept"]
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, "a"))
    assert code == 2 and "no recorded run 'r1'" in out, out
    assert _accepted(history) == []


def test_a_run_row_without_its_answer_rows_refuses_the_answers_offer_and_pins_nothing(history, monkeypatch, capsys):
    """The report recorded its run row and failed before its answer rows: the answers-only command is
    refused (it found no answer row), and nothing is pinned, retrieval included (before the offer took
    the answers alone, it exited 0 pinning a's retrieval)."""
    verdict = _dropped(history, answers=False)
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, "a"))
    assert code == 2 and "run 'r1' has no answer row to accept of a" in out, out
    assert _accepted(history) == []


def test_held_an_unmeasured_variant_has_no_answer_gate_and_no_accept(history):
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict = history("r1", {"a": 40}, {"a": 0.9, "b": 0.5}, sweep_keys=["a", "b"])  # b's answers left out
    assert "b" in verdict.unmeasured and "b" not in verdict.answers.gates
    assert _check(verdict, "b") == (True, {"evaluated": False, "message": "variant 'b' has no answer metrics in "
                                                                          "this run"})
    assert verdict.accept_command is None


def test_held_the_console_names_exactly_the_failed_variants_once(history, monkeypatch, capsys):
    history("r0", {"a": 40, "b": 40, "c": 40}, {"a": 0.9, "b": 0.9, "c": 0.9})
    verdict = history("r1", {"a": 20, "b": 40, "c": 40}, {"a": 0.5, "b": 0.5, "c": 0.9})
    assert _console(verdict) == ["accept", "r1", "--variant", "a"]  # a's retrieval failed: the whole acceptance
    assert _console_answers(verdict) == ["accept", "r1", "--variant", "b", "--answers-only"]  # b's answers alone
    for command in (_console(verdict), _console_answers(verdict)):
        code, out = _cli(history, monkeypatch, capsys, *command)
        assert code == 0 and "answers not accepted" not in out, out
    assert _accepted(history) == [("a", "answers:deterministic"), ("a", "retrieval"), ("b", "answers:deterministic")]


# --------------------------------------------------------------------------------------------
# hole 1: the answer gate's accept pins the variant's retrieval too
# --------------------------------------------------------------------------------------------

STEPS = {"a within-tolerance step": ({"a": 38}, {}, {"a": 36}), "a loosened tolerance": ({"a": 40}, LOOSE, {"a": 28})}


def _steps(history, case: str, *, follow, monkeypatch=None, capsys=None):
    """r0 a 40/40; r1 a's retrieval passes (a step within tolerance, or the file loosened) and its answers
    drop (the offer); r2 a steps down again. Returns r2's retrieval gate of a."""
    first, loose, then = STEPS[case]
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    r1 = history("r1", {**first, "b": 40}, {"a": 0.6, "b": 0.9}, tolerances=loose or None)
    assert r1.gates["a"].passed and _offered(r1, "a") == ["accept", "r1", "--variant", "a", "--answers-only"]
    if follow:
        assert _cli(history, monkeypatch, capsys, *_offered(r1, "a"))[0] == 0
    return history("r2", {**then, "b": 40}, {"a": 0.6, "b": 0.9}, tolerances=loose or None).gates["a"]


@pytest.mark.parametrize("case", list(STEPS))
def test_control_hole_1_without_the_acceptance_the_next_retrieval_step_fails(history, case):
    gate = _steps(history, case, follow=False)
    assert not gate.passed and gate.state == "comparable", gate.message


@pytest.mark.parametrize("case", list(STEPS))
def test_following_the_answer_gate_s_accept_leaves_the_retrieval_gate_as_it_was(history, monkeypatch, capsys, case):
    gate = _steps(history, case, follow=True, monkeypatch=monkeypatch, capsys=capsys)
    assert not gate.passed, f"r2's retrieval regression of a passed after an ANSWER acceptance: {gate.message}"


# --------------------------------------------------------------------------------------------
# hole 2: the console's line (and variant_gate's accept) names a variant whose failed answer row is refused
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("problem", ["errored answers", "unknown generator"])
def test_the_console_s_accept_says_which_failed_graders_it_does_not_take(history, monkeypatch, capsys, problem):
    """Hole 2, closed by saying it up front: the console's line (and variant_gate__a's ``accept``) still offers
    a's acceptance, which takes a's deliberate retrieval trade-off (the row no acceptance takes is no yardstick
    either way, so refusing the command would leave that trade-off no way in), and says beside it, before it is
    run, which failed grader it leaves and why: the same row the command's output then names as not accepted."""
    from eval_pipeline.reporting.console import console_summary
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    history("r0", {"a": 40}, {"a": 0.9})
    verdict = history("r1", {"a": 20}, {"a": {"deterministic": {"pass_rate": 0.9, **PROBLEMS[problem]}}})
    assert not verdict.gates["a"].passed and not verdict.answers.gates["a"]["deterministic"].passed
    assert _offered(verdict, "a") is None  # the answer gate's own rule: not offered
    assert _console(verdict) == ["accept", "r1", "--variant", "a"]
    said = [line for line in console_summary(verdict).splitlines() if "not these answers" in line]
    check = variant_gate_checks(verdict_output(verdict), ["a"])["a"][1]["accept"]
    assert len(said) == 1 and "a deterministic: " in said[0] and "a deterministic: " in check, (said, check)
    code, out = _cli(history, monkeypatch, capsys, *_console(verdict))
    assert code == 0, out
    refused = out.split("answers not accepted: ", 1)[1].splitlines()[0]
    assert refused.startswith("a deterministic: ")
    why = refused.split(": ", 1)[1]
    assert why in said[0] and why in check, (why, said, check)
    assert _accepted(history) == [("a", "retrieval")]


def test_control_hole_2_without_the_answer_problem_the_console_s_command_takes_everything(
        history, monkeypatch, capsys):
    history("r0", {"a": 40}, {"a": 0.9})
    verdict = history("r1", {"a": 20}, {"a": 0.5})
    code, out = _cli(history, monkeypatch, capsys, *_console(verdict))
    assert code == 0 and "answers not accepted" not in out, out
    assert _accepted(history) == [("a", "answers:deterministic"), ("a", "retrieval")]


# --------------------------------------------------------------------------------------------
# hole 3 (the reverse): a grader missing from the run
# --------------------------------------------------------------------------------------------


def _missing_static(history, hits: int = 40):
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": hits}, {"a": {"deterministic": 0.9}})
    assert not verdict.answers.gates["a"]["static"].passed and ("a", "static", "r0") in verdict.answers.missing
    return verdict


def test_control_hole_3_the_acceptance_by_name_takes_a_missing_grader(history, monkeypatch, capsys):
    """What the gate's own message names takes it: the next run without the grader passes."""
    verdict = _missing_static(history)
    message = verdict.answers.gates["a"]["static"].message
    assert "python -m eval_pipeline.history accept r1 --variant a" in message, message
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1", "--variant", "a")
    assert code == 0 and "answers not accepted" not in out, out
    assert history("r2", {"a": 40}, {"a": {"deterministic": 0.9}}).answers.variant_passed("a")


def test_noted_hole_3_with_a_retrieval_failure_the_console_acknowledges_the_removal_anyway(
        history, monkeypatch, capsys):
    verdict = _missing_static(history, hits=20)
    assert _offered(verdict, "a") == ["accept", "r1", "--variant", "a", "--answers-only"]
    assert _console(verdict) == ["accept", "r1", "--variant", "a"]
    assert _cli(history, monkeypatch, capsys, *_console(verdict))[0] == 0
    assert history("r2", {"a": 20}, {"a": {"deterministic": 0.9}}).answers.variant_passed("a")


def test_a_missing_grader_is_offered_as_its_message_says_and_its_answers_acknowledge_the_removal(
        history, monkeypatch, capsys):
    """Hole 3, closed: offered beside a row the acceptance takes; the answers alone acknowledge the
    removal (the next run without the grader passes), and the retrieval reference stays."""
    verdict = _missing_static(history)
    assert _offered(verdict, "a") == ["accept", "r1", "--variant", "a", "--answers-only"], _check(verdict, "a")[1]
    assert "accept r1 --variant a --answers-only" in verdict.answers.gates["a"]["static"].message
    code, out = _cli(history, monkeypatch, capsys, *_offered(verdict, "a"))
    assert code == 0 and "answers not accepted" not in out, out
    assert _accepted(history) == [("a", "answers:deterministic")]
    assert history("r2", {"a": 40}, {"a": {"deterministic": 0.9}}).answers.variant_passed("a")
