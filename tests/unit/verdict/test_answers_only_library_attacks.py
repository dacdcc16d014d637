"""Attacks on 8dcf8d4 (``history.answers.accept_answer_run`` is the answers-only acceptance, through
``_accept(..., answers_only=True, required=False)``; ``history.runs.retrieval_to_accept`` lets a whole acceptance of
a run row that ranked nothing take its answers, ``answers_alone``) and 3a1e33e (``RunVerdict.answers_not_taken``;
``acceptable_answer_failures`` computed from it; the console's accept line and the variant gate's ``accept`` say
up front which failed answer graders the whole acceptance leaves: ``history.runs.answers_left``).

Attacked, each run judged and recorded as the assets do (the ``history`` fixture of test_answer_accept_attacks.py):
the refusals of accept_answer_run / accept_run(answers_only=True) in the library against the command line's; the
answers_alone path (retrieval measurements removed from a recorded run: a measured retrieval regression in its
provenance, an unnamed answer regression, a limited run, a maybe-renamed variant, variants named, all refused,
the command line's printout); acceptable_answer_failures, accept_command and answers_accept_command against the
code before 3a1e33e (loaded in memory) over 3000 random verdicts; where answers_not_taken reaches (a variant not
in acceptable_failures); what the whole acceptance does to a grader the accept line says it leaves; the way out a
missing grader's gate names; the project's callers of accept_answer_run.

Holes (strict xfails, each failing on its assertion with --runxfail, each beside a passing control). All five
closed since by the lead, their tests now plain: 1 (``NameTheRun`` carries the refused acceptance's kind, and
``retrieval_to_accept(answers_only=...)`` raises it so: the library's refusal names ``--answers-only``; the fact
test now sees the retrieval reference kept), 2 (said, not changed: any acceptance of a variant acknowledges a
grader missing from the run, so the accept line and the check now say so, ``RunVerdict.removals_acknowledged``,
and list only rows as left, ``whole_acceptance_leaves``), 3 ("ranked no variant"), 4 (the command line's
closing line says the retrieval gate stays whenever no retrieval was pinned) and 5 (the missing grader's way
out is the answers alone only beside a row an acceptance takes; else, since the review of this fix, no command
for this run: a later run, and why).

1. FAILS OPEN (message): the library's answers-only acceptance (``accept_answer_run(uri, run)``, and
   ``accept_run(..., answers_only=True)``), refusing an unnamed measured retrieval regression or an unjudged
   variant, names the WHOLE command: history/runs.py:971/975 -> :1099 raise ``NameTheRun``, whose str() is
   ``told()`` with answers_only=False (:1089-1092); history/answers.py:631-633 does not re-word it (the command
   line, history/__main__.py:65-66, and the job, assets/reference.py:56-58, do). Following it as printed pins
   a's regressed retrieval (the user asked for answers): r2 at 30/40 then passes (fact test). 8dcf8d4's message
   says its refusals name the --answers-only command. Tests: test_hole_1_* (4 cases);
   control test_control_hole_1_*; fact test_fact_hole_1_*.
2. FAILS OPEN (message): the accept line / variant gate ``accept`` say the whole acceptance LEAVES a failed grader
   "missing from this run" ("which no acceptance takes (run the job again to judge them)", history/runs.py:1075;
   verdict/retrieval.py:150 and the ``some_taken`` rule, :152-156), but the whole acceptance naming the variant
   pins its retrieval, and any acceptance of the variant restarts ``answer_graders_of``'s window
   (history/answers.py:520-526, its own docstring: "of its retrieval or answers"; verdict/answers.py:139-140 says
   so too): the next run without the grader passes, its removal acknowledged by a command said to leave it.
   Tests: test_hole_2_*; control test_control_hole_2_*; fact test_fact_hole_2_*.
3. (message) a whole acceptance of a run that ranked nothing whose answer rows are all refused says "run 'r1'
   ranked none of ; its answer rows were not accepted: ..." (history/answers.py:735, ``named`` empty: the
   answers_alone path reaches the by-name branch). Test: test_hole_3_*; control test_control_hole_3_*.
4. (message) after a whole acceptance that pinned no retrieval (answers_alone) the command line prints "the gate
   in force for the whole project from now on (the accepted run's settings, every variant)"
   (history/__main__.py:136-137), though none of the run's settings were taken (the numbers printed are r0's, as
   they should be; a run that loosened its tolerances is shown under that label). Test: test_hole_4_*; control
   test_control_hole_4_*.
5. (offered, refused; e40dca68, beside 3a1e33e) a missing grader's gate names ``accept RUN --variant V
   --answers-only`` to acknowledge the removal whenever V has any row MEASURED in the run
   (verdict/answers.py:141), not any row an acceptance TAKES: beside a row with errored answers the command takes
   nothing and exits 2 ("has no answer row to accept of a"), while answers_not_taken knows the grader is not
   taken. Fail closed; the only command that does acknowledge it is the whole one (pins a's retrieval).
   Test: test_hole_5_*; control test_control_hole_5_*.

Held (plain tests): answers_alone takes the answers and pins no retrieval (a's retrieval regression recorded in
the provenance stays judged against r0: r2 at 30/40 fails); it refuses an unnamed answer regression (the
answers-only form names --answers-only); a limited run and a maybe-renamed variant are refused by all three
entry points, nothing written; answers_alone is whole only (a named unknown variant, or variants=[], refused);
acceptable_answer_failures, accept_command and answers_accept_command equal the code before 3a1e33e on 3000
random verdicts, and no variant offered the answers alone has a grader answers_not_taken names; answers_not_taken
reaches neither the console's line, the report's accept_leaves nor any check for a variant outside
acceptable_failures; no caller in eval_pipeline/, assets/ or resources/ calls accept_answer_run (the command line
and the job call accept_run); accept_answer_run naming an unknown variant now raises (was ([], [])), a run with
no row still returns its tuple.
"""

