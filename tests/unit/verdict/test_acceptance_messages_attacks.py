"""Attacks on afc6216 (the review of the answers-only library acceptance and its five holes closed): what the
messages and checks say an acceptance takes, against what the command they name does when run as printed.

Attacked, each run judged and recorded as the assets do (the ``history`` fixture of test_answer_accept_attacks.py):
a missing grader's way out (verdict/answers.py ``taken``) beside each yardstick problem of a row (errored answers,
failed grading calls, NaN pass rate, unknown generator, a limited row, nothing scored), alone or beside a fine row,
followed through the command line; what else that command takes (the tolerances the run loosened, another grader's
measured regression); a not-compared row's own way out; retrieval refusals `taken` does not see;
``removals_acknowledged`` on the console, the variant check and the answer check (a renamed variant matched by
configuration, a variant with no answer row at all, two variants on two lines) against what the next run judges;
``NameTheRun``'s kind in the library, the command line (``latest``'s refusal) and the job (its Failure and its
Launchpad config); ``judge_answer_run``'s rows per frame against the code before afc6216 (loaded in memory) on
460 random edge frames.

Holes (strict xfails, each failing on its assertion with --runxfail, each beside a passing control or fact).
All four closed since by the lead, their tests now plain: every answer gate's way out is chosen in one place,
``verdict.answers._name_ways_out``, once every gate of the run is known. Where no acceptance of this run takes
what the gate is about (the variant refused whole, ``RunVerdict.acceptance_refusals``: errored questions,
fallbacks, a limited run...; the gate's own row refused; a grader missing beside rows none of which is taken)
it names no command for this run, only "a later run" and why (holes 1, 3, 4: nothing to follow that takes more,
or that is refused); the whole command is named only for a grader missing from a variant that answered nothing,
saying it also makes the run the retrieval reference with the tolerances and strictness it ran with; an
answers-only command says which other failed graders of the variant it also takes (hole 2).

1. FAILS OPEN (message): beside no row an acceptance takes, a missing grader's message names the whole command
   and says it "accepts its retrieval too (this run becomes its retrieval reference)" (verdict/answers.py:157-161),
   not that the accepted run stands for the tolerances it ASKED for: r1 loosened hit@1/mrr 0.05 -> 0.5 (judged
   at 0.05 "until a run under the new ones is accepted"); following the static message as printed puts 0.5 in
   force, and r2 at 28/40 (-0.30) passes where without it it fails. Tests:
   test_hole_1_*; control test_control_hole_1_*; fact test_fact_hole_1_*.
2. FAILS OPEN (message): beside a row it takes, the missing grader's ``--answers-only`` command
   (verdict/answers.py:152-165) takes every row of the variant, a measured regression of another grader
   included (named, so not refused: history/answers.py:650-652); the static message says only "to acknowledge
   their removal". Following it, deterministic's 0.9 -> 0.5 is the yardstick and r2 at 0.5 passes. The
   console's answers-only line and the answer check offer the same command beside the drop (so the report as a
   whole shows it); the message alone does not. Pre-existing in kind (the command was named before afc6216),
   kept by its new rule. Tests: test_hole_2_*; control test_control_hole_2_*; fact test_fact_hole_2_*.
3. (offered, refused; fail closed) a not-compared answer ROW (its set changed) with errored answers or failed
   grading calls names "accept a run of it ... (python -m eval_pipeline.history accept r1 --variant a
   --answers-only)" (gates/answers.py:69 made exact by verdict/answers.py:236), which refuses that very row
   (exit 2, "has no answer row to accept of a"): the row-level twin of the previous review's hole 5, which
   afc6216 closed for a missing grader only. Tests: test_hole_3_* (2 cases); control test_control_hole_3_*.
4. (offered, refused; fail closed) `taken` (verdict/answers.py:145-146) looks at the answer rows only: beside
   errored retrieval questions of the variant the missing grader's message names ``accept r1 --variant a
   --answers-only``, which retrieval_to_accept refuses (errored questions; the whole command too), while the
   verdict offers no acceptance of a anywhere else. Test: test_hole_4_*; control test_control_hole_4_*.

Held (plain tests): for each of the six yardstick problems, alone or beside a fine row, the missing grader's
command is of the kind the acceptance takes, exits 0, takes what it says, and the next run without the grader has
no gate for it; the removal line is said and made for a renamed variant (a2 inherits a, matched by
configuration) and for a variant with no answer row whose retrieval failed (console and variant check); each
accept line and check names only its own variants' removals; NameTheRun: the library's and the command line's
whole refusals (and ``latest`` with a variant) name no --answers-only, ``latest --answers-only`` keeps it, and
the job's Failure and Launchpad config follow its ``answers_only`` both ways; rows per frame judge exactly as
the concatenated frames did on 460 random frames (400 without a history, 60 against one), a missing grader's
message compared up to its command; the only other difference: frames whose columns differ (a count column
absent from one) raised ValueError before (the concat's NaN in int()) and are judged now, each frame as it is
judged alone (a frame without n_grader_failed was always read as 0 failed calls).
"""

