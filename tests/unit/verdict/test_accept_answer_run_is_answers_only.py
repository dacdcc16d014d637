"""`history.answers.accept_answer_run` (the library's acceptance of a run's answers) is the answers-only
acceptance, not a second one beside it: every refusal of ``accept_run(..., answers_only=True)`` stands (a
limited run, errored questions, reranker fallbacks, an unnamed measured retrieval regression), and a row it
refuses names the ``--answers-only`` command. Before, it skipped the retrieval refusals and its refusals named
the whole command, whose acceptance also pins the variant's RETRIEVAL of that run: following the printed way
out of an answer drop made a within-tolerance retrieval step the bar, so the next step's regression passed.

Each run is judged and recorded as the verdict and report assets do (the ``history`` fixture of
test_answer_accept_attacks.py); what it still returns is its tuple ((variant, grader) accepted, refusals),
with nothing accepted returned rather than raised.
"""

from __future__ import annotations

import shlex

import pytest

from tests.unit.verdict import test_answer_accept_attacks as previous_review
from tests.unit.verdict.test_answer_accept_attacks import _accepted, _cli, _frame

pytestmark = pytest.mark.integration

history = previous_review.history  # its fixture: each run judged and recorded as the assets do


def _dropped(history):
    """r0: a and b 40/40, answers 0.9. r1: a's retrieval steps within tolerance (38/40), a's answers drop
    to 0.6 (a measured answer regression), b kept."""
    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    r1 = history("r1", {"a": 38, "b": 40}, {"a": 0.6, "b": 0.9})
    assert r1.gates["a"].passed and not r1.answers.variant_passed("a")
    return r1


def _way_out(refusal: str) -> list[str]:
    """The command a refusal names, its arguments after the module."""
    command = shlex.split(refusal.split("(python -m ", 1)[1].rsplit(")", 1)[0])
    assert command[0] == "eval_pipeline.history", refusal
    return command[1:]


def test_a_refused_answer_drop_names_the_answers_only_command(history):
    from eval_pipeline.history.answers import accept_answer_run

    _dropped(history)
    accepted, refused = accept_answer_run(history.uri, "r1")
    assert accepted == [("b", "deterministic")]
    assert [r.split(":", 1)[0] for r in refused] == ["a deterministic"]
    assert _way_out(refused[0]) == ["accept", "r1", "--variant", "a", "--answers-only"]


def test_following_the_way_out_keeps_the_retrieval_reference(history, monkeypatch, capsys):
    """The end to end of the fail-open path: the refusal's command, run as printed, takes a's answers alone,
    and r2's retrieval at 36/40 (-0.10 from r0, -0.05 from r1) still fails against r0."""
    from eval_pipeline.history.answers import accept_answer_run

    _dropped(history)
    _, refused = accept_answer_run(history.uri, "r1")
    code, out = _cli(history, monkeypatch, capsys, *_way_out(refused[0]))
    assert code == 0, out
    assert ("a", "retrieval") not in _accepted(history) and ("a", "answers:deterministic") in _accepted(history)
    assert not history("r2", {"a": 36, "b": 40}, {"a": 0.6, "b": 0.9}).gates["a"].passed


@pytest.mark.parametrize("case, why", [
    ("limited run", "is a limited run"),
    ("errored questions", "has errored questions for variant(s) ['a']"),
    ("reranker fallbacks", "has reranker fallbacks for variant(s) ['a']"),
])
def test_the_retrieval_refusals_stand_and_nothing_is_written(history, case, why):
    from eval_pipeline.history.answers import accept_answer_run, accept_run

    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    frame = {"errored questions": _frame("a", 40, errored=2), "reranker fallbacks": _frame("a", 40, fallback=2)}
    history("r1", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9}, limited=case == "limited run",
            frames={"a": frame[case]} if case in frame else None)
    for accept in (lambda: accept_answer_run(history.uri, "r1", variants=["a"]),
                   lambda: accept_run(history.uri, "r1", variants=["a"], answers_only=True)):
        with pytest.raises(ValueError) as refused:
            accept()
        assert why in str(refused.value)
    assert _accepted(history) == []


def test_an_unnamed_retrieval_regression_refuses_the_whole_run_as_the_command_line_does(history):
    from eval_pipeline.history.answers import accept_answer_run, accept_run

    history("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    r1 = history("r1", {"a": 30, "b": 40}, {"a": 0.9, "b": 0.9})
    assert not r1.gates["a"].passed
    for accept in (lambda: accept_answer_run(history.uri, "r1"),
                   lambda: accept_run(history.uri, "r1", answers_only=True)):
        with pytest.raises(ValueError, match="a measured regression"):
            accept()
    assert _accepted(history) == []


def test_what_it_takes_is_what_the_answers_only_acceptance_takes(history):
    """Named, it writes exactly the answers-only acceptance's rows; with nothing to accept it returns
    nothing and the reasons (its tuple), where accept_run raises them."""
    from eval_pipeline.history.answers import accept_answer_run

    _dropped(history)
    assert accept_answer_run(history.uri, "r1", variants=["a"]) == ([("a", "deterministic")], [])
    assert _accepted(history) == [("a", "answers:deterministic")]
    history("r2", {"a": 40, "b": 40}, {"a": 0.6, "b": 0.6}, answers=False)  # the run row, no answer row
    assert accept_answer_run(history.uri, "r2", variants=["a"]) == ([], [])
    assert _accepted(history, "r2") == []