from __future__ import annotations

import random
import shlex
import types
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import psycopg
import pytest

from tests.old_code import module_at
from tests.unit.verdict import test_answer_accept_attacks as previous_review
from tests.unit.verdict.test_answer_accept_attacks import _accepted, _cli, _console

pytestmark = pytest.mark.integration

history = previous_review.history  # its fixture: each run judged and recorded as the assets do

_ROOT = Path(__file__).resolve().parents[3]
_BEFORE = "3a1e33e^"


def _sql(history, statement: str, *params) -> None:
    with psycopg.connect(history.uri, autocommit=True) as conn:
        conn.execute(statement, params)


def _way_out(text: str) -> list[str]:
    """The command a refusal names, its arguments after the module."""
    command = text.split("python -m ", 1)[1]
    command = command.split(" (and any others)", 1)[0].split(")", 1)[0]
    words = shlex.split(command)
    assert words[0] == "eval_pipeline.history", text
    return words[1:]


# --------------------------------------------------------------------------------------------
# hole 1: accept_answer_run's retrieval refusal names the WHOLE command
# --------------------------------------------------------------------------------------------


def _regressed(history, case: str):
    """r0: a and b 40/40, answers 0.9. r1: a's retrieval drops to 30/40 (a measured regression), or a passes
    and its gate is recorded unjudged (a comparison that failed); answers kept."""
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    r1 = history("r1", {"a": 30 if case == "measured regression" else 40, "b": 40}, {"a": 0.9, "b": 0.9})
    if case == "unjudged":
        _sql(history, "UPDATE eval_runs SET provenance = jsonb_set(provenance, '{gate,a,unjudged}', 'true'::jsonb)"
                      " WHERE run_id = 'r1'")
    else:
        assert not r1.gates["a"].passed and r1.gates["a"].state in ("comparable", "paired")
    return r1


def _refusal(call) -> str:
    with pytest.raises(ValueError) as refused:
        call()
    return str(refused.value)


def _call(call: str, uri: str):
    from eval_pipeline.history.answers import accept_answer_run, accept_run

    if call == "accept_answer_run":
        return accept_answer_run(uri, "r1")
    return accept_run(uri, "r1", answers_only=True)


CALLS = ["accept_answer_run", "accept_run(answers_only=True)"]


@pytest.mark.parametrize("case", ["measured regression", "unjudged"])
@pytest.mark.parametrize("call", CALLS)
def test_hole_1_the_library_s_answers_only_refusal_names_the_answers_only_command(history, call, case):
    _regressed(history, case)
    text = _refusal(lambda: _call(call, history.uri))
    assert "--answers-only" in _way_out(text), text