from __future__ import annotations

import json
import math
import random
import re
import shlex
import types

import pandas as pd
import pytest

from tests.old_code import module_at
from tests.unit.verdict import test_answer_accept_attacks as previous_review
from tests.unit.verdict.test_answer_accept_attacks import LOOSE, YARDSTICKS, _accepted, _cli

pytestmark = pytest.mark.integration

history = previous_review.history  # its fixture: each run judged and recorded as the assets do

_BEFORE = "afc6216^"


def _command(message: str) -> list[str]:
    """The command a gate's message names (the first), its arguments after the module."""
    words = shlex.split(message.split("(python -m ", 1)[1].split(")", 1)[0])
    assert words[0] == "eval_pipeline.history", message
    return words[1:]


# --------------------------------------------------------------------------------------------
# hole 1: the missing grader's whole command takes the run's loosened tolerances, unsaid
# --------------------------------------------------------------------------------------------


def _static_missing_loosened(history):
    """r0: a 40/40, deterministic and static 0.9. r1 asks hit@1/mrr 0.5 (judged at 0.05 until a run is
    accepted): a 40/40 passes, static is gone, deterministic's row has errored answers (no row taken)."""
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": {"pass_rate": 0.9, "n_errored": 3}}},
                      tolerances=LOOSE)
    assert verdict.gates["a"].passed and "loosened" in verdict.gates["a"].message
    return verdict


def _r2_loosened(history, hits: int = 28):
    return history("r2", {"a": hits}, {"a": {"deterministic": 0.9}}, tolerances=LOOSE).gates["a"]


def test_hole_1_beside_no_row_taken_the_missing_grader_names_no_command_for_this_run(history):
    """Closed: the whole command (which put r1's loosened tolerances in force) is no longer named; the message
    says a later run, and why this one cannot."""
    verdict = _static_missing_loosened(history)
    message = verdict.answers.gates["a"]["static"].message
    assert "(python -m " not in message, message
    assert ("(a later run: no acceptance of this run's answers takes it, none of its answer rows can be accepted)"
            in message), message


def test_a_grader_missing_from_a_variant_that_answered_nothing_names_the_whole_command_and_what_it_takes(
        history, monkeypatch, capsys):
    """Only the whole acceptance can acknowledge it; the message says it also makes r1 a's retrieval reference,
    and the tolerances and strictness r1 ran with the gate in force for every variant of the project (an accepted
    run stands for the settings it asked for: history.runs._pinned_gate), not for a alone."""
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict = history("r1", {"a": 40, "b": 40}, {"b": 0.9}, tolerances=LOOSE)
    message = verdict.answers.gates["a"]["deterministic"].message
    assert _command(message) == ["accept", "r1", "--variant", "a"], message
    assert ("it also makes this run the variant's retrieval reference, and the tolerances and strictness this run "
            "ran with the gate in force for every variant of the project") in message, message


def test_control_hole_1_without_the_acceptance_the_loosened_drop_fails(history):
    _static_missing_loosened(history)
    gate = _r2_loosened(history)
    assert not gate.passed and gate.state == "comparable", gate.message


# --------------------------------------------------------------------------------------------
# hole 2: the missing grader's answers-only command takes another grader's measured regression, unsaid
# --------------------------------------------------------------------------------------------


def _static_missing_beside_a_drop(history):
    """r0: a deterministic and static 0.9; r1: static gone, deterministic 0.9 -> 0.5 (a measured regression)."""
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": 0.5}})
    det = verdict.answers.gates["a"]["deterministic"]
    assert not det.passed and det.state == "comparable" and "accept" not in det.message, det.message
    return verdict


