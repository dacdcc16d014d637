"""The forty-sixth review of the verdict: 712dd4a, c31a138, 1299ca1, a4749da (a gate left ``not_compared`` compared
with every full measurement recorded before under the variant's name, or of its configuration under a name not in
today's variants file) attacked along the paths a user takes: the console summary and the command it prints
(``reporting.console.console_summary``), the report's gate section (``reporting.report._gate_section``), and the
command line (``python -m eval_pipeline.history accept ...``: ``history.__main__.main``), each run judged as the
verdict asset does and recorded as the report does (the seventeenth review's ``history`` fixture).

Holes (closed since, their tests plain):

1. FAILS OPEN (retrieval and answers): a variant renamed while its old name is REUSED for a new configuration. r0
   {a, x} eligible; r1 lists x with a new configuration and y with x's r0 configuration (the old setting kept under
   a new name, the new one taking the name: "keep the old hybrid as hybrid-v1"), y at 0.50 where x's configuration
   measured 1.00 on the same benchmark: y is "a new variant (never recorded, and no vanished variant had its
   configuration)", first_run PASSED, its answers (0.50 beside x's 0.90) first_run PASSED, the verdict PASSED and
   r1 eligible: y's 0.50 is its yardstick from now on. The lookup of a configuration under another name reads only
   names NOT in today's variants file (``recorded_as_another``, ``recorded_measurements(live=...)``,
   ``answer_recorded_elsewhere``); a name still listed but now meaning another configuration retired its old one
   just as much. The same with an index sweep's keys (``prod|a`` kept as ``prod-old|a`` while the index ``prod``
   takes a new embedder: the partition key of the old index's pairs is reused).

Closed: a retired name is one today's variants file does not have WITH that configuration
(``history.measurements._OWN_OR_RETIRED_NAME`` reads today's names with each one's configuration, unknown for a
name not measured today, which then counts as live): a name kept for another setting retired its old one.

Held (plain tests): the console shows a drop against a retired name's recorded run (``FAILED (vs history)``, the
delta against it), prints ``accept r2 --variant y`` naming that variant alone, and that command ends it on the next
run (retrieval and answers); the command line refuses ``accept r2`` and ``accept latest`` whole, naming the command
with the history's options, and the command it names exits 0; the console's command for one variant's recorded drop
does not take another variant's measured drop (named, still failing on the next run); the report's gate section and
the gate rows name the recorded run and the retired name (``against: recorded``); a run with errored questions
measured against a recorded run still shows the drop (no command offered: "the reference can only be a later run"),
and the next clean run shows it again; an answer drop against a recorded row (its run not eligible: errored
answers): ``accept r1 --answers-only``, ``accept latest --answers-only`` and ``accept r1`` whole leave it ("answers
not accepted: y deterministic ... name the variant", naming ``accept r1 --variant y --answers-only``, or after the
whole ``accept r1``, ``accept r1 --variant y``); the command named last takes it and the next run passes. The index
sweep: an index removed retires its pairs only (the others judged against their own runs, no false "not new", the
printed command quoting ``'i2|b'``); an index renamed (same embedder and chunking) keeps its pairs' history (the drop
measured).

"""

from __future__ import annotations

import json
import shlex

import pytest

from tests.unit.verdict import test_answer_accept_attacks as atk17

history = atk17.history  # a run judged as the verdict asset does, recorded as the report does

pytestmark = pytest.mark.integration

GRADER = "deterministic"


def _as(config: str, rate: float) -> dict:
    """Answer grades whose row records ``config`` as the variant's configuration."""
    return {GRADER: {"pass_rate": rate, "variant_config": json.dumps({"engine": config})}}


def _measured(gate, base: str, now: str) -> None:
    assert not gate.passed and gate.state == "comparable", gate.message
    assert f"{base} -> {now}" in gate.message, gate.message


def _passed(gate) -> None:
    assert gate.passed and gate.state == "comparable", gate.message


def _cli_args(command: str) -> list[str]:
    """The arguments after ``python -m eval_pipeline.history`` of a printed command."""
    parts = shlex.split(command)
    assert parts[:3] == ["python", "-m", "eval_pipeline.history"], parts
    return parts[3:]