@pytest.mark.parametrize("case", ["measured regression", "unjudged"])
def test_control_hole_1_the_command_line_s_answers_only_refusal_names_the_answers_only_command(
        history, monkeypatch, capsys, case):
    _regressed(history, case)
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1", "--answers-only")
    assert code == 2, out
    assert _way_out(out)[-1] == "--answers-only" and "--variant" in _way_out(out), out


def test_fact_hole_1_the_library_s_way_out_keeps_the_retrieval_reference(history, monkeypatch, capsys):
    """What following accept_answer_run's refusal as printed does: a's answers alone are accepted, its measured
    retrieval regression is not its reference (before the fix: pinned, and r2 at 30/40 passed against it)."""
    from eval_pipeline.history.answers import accept_answer_run

    _regressed(history, "measured regression")
    text = _refusal(lambda: accept_answer_run(history.uri, "r1"))
    code, out = _cli(history, monkeypatch, capsys, *_way_out(text))
    assert code == 0, out
    assert ("a", "retrieval") not in _accepted(history) and ("a", "answers:deterministic") in _accepted(history)
    assert not history("r2", {"a": 30, "b": 40}, {"a": 0.9, "b": 0.9}).gates["a"].passed


# --------------------------------------------------------------------------------------------
# hole 2: "missing from this run" is said to be left, yet the whole acceptance acknowledges the removal
# --------------------------------------------------------------------------------------------


def _missing_beside_a_refused_row(history):
    """r0: a with deterministic and static; r1: a's retrieval fails (20/40), static is gone and deterministic's
    row has errored answers (no row of a the acceptance takes)."""
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 20}, {"a": {"deterministic": {"pass_rate": 0.9, "n_errored": 3}}})
    assert not verdict.gates["a"].passed and verdict.acceptable_failures == ["a"]
    assert "a static: missing from this run" in verdict.answers_not_taken["a"], verdict.answers_not_taken
    return verdict


def test_fact_hole_2_the_console_and_the_check_say_the_removal_is_acknowledged_and_only_rows_are_left(history):
    from eval_pipeline.reporting.console import console_summary
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    verdict = _missing_beside_a_refused_row(history)
    lines = console_summary(verdict).splitlines()
    said = [line for line in lines if "not these answers" in line]
    removed = [line for line in lines if "acknowledges the removal" in line]
    check = variant_gate_checks(verdict_output(verdict), ["a"])["a"][1]["accept"]
    assert len(said) == 1 and "a deterministic: " in said[0] and "static" not in said[0], said
    assert len(removed) == 1 and "a static (last measured in run r0)" in removed[0], lines
    assert "a static (last measured in run r0)" in check and "a static: missing" not in check, check


def _static_gate_of_r2(history):
    r2 = history("r2", {"a": 20}, {"a": {"deterministic": 0.9}})
    return r2.answers.gates["a"].get("static")


def test_control_hole_2_without_the_acceptance_the_next_run_without_static_fails(history):
    _missing_beside_a_refused_row(history)
    gate = _static_gate_of_r2(history)
    assert gate is not None and not gate.passed


def test_hole_2_the_acceptance_does_what_the_accept_line_says_of_the_missing_grader(history, monkeypatch, capsys):
    """Closed by saying it: the line says the acceptance acknowledges static's removal, and it does (the next run
    without static has no static gate); a's errored deterministic row, said to be left, is left."""
    verdict = _missing_beside_a_refused_row(history)
    assert verdict.removals_acknowledged(verdict.acceptable_failures) == ["a static (last measured in run r0)"]
    code, out = _cli(history, monkeypatch, capsys, *_console(verdict))
    assert code == 0 and _accepted(history) == [("a", "retrieval")], out
    assert "answers not accepted: a deterministic: " in out, out
    assert _static_gate_of_r2(history) is None  # as said: its removal acknowledged


# --------------------------------------------------------------------------------------------
# the answers_alone path (retrieval_to_accept): a whole acceptance of a run row that ranked nothing
# --------------------------------------------------------------------------------------------


def _ranked_nothing(history, *, hits_a: int = 30, grades_a=0.9, limited: bool = False, gate: str | None = None):
    """r0 a, b at 40/40, answers 0.9; r1 recorded as the assets do (a's retrieval at `hits_a`: 30/40 is a
    measured regression its provenance records), then its retrieval measurements removed: a run row that ranked
    nothing, with its gate provenance and its answer rows. `gate`: a JSON path set true in r1's gate."""
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    r1 = history("r1", {"a": hits_a, "b": 40}, {"a": grades_a, "b": 0.9}, limited=limited)
    _sql(history, "DELETE FROM eval_measurements WHERE run_id = 'r1' AND aspect = 'retrieval'")
    if gate:
        _sql(history, f"UPDATE eval_runs SET provenance = jsonb_set(provenance, '{{gate,{gate}}}', %s::jsonb)"
                      " WHERE run_id = 'r1'", '["b"]' if gate.endswith("maybe_renamed_from") else "true")
    return r1