def test_hole_2_the_missing_grader_s_answers_only_command_says_it_takes_the_other_grader_s_drop(history):
    verdict = _static_missing_beside_a_drop(history)
    message = verdict.answers.gates["a"]["static"].message
    assert _command(message) == ["accept", "r1", "--variant", "a", "--answers-only"], message
    assert "that command also accepts this run's deterministic of the variant, whose gate failed" in message


def test_control_hole_2_without_the_acceptance_the_next_drop_fails(history):
    _static_missing_beside_a_drop(history)
    gate = history("r2", {"a": 40}, {"a": {"deterministic": 0.5}}).answers.gates["a"]["deterministic"]
    assert not gate.passed and gate.state == "comparable", gate.message


def test_fact_hole_2_following_the_static_message_accepts_the_drop(history, monkeypatch, capsys):
    verdict = _static_missing_beside_a_drop(history)
    code, out = _cli(history, monkeypatch, capsys, *_command(verdict.answers.gates["a"]["static"].message))
    assert code == 0 and _accepted(history) == [("a", "answers:deterministic")], out
    gate = history("r2", {"a": 40}, {"a": {"deterministic": 0.5}}).answers.gates["a"]["deterministic"]
    assert gate.passed, gate.message  # the 0.9 -> 0.5 drop is the yardstick now
    # the answer check and the console do offer this command for a's answers (the drop shown beside it)
    assert verdict.answers_accept_command.endswith("accept r1 --variant a --answers-only")


# --------------------------------------------------------------------------------------------
# hole 3: a not-compared ROW with a yardstick problem names the answers-only command that refuses it
# --------------------------------------------------------------------------------------------


ROW_PROBLEMS = {"errored answers": {"n_errored": 3}, "grading calls failed": {"n_grader_failed": 2}}


def _not_compared_row(history, problem: dict):
    """r0: a deterministic on set fp-1; r1: the set changed (fp-2: not compared, 'accept a run of it') and the
    row has `problem`."""
    history("r0", {"a": 40}, {"a": 0.9})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": {"pass_rate": 0.9, "set_fingerprint": "fp-2",
                                                                 **problem}}})
    gate = verdict.answers.gates["a"]["deterministic"]
    assert not gate.passed and gate.state == "not_compared", gate.message
    return gate.message


@pytest.mark.parametrize("problem", list(ROW_PROBLEMS))
def test_hole_3_a_problem_row_names_no_command_that_refuses_it(history, problem):
    """Closed: the row no acceptance takes names a later run and why, no command for this one."""
    message = _not_compared_row(history, ROW_PROBLEMS[problem])
    assert "(python -m " not in message, message
    assert ("accept a run of it once its numbers are intended and the report has recorded it (a later run: no "
            "acceptance of this run's answers "
            "takes it, " in message and "could not be generated (or graded)" in message), message


def test_control_hole_3_a_row_without_a_problem_is_taken(history, monkeypatch, capsys):
    message = _not_compared_row(history, {})
    code, out = _cli(history, monkeypatch, capsys, *_command(message.split("accept a run of it", 1)[1]))
    assert code == 0 and _accepted(history) == [("a", "answers:deterministic")], out


# --------------------------------------------------------------------------------------------
# hole 4: `taken` knows nothing of the retrieval refusals: a command neither acceptance runs
# --------------------------------------------------------------------------------------------


def test_hole_4_beside_errored_questions_the_missing_grader_names_no_command(history):
    """Closed: the variant's acceptance is refused whole (acceptance_refusals), so no command is named."""
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": 0.9}},
                      frames={"a": previous_review._frame("a", 40, errored=2)})
    message = verdict.answers.gates["a"]["static"].message
    assert "(python -m " not in message and "errored questions" in message, message


def test_control_hole_4_the_verdict_offers_no_acceptance_of_that_variant(history):
    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 40}, {"a": {"deterministic": 0.9}},
                      frames={"a": previous_review._frame("a", 40, errored=2)})
    assert verdict.acceptable_failures == [] and verdict.acceptable_answer_failures == []
    assert verdict.accept_command is None and verdict.answers_accept_command is None


# --------------------------------------------------------------------------------------------
# held: `taken` agrees with what the acceptance takes, for every yardstick problem of a row
# --------------------------------------------------------------------------------------------


PROBLEMS = {"errored answers": {"n_errored": 3}, "grading calls failed": {"n_grader_failed": 2},
            "NaN pass rate": {"pass_rate": math.nan}, "unknown generator": {"generator": None},
            "limited row": {"limited": True}, "nothing scored": {"n_scored": 0}}