# ---------------------------------------------------------------------------------------------------------
# 1. a renamed variant whose old name is reused for a new configuration (fails open)
# ---------------------------------------------------------------------------------------------------------

NAMES = {"plain": ("x", "y"), "index-sweep": ("prod|a", "prod-old|a")}


def _reused(history, old: str, new: str):
    """r0 {b, old} eligible (old's configuration "c1"); r1: ``old`` now configuration "c2" (1.00), ``new`` has
    "c1" (old's r0 configuration) at 0.50, its answers 0.50 (old's were 0.90)."""
    assert history("r0", {"b": 40, old: 40}, {"b": 0.9, old: _as("c1", 0.9)}, configs={old: "c1"}).eligible
    return history("r1", {"b": 40, old: 40, new: 20}, {"b": 0.9, old: _as("c2", 0.9), new: _as("c1", 0.5)},
                   configs={old: "c2", new: "c1"})


@pytest.mark.parametrize("keys", list(NAMES.values()), ids=list(NAMES))
def test_a_rename_whose_old_name_is_reused_is_not_a_new_variant(history, keys):
    old, new = keys
    r1 = _reused(history, *keys)
    _passed(r1.gates[old])  # the reused name: its own history, a configuration change it reports
    gate = r1.gates[new]
    assert not gate.passed, f"{gate.state}: {gate.message}"  # today: first_run, 'a new variant (never recorded...)'
    _measured(gate, "1.0000", "0.5000")
    assert not r1.eligible


def test_a_rename_whose_old_name_is_reused_is_not_a_new_answer_measurement(history):
    r1 = _reused(history, "x", "y")
    gate = r1.answers.gates["y"][GRADER]
    assert not gate.passed, f"{gate.state}: {gate.message}"
    _measured(gate, "0.9000", "0.5000")


def test_a_rename_whose_old_name_is_reused_fails_the_console_verdict(history):
    from eval_pipeline.reporting.console import console_summary

    r1 = _reused(history, "x", "y")
    text = console_summary(r1)
    assert "eval-pipeline verdict: FAILED" in text, text


def test_held_control_1_the_old_name_retired_finds_the_configuration(history):
    """Control of 1: the same r1 with x removed from the file (not reused): y is not new and its drop is shown."""
    assert history("r0", {"b": 40, "x": 40}, {"b": 0.9, "x": _as("c1", 0.9)}, configs={"x": "c1"}).eligible
    r1 = history("r1", {"b": 40, "y": 20}, {"b": 0.9, "y": _as("c1", 0.5)}, configs={"y": "c1"})
    assert not r1.gates["y"].passed and not r1.eligible, r1.gates["y"].message


# ---------------------------------------------------------------------------------------------------------
# held: the console, the report and the command line on a drop against a retired name's recorded run
# ---------------------------------------------------------------------------------------------------------


def _renamed_drop(history, b_hits: int = 40):
    """r0 {a, b}; r1 adds x (1.00, answers 0.90) while a regresses: r1 not eligible, x never known; r2 renames x
    to y (x's configuration) at 0.50, answers 0.50: measured against x's r1 on both sides. ``b_hits``: b in r2."""
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    r1 = history("r1", {"a": 30, "b": 40, "x": 40}, {"a": 0.9, "b": 0.9, "x": _as("x", 0.9)}, configs={"x": "x"})
    assert not r1.eligible and r1.gates["x"].passed
    r2 = history("r2", {"a": 40, "b": b_hits, "y": 20}, {"a": 0.9, "b": 0.9, "y": _as("x", 0.5)}, configs={"y": "x"})
    _measured(r2.gates["y"], "1.0000", "0.5000")
    _measured(r2.answers.gates["y"][GRADER], "0.9000", "0.5000")
    return r2