def test_held_answers_alone_takes_the_answers_and_pins_no_retrieval(history):
    """A whole acceptance of a run row that ranked nothing, its provenance recording a's measured retrieval
    regression: the answers alone are taken (before 8dcf8d4: refused 'has no variant(s) []'); a's retrieval
    reference stays r0, so r2 at 30/40 still fails."""
    from eval_pipeline.history.answers import accept_run

    r1 = _ranked_nothing(history)
    assert not r1.gates["a"].passed
    done = accept_run(history.uri, "r1")
    assert done.retrieval == [] and sorted(done.answers) == [("a", "deterministic"), ("b", "deterministic")]
    assert _accepted(history) == [("a", "answers:deterministic"), ("b", "answers:deterministic")]
    gate = history("r2", {"a": 30, "b": 40}, {"a": 0.9, "b": 0.9}).gates["a"]
    assert not gate.passed and gate.state == "comparable", gate.message


def test_held_answers_alone_still_refuses_an_unnamed_answer_regression(history):
    from eval_pipeline.history.answers import accept_answer_run, accept_run

    _ranked_nothing(history, hits_a=40, grades_a=0.5)
    done = accept_run(history.uri, "r1")
    assert done.answers == [("b", "deterministic")] and [r.split(":")[0] for r in done.refused] == ["a deterministic"]
    assert _accepted(history) == [("b", "answers:deterministic")]
    accepted, refused = accept_answer_run(history.uri, "r1")
    assert accepted == [("b", "deterministic")] and "--answers-only)" in refused[0]


@pytest.mark.parametrize("case, why", [
    ("limited", "is a limited run"),
    ("maybe renamed", "may be b renamed"),
])
def test_held_answers_alone_keeps_the_run_s_refusals(history, case, why):
    from eval_pipeline.history.answers import accept_answer_run, accept_run

    _ranked_nothing(history, hits_a=40, limited=case == "limited",
                    gate="a,maybe_renamed_from" if case == "maybe renamed" else None)
    for call in (lambda: accept_run(history.uri, "r1"), lambda: accept_run(history.uri, "r1", answers_only=True),
                 lambda: accept_answer_run(history.uri, "r1")):
        assert why in _refusal(call)
    assert _accepted(history) == []


def test_held_answers_alone_is_whole_only_a_named_absent_variant_is_refused(history):
    """`answers_alone` needs variants=None: naming a variant the run has neither ranked nor answered is refused."""
    from eval_pipeline.history.answers import accept_run

    _ranked_nothing(history, hits_a=40)
    assert "has no variant(s) ['zz']" in _refusal(lambda: accept_run(history.uri, "r1", variants=["zz"]))
    assert "has no variant(s) []" in _refusal(lambda: accept_run(history.uri, "r1", variants=[]))
    assert _accepted(history) == []


def test_hole_3_answers_alone_refused_whole_says_why_in_words(history):
    from eval_pipeline.history.answers import accept_run

    _ranked_nothing(history, hits_a=40, grades_a=0.5)
    _sql(history, "DELETE FROM eval_measurements WHERE run_id = 'r1' AND variant = 'b'")  # a's refused row alone
    text = _refusal(lambda: accept_run(history.uri, "r1"))
    assert "its answer rows were not accepted: a deterministic" in text
    assert "ranked none of ;" not in text and text.startswith("run 'r1' ranked no variant; "), text


def test_control_hole_3_the_answers_only_form_says_it_in_words(history):
    from eval_pipeline.history.answers import accept_run

    _ranked_nothing(history, hits_a=40, grades_a=0.5)
    _sql(history, "DELETE FROM eval_measurements WHERE run_id = 'r1' AND variant = 'b'")
    text = _refusal(lambda: accept_run(history.uri, "r1", answers_only=True))
    assert text.startswith("run 'r1' has no answer row to accept; its answer rows were not accepted: a deterministic")


def _gate_line(out: str) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith("the ") and "gate in force" in x]
    return line