@pytest.mark.parametrize("beside", ["the problem row alone", "a fine row too"])
@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_held_the_missing_grader_s_way_out_is_of_the_kind_the_acceptance_takes(history, monkeypatch, capsys,
                                                                                problem, beside):
    """judge is gone; deterministic's row has `problem` (beside static's fine row, or alone): the message names
    the answers-only command exactly when the acceptance takes a row of a (static's): run as printed it is taken,
    and the next run without judge has no judge gate; else no command for this run (a later run, and why)."""
    graders = {"deterministic": 0.9, "judge": 0.9, **({"static": 0.9} if beside != "the problem row alone" else {})}
    history("r0", {"a": 40}, {"a": graders})
    now = {"deterministic": {"pass_rate": 0.9, **PROBLEMS[problem]},
           **({"static": 0.9} if beside != "the problem row alone" else {})}
    verdict = history("r1", {"a": 40}, {"a": now})
    assert ("a", "judge", "r0") in verdict.answers.missing
    message = verdict.answers.gates["a"]["judge"].message
    if beside == "a fine row too":
        command = _command(message)
        code, out = _cli(history, monkeypatch, capsys, *command)
        assert code == 0, out
        assert command == ["accept", "r1", "--variant", "a", "--answers-only"], message
        assert _accepted(history) == [("a", "answers:static")], out
        # deterministic's failed row is left (not offered on the console); judge's removal is not
        assert [w.split(":")[0] for w in verdict.answers_not_taken["a"]] == ["a deterministic"]
        assert verdict.removals_acknowledged(["a"]) == ["a judge (last measured in run r0)"]
        assert "judge" not in history("r2", {"a": 40}, {"a": {k: 0.9 for k in now}}).answers.gates["a"]
    else:  # no row of a taken: no command for this run, and the removal stays unacknowledged
        assert "(python -m " not in message and "(a later run: no acceptance of this run's answers takes it" in message
        assert "a judge: missing from this run" in verdict.answers_not_taken["a"]
        assert "judge" in history("r2", {"a": 40}, {"a": {k: 0.9 for k in now}}).answers.gates["a"]


# --------------------------------------------------------------------------------------------
# held: removals said where the acceptance makes them, and made
# --------------------------------------------------------------------------------------------