def test_held_the_console_shows_the_recorded_drop_and_its_command_ends_it(history, monkeypatch, capsys):
    from eval_pipeline.reporting.console import console_summary

    r2 = _renamed_drop(history)
    text = console_summary(r2)
    row = next(line for line in text.splitlines() if line.startswith("y "))
    assert "FAILED (vs history)" in row and "(-0.500)" in row and "beyond its tolerance" in row, row
    assert r2.accept_command == "python -m eval_pipeline.history accept r2 --variant y", r2.accept_command
    assert f": {r2.accept_command}" in text and "it also accepts answers whose gate failed: y deterministic" in text
    assert "eval-pipeline verdict: FAILED" in text
    for whole in (["accept", "r2"], ["accept", "latest"]):  # refused whole, naming the command with the options
        code, out = atk17._cli(history, monkeypatch, capsys, *whole)
        assert code == 2 and "accept r2 --variant y" in out and "--url-env ATK17_URL" in out, out
    assert atk17._accepted(history, "r2") == []
    code, out = atk17._cli(history, monkeypatch, capsys, *_cli_args(r2.accept_command))
    assert code == 0, out
    assert atk17._accepted(history, "r2") == [("y", "answers:deterministic"), ("y", "retrieval")], out
    for run_id in ("r3", "r4"):
        r = history(run_id, {"a": 40, "b": 40, "y": 20}, {"a": 0.9, "b": 0.9, "y": _as("x", 0.5)}, configs={"y": "x"})
        _passed(r.gates["y"])
        _passed(r.answers.gates["y"][GRADER])
        assert "eval-pipeline verdict: PASSED" in console_summary(r)


def test_held_the_command_for_one_variant_does_not_take_another_s_drop(history, monkeypatch, capsys):
    """b dropped against its own yardstick in r2 beside y's recorded drop: the console names both; accepting y alone
    (what y's gate names) leaves b failing on the next run."""
    r2 = _renamed_drop(history, b_hits=30)
    assert not r2.gates["b"].passed and r2.gates["b"].state == "comparable", r2.gates["b"].message
    assert sorted(r2.acceptable_failures) == ["b", "y"]
    assert "accept r2 --variant y" in r2.gates["y"].message and "--variant b" not in r2.gates["y"].message
    code, out = atk17._cli(history, monkeypatch, capsys, "accept", "r2", "--variant", "y")
    assert code == 0, out
    assert {v for v, _ in atk17._accepted(history, "r2")} == {"y"}
    r3 = history("r3", {"a": 40, "b": 30, "y": 20}, {"a": 0.9, "b": 0.9, "y": _as("x", 0.5)}, configs={"y": "x"})
    _passed(r3.gates["y"])
    assert not r3.gates["b"].passed and r3.gates["b"].state == "comparable", r3.gates["b"].message


def test_held_the_report_and_the_check_name_the_recorded_run_and_the_retired_name(history):
    from eval_pipeline.reporting.report import _gate_section

    r2 = _renamed_drop(history)
    section = "\n".join(_gate_section(r2))
    line = next(ln for ln in section.splitlines() if ln.startswith("- `y`"))
    assert "FAILED" in line and "(comparable)" in line, line
    assert "`r1`" in section and "as 'x'" in section, section
    assert r2.previous["y"]["run_id"] == "r1"
    rows = [r for r in r2.gate_rows() if r["variant"] == "y" and r["passed"] is False]
    assert rows and {r["against"] for r in rows} == {"recorded"}, rows


def test_held_errored_questions_show_the_recorded_drop_offer_nothing_and_the_next_run_shows_it(history):
    history("r0", {"a": 40}, {"a": 0.9})
    assert not history("r1", {"a": 30, "x": 40}, {"a": 0.9, "x": _as("x", 0.9)}, configs={"x": "x"}).eligible
    r2 = history("r2", {"a": 40, "y": 20}, {"a": 0.9, "y": _as("x", 0.5)}, configs={"y": "x"},
                 frames={"y": atk17._frame("y", 20, errored=2)})
    _measured(r2.gates["y"], "1.0000", "0.5000")  # the drop is shown; no acceptance of r2 takes it, said so
    assert "y" not in r2.acceptable_failures and r2.accept_command is None
    assert "the reference can only be a later run" in r2.gates["y"].message, r2.gates["y"].message
    r3 = history("r3", {"a": 40, "y": 20}, {"a": 0.9, "y": _as("x", 0.5)}, configs={"y": "x"})
    _measured(r3.gates["y"], "1.0000", "0.5000")