def test_hole_4_answers_alone_does_not_claim_the_run_s_settings_are_in_force(history, monkeypatch, capsys):
    """r1 asked for hit@1/mrr 0.5 (loosened); nothing of its retrieval is accepted, so 0.05 stays in force (the
    numbers printed are right), yet the line says they are 'the accepted run's settings'."""
    history("r0", {"a": 40}, {"a": 0.9})
    history("r1", {"a": 40}, {"a": 0.9}, tolerances=previous_review.LOOSE)
    _sql(history, "DELETE FROM eval_measurements WHERE run_id = 'r1' AND aspect = 'retrieval'")
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1")
    assert code == 0 and "no retrieval variant (answers alone)" in out, out
    line = _gate_line(out)
    assert "hit@1 0.05" in line, line  # the gate in force is r0's, as it should be
    assert "the accepted run's settings" not in line and line.startswith("the retrieval gate in force stays"), line


def test_control_hole_4_the_answers_only_form_says_the_gate_stays(history, monkeypatch, capsys):
    history("r0", {"a": 40}, {"a": 0.9})
    history("r1", {"a": 40}, {"a": 0.9}, tolerances=previous_review.LOOSE)
    _sql(history, "DELETE FROM eval_measurements WHERE run_id = 'r1' AND aspect = 'retrieval'")
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1", "--answers-only")
    assert code == 0, out
    assert _gate_line(out).startswith("the retrieval gate in force stays as it was"), out


# --------------------------------------------------------------------------------------------
# 3a1e33e: acceptable_answer_failures as before, answers_not_taken kept to what it offers
# --------------------------------------------------------------------------------------------


def _old_retrieval() -> types.ModuleType:
    """eval_pipeline/verdict/retrieval.py as it was before the change reviewed, loaded in memory."""
    return module_at(_BEFORE, "eval_pipeline/verdict/retrieval.py")


def _problems(row) -> list[str]:
    return ["a problem"] if row["bad"] else []


def _random_case(rng: random.Random) -> dict:
    variants = [f"v{i}" for i in range(rng.randint(1, 3))]
    graders = ["deterministic", "static", "judge"]
    gates, missing, records = {}, [], []
    for v in variants:
        gates[v] = {}
        for g in rng.sample(graders, rng.randint(1, 3)):
            gates[v][g] = SimpleNamespace(passed=rng.random() < 0.4)
            kind = rng.choice(["taken", "problem", "no row", "missing", "missing with row"])
            if kind.startswith("missing"):
                missing.append((v, g, "r0"))
            if kind in ("taken", "problem", "missing with row"):
                records.append({"variant": v, "grader": g, "bad": kind == "problem" or rng.random() < 0.2})
    summary = pd.DataFrame({"variant": variants, "n_errored": [int(rng.random() < 0.15) for _ in variants],
                            "n_rerank_fallback": [int(rng.random() < 0.1) for _ in variants]})
    return {"summary": summary, "intervals": pd.DataFrame(), "baseline_comparison": pd.DataFrame(),
            "gates": {v: SimpleNamespace(passed=rng.random() < 0.6) for v in variants},
            "answers": SimpleNamespace(gates=gates, missing=missing, records=records),
            "run_id": rng.choice(["r1", "r1", "r1", ""]), "limited": rng.random() < 0.1,
            "maybe_renamed": {"v0": ["x"]} if rng.random() < 0.1 else {},
            "unmeasured": ["v1"] if rng.random() < 0.15 else []}


def test_held_acceptable_answer_failures_and_both_commands_are_as_before_3a1e33e(monkeypatch):
    """3000 random verdicts (graders passed/failed, each taken, with a problem, with no row, missing, missing
    beside a row; errored questions, fallbacks, limited, no id, maybe renamed, unmeasured): the old and new
    acceptable_answer_failures, accept_command and answers_accept_command are equal; and no variant offered
    the answers alone has a grader answers_not_taken names."""
    from eval_pipeline.verdict import retrieval as new

    old = _old_retrieval()
    monkeypatch.setattr(new, "yardstick_problems", _problems)
    monkeypatch.setattr(old, "yardstick_problems", _problems)
    rng = random.Random(18)
    seen = set()
    for _ in range(3000):
        case = _random_case(rng)
        before, after = old.RunVerdict(**case), new.RunVerdict(**case)
        assert after.acceptable_answer_failures == before.acceptable_answer_failures, case
        assert after.accept_command == before.accept_command, case
        assert after.answers_accept_command == before.answers_accept_command, case
        assert not set(after.acceptable_answer_failures) & set(after.answers_not_taken), case
        seen.add((bool(after.acceptable_answer_failures), bool(after.answers_not_taken)))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}