def test_held_a_renamed_variant_s_removal_is_said_and_made(history, monkeypatch, capsys):
    """a2 inherits a (same configuration): static, measured under a, is missing; the answers-only line names a2
    and says so; run, the next a2 run without static has no static gate."""
    from eval_pipeline.reporting.console import console_summary

    history("r0", {"a": 40}, {"a": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a2": 40}, {"a2": {"deterministic": 0.9}}, configs={"a2": "a"})
    assert verdict.inherits == {"a2": "a"} and verdict.answers.missing == [("a2", "static", "r0")]
    lines = console_summary(verdict).splitlines()
    at = lines.index(next(line for line in lines if line.endswith("accept r1 --variant a2 --answers-only")))
    assert lines[at + 1].endswith("missing from this run: a2 static (last measured in run r0)"), lines
    code, out = _cli(history, monkeypatch, capsys, *shlex.split(verdict.answers_accept_command)[3:])
    assert code == 0 and _accepted(history) == [("a2", "answers:deterministic")], out
    later = history("r2", {"a2": 40}, {"a2": {"deterministic": 0.9}}, configs={"a2": "a"})
    assert "static" not in later.answers.gates.get("a2", {}), later.answers.gates


def test_held_a_variant_without_answer_rows_whose_retrieval_failed(history, monkeypatch, capsys):
    """b has no answer row in r1 (its deterministic measured in r0) and its retrieval failed: the whole line and
    b's variant check say the removal is acknowledged, leave nothing; run, r2 of b without answers passes."""
    from eval_pipeline.reporting.console import console_summary
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict = history("r1", {"a": 40, "b": 20}, {"a": 0.9})
    assert verdict.acceptable_failures == ["b"] and verdict.whole_acceptance_leaves == {}
    said = "b deterministic (last measured in run r0)"
    assert any(line.endswith(said) for line in console_summary(verdict).splitlines())
    assert said in variant_gate_checks(verdict_output(verdict), ["b"])["b"][1]["accept"]
    code, out = _cli(history, monkeypatch, capsys, *shlex.split(verdict.accept_command)[3:])
    assert code == 0 and _accepted(history) == [("b", "retrieval")], out
    later = history("r2", {"a": 40, "b": 20}, {"a": 0.9})
    assert later.gates["b"].passed and "b" not in later.answers.gates, later.answers.gates


def test_held_no_removal_said_of_a_variant_the_command_does_not_name(history):
    """a's retrieval failed (whole line), b lost static beside a fine row (answers-only line): each line names
    only its own variant's removal; the answers-only check of b says b's, a's variant check none of b's."""
    from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks
    from eval_pipeline.reporting.console import console_summary
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    history("r0", {"a": 40, "b": 40}, {"a": {"deterministic": 0.9, "static": 0.9},
                                       "b": {"deterministic": 0.9, "static": 0.9}})
    verdict = history("r1", {"a": 20, "b": 40}, {"a": {"deterministic": 0.9}, "b": {"deterministic": 0.9}})
    lines = console_summary(verdict).splitlines()
    removed = [line for line in lines if "acknowledges the removal" in line]
    assert len(removed) == 2 and removed[0].endswith(": a static (last measured in run r0)"), removed
    assert removed[1].endswith(": b static (last measured in run r0)"), removed
    a_check = variant_gate_checks(verdict_output(verdict), ["a"])["a"][1]["accept"]
    b_check = answer_gate_checks(answer_check_output(verdict), ["a", "b"])["b"][1]["accept"]
    assert "b static" not in a_check and "a static" not in b_check and "b static" in b_check


# --------------------------------------------------------------------------------------------
# held: NameTheRun's kind is the refused acceptance's, in the library, the command line and the job
# --------------------------------------------------------------------------------------------


def _regression(history):
    history("r0", {"a": 40}, {"a": 0.9})
    history("r1", {"a": 30}, {"a": 0.9})


def test_held_the_whole_refusal_names_the_whole_command_everywhere(history, monkeypatch, capsys):
    from eval_pipeline.history.answers import accept_run

    _regression(history)
    with pytest.raises(ValueError) as refused:
        accept_run(history.uri, "r1")
    assert "--answers-only" not in str(refused.value) and "accept r1 --variant a (and any others)" in str(
        refused.value)
    code, out = _cli(history, monkeypatch, capsys, "accept", "r1")
    assert code == 2 and "--answers-only" not in out and "accept r1 --variant a" in out, out
    code, out = _cli(history, monkeypatch, capsys, "accept", "latest", "--variant", "a")
    assert code == 2 and "--answers-only" not in out and "accept r1 --variant a" in out, out
    assert _accepted(history) == []


def test_held_latest_refusal_keeps_answers_only_on_the_command_line(history, monkeypatch, capsys):
    _regression(history)
    code, out = _cli(history, monkeypatch, capsys, "accept", "latest", "--variant", "a", "--answers-only")
    assert code == 2 and "accept r1 --variant a --answers-only" in out, out
    assert _accepted(history) == []


@pytest.mark.parametrize("answers_only", [True, False])
def test_held_the_job_s_latest_refusal_is_of_its_kind(history, answers_only):
    from tests.unit.verdict import test_verdict_attacks_thirtyfifth as thirtyfifth

    _regression(history)
    result = thirtyfifth._job(history.uri, run_id="latest", variants=["a"], answers_only=answers_only)
    assert not result.success
    if answers_only:
        assert "accept r1 --variant a --answers-only" in result.text, result.text
        assert '{run_id: "r1", variants: ["a"], answers_only: true}' in result.text, result.text
    else:
        assert "--answers-only" not in result.text and "answers_only: true" not in result.text, result.text
        assert '{run_id: "r1", variants: ["a"]}' in result.text, result.text
    assert _accepted(history) == []


# --------------------------------------------------------------------------------------------
# held: rows built per frame judge as the concatenated frames did (the code before afc6216, in memory)
# --------------------------------------------------------------------------------------------


def _old_answers() -> types.ModuleType:
    """eval_pipeline/verdict/answers.py as it was before the change reviewed, loaded in memory."""
    return module_at(_BEFORE, "eval_pipeline/verdict/answers.py")


def _random_frames(rng: random.Random) -> dict[str, pd.DataFrame]:
    """1-3 variants, each 1-3 graders, columns drawn from the edges: NaN metrics and counts, None/NaN/empty
    generator, limited, nothing scored, another set, a count column absent from some frames, float counts."""
    from tests.verdict_frames import answer_frame_with

    frames = {}
    for i in range(rng.randint(1, 3)):
        variant = f"v{i}"
        rows = []
        for grader in rng.sample(sorted(YARDSTICKS), rng.randint(1, 3)):
            columns = {"yardstick": YARDSTICKS[grader], "grader": grader,
                       "n_errored": rng.choice([0, 0, 0, 2]), "n_grader_failed": rng.choice([0, 0, 0, 1]),
                       "generator": rng.choice(["extractive:v1"] * 4 + [None, math.nan, ""]),
                       "limited": rng.choice([False] * 5 + [True]), "n_scored": rng.choice([50] * 5 + [0]),
                       "set_fingerprint": rng.choice(["fp-1"] * 4 + ["fp-2"])}
            rows.append(answer_frame_with(variant, rng.choice([0.9, 0.85, 0.5, 0.0, math.nan]), **columns))
        frame = pd.concat(rows, ignore_index=True)
        for column in ("n_grader_failed", "n_prompts"):
            if rng.random() < 0.15:
                frame = frame.drop(columns=[column])
        if rng.random() < 0.2:
            frame["n_errored"] = frame["n_errored"].astype(float)
        if "n_grader_failed" in frame and rng.random() < 0.1:
            frame.loc[frame.index[0], "n_grader_failed"] = math.nan
        frames[variant] = frame
    return frames


def _unhedged(message: str) -> str:
    """``message`` without the words every offer has said since daf27e8: that the command works once the
    report has recorded the run."""
    return message.replace(" and the report has recorded it", "").replace(" once the report has recorded it", "")


def _judged(module, frames, connection_string):
    try:
        verdict = module.judge_answer_run(frames, order=sorted(frames), corpus_signature="corpus-1",
                                          tolerances=previous_review.ANSWER_TOL, strict=False,
                                          connection_string=connection_string, run_id="r9")
    except Exception as exc:  # noqa: BLE001 - the refusal is compared too
        return ("raised", type(exc).__name__)
    # the way out a gate names is afc6216's change and its review's (`_name_ways_out`): compared up to it, and
    # without daf27e8's "once the report has recorded it" (said of every offer since, on purpose)
    gates = {(v, g): (x.passed, x.state, re.split(r" \((?:python -m |a later run: )", _unhedged(x.message))[0],
                      json.dumps(x.rows, default=repr, sort_keys=True))
             for v, graders in verdict.gates.items() for g, x in graders.items()}
    # and without the engine that ranked the answers' context, which a record holds since the fortieth review
    # (cc27df2), on purpose
    records = [{**r, "provenance": {k: v for k, v in r["provenance"].items() if k != "engine_identity"}}
               for r in verdict.records]
    return ("judged", verdict.evaluated, verdict.reason, gates, verdict.missing,
            json.dumps(records, default=repr, sort_keys=True))


def test_held_rows_per_frame_judge_as_the_concatenated_frames(history):
    """400 random sets of frames judged without a history and 60 against a recorded one (r0: every variant and
    grader at 0.9): the verdict before afc6216 and now are equal (a missing grader's message up to its command,
    which afc6216 changed on purpose), or both raise the same error, except where
    the frames' columns differ and the old concat filled a NaN count into a frame that had no such column (old:
    ValueError, int(NaN); now: that frame's own rows, the count absent read as 0, as a frame alone always was)."""
    from eval_pipeline.verdict import answers as new

    old = _old_answers()
    history("r0", {f"v{i}": 40 for i in range(3)},
            {f"v{i}": {g: 0.9 for g in YARDSTICKS} for i in range(3)})
    rng = random.Random(1806)
    outcomes, differing = set(), 0
    for n in range(460):
        frames = _random_frames(rng)
        uri = history.uri if n >= 400 else None
        before, after = _judged(old, frames, uri), _judged(new, frames, uri)
        outcomes.add((before[0], after[0], uri is None))
        if before != after:
            columns = {tuple(sorted(f.columns)) for f in frames.values()}
            assert before == ("raised", "ValueError") and after[0] == "judged" and len(columns) > 1, (frames, before,
                                                                                                      after)
            alone = [_judged(new, {v: f}, uri) for v, f in frames.items()]
            assert all(x[0] == "judged" for x in alone)
            differing += 1
    assert ("judged", "judged", True) in outcomes and ("judged", "judged", False) in outcomes, outcomes
    assert ("raised", "raised", True) in outcomes, outcomes  # a NaN count in a frame's own column raises still