# ---------------------------------------------------------------------------------------------------------
# held: the index sweep's keys (an index removed, an index renamed)
# ---------------------------------------------------------------------------------------------------------


def _sweep_r0(history):
    """r0: two indexes i1, i2 of variants a, b (each pair its own configuration), all at 1.00, eligible."""
    keys = {f"{i}|{v}": 40 for i in ("i1", "i2") for v in ("a", "b")}
    assert history("r0", keys, dict.fromkeys(keys, 0.9), configs={k: k for k in keys}).eligible


def test_held_an_index_removed_from_the_sweep_retires_its_pairs_only(history):
    """i1 removed: i1's pairs are retired names, none of i2's configurations; i2's pairs are judged against their
    own runs (no false drop, no false "not new"), i2|b's drop measured against its own previous run."""
    _sweep_r0(history)
    keys = {"i2|a": 40, "i2|b": 20}
    r1 = history("r1", keys, dict.fromkeys(keys, 0.9), configs={k: k for k in keys})
    _passed(r1.gates["i2|a"])
    _measured(r1.gates["i2|b"], "1.0000", "0.5000")
    assert "recorded" not in {r["against"] for r in r1.gate_rows() if r["variant"] == "i2|b"}
    assert _cli_args(r1.accept_command) == ["accept", "r1", "--variant", "i2|b"], r1.accept_command


def test_held_an_index_renamed_keeps_its_pairs_history(history):
    """i1 renamed i3 (same embedder and chunking: the pairs' configurations unchanged, only the keys): i3|a's drop
    is measured against i1|a's runs (the vanished name's configuration followed), not a first run."""
    _sweep_r0(history)
    keys = {"i3|a": 20, "i3|b": 40, "i2|a": 40, "i2|b": 40}
    configs = {"i3|a": "i1|a", "i3|b": "i1|b", "i2|a": "i2|a", "i2|b": "i2|b"}
    r1 = history("r1", keys, dict.fromkeys(keys, 0.9), configs=configs)
    gate = r1.gates["i3|a"]
    _measured(gate, "1.0000", "0.5000")
    assert not r1.eligible


# ---------------------------------------------------------------------------------------------------------
# held: --answers-only and latest on an answer drop against a recorded row
# ---------------------------------------------------------------------------------------------------------


def test_held_answers_only_and_latest_leave_a_recorded_answer_drop_and_its_named_command_ends_it(
        history, monkeypatch, capsys):
    errored = {GRADER: {"pass_rate": 0.9, "n_errored": 5, "n_scored": 45}}
    assert not history("r0", {"a": 40, "y": 40}, {"a": 0.9, "y": errored}).eligible  # y's row: errored answers
    r1 = history("r1", {"a": 40, "y": 40}, {"a": 0.9, "y": 0.5})
    _measured(r1.answers.gates["y"][GRADER], "0.9000", "0.5000")
    only, named = "accept r1 --variant y --answers-only", "accept r1 --variant y)"
    for whole, names in ((["accept", "r1", "--answers-only"], only), (["accept", "latest", "--answers-only"], only),
                         (["accept", "r1"], named)):
        code, out = atk17._cli(history, monkeypatch, capsys, *whole)
        assert code == 0 and "answers not accepted: y deterministic" in out and names in out, out
        assert ("y", "answers:deterministic") not in atk17._accepted(history, "r1"), whole
    code, out = atk17._cli(history, monkeypatch, capsys, *named.rstrip(")").split())  # the last one named
    assert code == 0 and ("y", "answers:deterministic") in atk17._accepted(history, "r1"), out
    r2 = history("r2", {"a": 40, "y": 40}, {"a": 0.9, "y": 0.5})
    _passed(r2.answers.gates["y"][GRADER])
    _passed(r2.gates["y"])