def test_held_answers_not_taken_reaches_only_the_variants_the_whole_command_names(history):
    """b's retrieval passed and its failed answer row has errored answers; a's retrieval failed, its answers
    fine: the console's accept line and a's check say nothing of b, b's check carries no accept, and the
    report's accept_leaves holds no b."""
    from eval_pipeline.reporting.console import console_summary
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict = history("r1", {"a": 20, "b": 40}, {"a": 0.9, "b": {"deterministic": {"pass_rate": 0.5,
                                                                                    "n_errored": 3}}})
    assert verdict.acceptable_failures == ["a"] and list(verdict.answers_not_taken) == ["b"]
    assert not any("not these answers" in line for line in console_summary(verdict).splitlines())
    report = verdict_output(verdict)
    assert report["accept_leaves"] == {}
    checks = variant_gate_checks(report, ["a", "b"])
    assert "not these answers" not in checks["a"][1]["accept"] and "accept" not in checks["b"][1]
    assert verdict.answers_accept_command is None  # b's answers alone: its failed row is no yardstick


def test_held_no_project_caller_of_accept_answer_run_expects_its_tuple():
    """accept_answer_run now raises the retrieval refusals: nothing in eval_pipeline/, assets/ or resources/
    calls it (the command line and the job call accept_run)."""
    calls = []
    for folder in ("eval_pipeline", "assets", "resources"):
        for path in (_ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if "accept_answer_run(" in line and "def accept_answer_run" not in line:
                    calls.append(f"{path.relative_to(_ROOT)}:{number}: {line.strip()}")
    assert calls == []


# --------------------------------------------------------------------------------------------
# hole 5: a missing grader's gate names the answers-only command where the variant has no row it takes
# --------------------------------------------------------------------------------------------


def _message_command(message: str) -> list[str]:
    return shlex.split(message.split("(python -m ", 1)[1].split(")", 1)[0])[1:]


def _static_missing(history, deterministic) -> object:
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 38}, {"a": {"deterministic": deterministic}})  # retrieval within tolerance
    assert verdict.gates["a"].passed and ("a", "static", "r0") in verdict.answers.missing
    return verdict


def test_hole_5_the_missing_grader_s_way_out_is_never_a_command_that_refuses(history):
    """Beside a row no acceptance takes, the answers alone cannot acknowledge the removal and the whole command
    would take more than the message is about: no command is named for this run, only a later run and why
    (tests/unit/verdict/test_acceptance_messages_attacks.py, the review of this fix)."""
    verdict = _static_missing(history, {"pass_rate": 0.9, "n_errored": 3})
    message = verdict.answers.gates["a"]["static"].message
    assert "(python -m " not in message, message
    assert ("(a later run: no acceptance of this run's answers takes it, none of its answer rows can be accepted)"
            in message), message
    assert "a static: missing from this run" in verdict.answers_not_taken["a"]  # the verdict knows it is not taken


def test_control_hole_5_beside_a_row_it_takes_the_way_out_is_taken(history, monkeypatch, capsys):
    verdict = _static_missing(history, 0.9)
    command = _message_command(verdict.answers.gates["a"]["static"].message)
    assert command == ["accept", "r1", "--variant", "a", "--answers-only"]
    code, out = _cli(history, monkeypatch, capsys, *command)
    assert code == 0 and _accepted(history) == [("a", "answers:deterministic")], out


def test_held_accept_answer_run_named_an_unknown_variant_raises_now_and_writes_nothing(history):
    """A behaviour change of 8dcf8d4 (fail closed, and no project caller): a variant the run neither ranked nor
    answered, named, was ([], []) and is now retrieval_to_accept's ValueError; a run with no run row still
    returns its tuple."""
    from eval_pipeline.history.answers import accept_answer_run

    previous_review._dropped(history)
    assert "has no variant(s) ['zz']" in _refusal(lambda: accept_answer_run(history.uri, "r1", variants=["zz"]))
    assert accept_answer_run(history.uri, "nope") == ([], [])
    assert _accepted(history) == []
