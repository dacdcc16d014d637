"""The gate fails closed: when the benchmark or a variant's identity changes, a variant that has
ever had an eligible run is never passed for lack of a comparison.

Each test is a sequence of `dagster job execute` runs on the tiny fixture (tests/fixtures/tiny_*),
in a state dir (and history) of its own (all but 5. continue from a copy of one shared first run,
`started`: a brand-new project's run of `dense` and `bm25`, made once per session), asserting the exit code, each variant's gate line in
results.md (`- `V`: **passed|FAILED** (STATE)`) and, where the contract names them, the history
rows (`eval_runs`, `eval_measurements`). The retrieval tests run without answers (`golden_prompts:
source: none`), so only the retrieval gate decides their exit code. A deterministic regression:
`abstain_below: 5.0` on the dense variant (no score reaches it: every answerable question a miss).

0. a brand-new project                    exit 0, every variant `first_run`
1. reworded questions (re-stamped)         unchanged variants: exit 0, every variant `paired`
                                           passed; reworded again with `dense` regressed: exit 1,
                                           `dense` `paired` FAILED, `bm25` `paired` passed
2. one gold edited + a regression          exit 1, `dense` FAILED (`paired` or `not_compared`)
3. a tuned hybrid added (the scored subset exit 1, `dense` FAILED, `bm25` `paired` passed, the new
   shrinks) + a regression                 hybrid `first_run` passed
4. `dense` renamed and regressed           exit 1, `not_compared`, with and without `gate.strict`;
   (`dense-v2`, `dense` gone)              accepted with the history CLI, the next identical run
                                           exits 0 (`comparable`); a rename with the same
                                           configuration exits 0 (`comparable`, history kept)
5. answers: a loosened golden set (every   exit 1, answer gate `not_compared`, strict or not; the
   assertion `contains "the"`, re-stamped  answer rows of the earlier run whose retrieval gate
   under the same set id)                  failed are all `eligible = false`
6. accept run B, then the older run A      the next run is judged against A
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from eval_pipeline.questions.golden import Assertion, load_golden_prompts, write_golden_prompts
from eval_pipeline.questions.sets import write_question_set
from eval_pipeline.store.database import EmbeddedPostgres
from tests.integration.cli import FIXTURES
from tests.orchestration import verdict_runs
from tests.orchestration.verdict_runs import BM25, DENSE, REGRESSED

pytestmark = pytest.mark.integration

TUNED_HYBRID = {"engine": "hybrid", "name": "hybrid-tuned", "tune": "rrf_k"}


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


class Project(verdict_runs.Project):
    """A project whose history and answer checks the tests read."""

    def _rows(self, query: str, run_id: str) -> list[dict]:
        with psycopg.connect(EmbeddedPostgres(self.env["EVAL_PIPELINE_STATE_DIR"]).uri("eval"),
                             row_factory=dict_row) as conn:
            return conn.execute(query, (run_id,)).fetchall()

    def history_row(self, run_id: str) -> dict:
        rows = self._rows("SELECT run_id, seq, eligible, provenance FROM eval_runs WHERE run_id = %s", run_id)
        assert len(rows) == 1, f"run {run_id} has {len(rows)} history rows"
        return rows[0]

    def answer_rows(self, run_id: str) -> list[dict]:
        return self._rows("SELECT variant, substr(aspect, 9) AS grader, eligible FROM eval_measurements"
                          " WHERE run_id = %s AND aspect LIKE 'answers:%%'", run_id)

    def answer_checks(self, run_id: str) -> dict[str, tuple[bool, dict]]:
        """answer_gate__V check name -> (passed, metadata values), from the run's event log."""
        return {name: (e.passed, {k: v.value for k, v in e.metadata.items()})
                for name, e in self.checks(run_id).items() if name.startswith("answer_gate__")}


@pytest.fixture
def project(tmp_path, job_env):
    return Project(tmp_path, job_env("state"))


@pytest.fixture
def started(tmp_path, job_env, first_run):
    """(project, its first run): a brand-new project's first run (`dense` and `bm25`, no answers),
    made once per session; the project continues from a copy of the state it left."""
    first = first_run.get()
    return verdict_runs.continue_after(first, tmp_path, job_env, Project), first.run


def rewritten_questions(path: Path, tiny_questions, tiny_snapshot, *, prefix: str = "",
                        gold: dict[str, tuple[str, ...]] | None = None) -> Path:
    """The tiny question set with every text prefixed and/or some golds replaced, re-stamped."""
    questions = [replace(q, question=prefix + q.question, gold=(gold or {}).get(q.qid, q.gold))
                 for q in tiny_questions.questions]
    write_question_set(path, questions, corpus_signature=tiny_snapshot.signature)
    return path


def loosened_golden(path: Path) -> Path:
    """The tiny golden set with every assertion `contains "the"`, re-stamped under the same set id."""
    golden = load_golden_prompts(FIXTURES / "tiny_golden.jsonl")
    prompts = tuple(replace(p, assertions=(Assertion.contains("the"),)) for p in golden.prompts)
    write_golden_prompts(path, replace(golden, prompts=prompts, path=str(path)))
    assert load_golden_prompts(path).set_id == golden.set_id
    return path


def assert_paired_or_closed(state: str) -> None:
    assert state in ("paired", "not_compared"), state


# --------------------------------------------------------------------------------------------
# 0. a brand-new project
# --------------------------------------------------------------------------------------------


def test_a_new_project_passes_as_first_run(started):
    project, run = started
    assert run.code == 0, run.log[-3000:]
    assert run.gates == {"dense": ("passed", "first_run"), "bm25": ("passed", "first_run")}
    row = project.history_row(run.run_id)
    assert row["eligible"] is True
    assert {v: (g["state"], g["passed"]) for v, g in row["provenance"]["gate"].items()} == {
        "dense": ("first_run", True), "bm25": ("first_run", True)}


# --------------------------------------------------------------------------------------------
# 1. reworded questions: paired with the variant's reference configuration
# --------------------------------------------------------------------------------------------


def test_reworded_questions_are_paired_and_a_regression_fails(started, tmp_path, tiny_questions, tiny_snapshot):
    project, base = started
    good = project.variants("good", DENSE, BM25)
    assert base.code == 0, base.log[-3000:]

    reworded = rewritten_questions(tmp_path / "reworded.jsonl", tiny_questions, tiny_snapshot,
                                   prefix="please tell me: ")
    same = project.run("reworded", good, questions=reworded)
    assert same.code == 0, same.log[-3000:]
    assert same.gates == {"dense": ("passed", "paired"), "bm25": ("passed", "paired")}

    again = rewritten_questions(tmp_path / "reworded-again.jsonl", tiny_questions, tiny_snapshot,
                                prefix="could you say: ")
    regressed = project.run("reworded-regressed", project.variants("bad", REGRESSED, BM25), questions=again)
    assert regressed.code == 1, regressed.log[-3000:]
    assert regressed.gates == {"dense": ("FAILED", "paired"), "bm25": ("passed", "paired")}
    gate = project.history_row(regressed.run_id)["provenance"]["gate"]
    assert (gate["dense"]["state"], gate["dense"]["passed"]) == ("paired", False)


# --------------------------------------------------------------------------------------------
# 2. an edited gold together with a regression
# --------------------------------------------------------------------------------------------


def test_an_edited_gold_does_not_hide_a_regression(started, tmp_path, tiny_questions, tiny_snapshot):
    project, base = started
    assert base.code == 0, base.log[-3000:]

    relabelled = rewritten_questions(tmp_path / "relabelled.jsonl", tiny_questions, tiny_snapshot,
                                     gold={"t1": ("bike-storage",)})
    run = project.run("relabelled-regressed", project.variants("bad", REGRESSED, BM25), questions=relabelled)
    assert run.code == 1, run.log[-3000:]
    verdict, state = run.gates["dense"]
    assert verdict == "FAILED"
    assert_paired_or_closed(state)
    row = project.history_row(run.run_id)
    assert row["eligible"] is False and row["provenance"]["gate"]["dense"]["passed"] is False


# --------------------------------------------------------------------------------------------
# 3. fusion tuning added (the scored subset changes) together with a regression
# --------------------------------------------------------------------------------------------


def test_a_tuned_hybrid_added_does_not_hide_a_regression(started):
    project, base = started
    assert base.code == 0, base.log[-3000:]

    variants = project.variants("tuned-bad", REGRESSED, BM25, TUNED_HYBRID, tuning={"fraction": 0.5, "seed": 0})
    run = project.run("tuned-regressed", variants)
    assert run.code == 1, run.log[-3000:]
    verdict, state = run.gates["dense"]
    assert verdict == "FAILED"
    assert_paired_or_closed(state)
    assert run.gates["bm25"] == ("passed", "paired")
    assert run.gates["hybrid-tuned"] == ("passed", "first_run")


# --------------------------------------------------------------------------------------------
# 4. renames: reconfigured and the old name gone fails closed until accepted; same config keeps history
# --------------------------------------------------------------------------------------------


def test_a_renamed_regressed_variant_fails_until_accepted(started):
    project, base = started
    assert base.code == 0, base.log[-3000:]
    renamed = {**REGRESSED, "name": "dense-v2"}

    lenient = project.run("renamed", project.variants("renamed", renamed, BM25))
    assert lenient.code == 1, lenient.log[-3000:]
    assert lenient.gates == {"dense-v2": ("FAILED", "not_compared"), "bm25": ("passed", "comparable")}

    strict_variants = project.variants("renamed-strict", renamed, BM25, strict=True)
    strict = project.run("renamed-strict", strict_variants)
    assert strict.code == 1, strict.log[-3000:]
    assert strict.gates == {"dense-v2": ("FAILED", "not_compared"), "bm25": ("passed", "comparable")}

    project.accept(strict.run_id)
    after = project.run("after-accept", strict_variants)
    assert after.code == 0, after.log[-3000:]
    assert after.gates == {"dense-v2": ("passed", "comparable"), "bm25": ("passed", "comparable")}

    same_config = project.run("bm25-renamed", project.variants("lexical", renamed, {**BM25, "name": "lexical"},
                                                               strict=True))
    assert same_config.code == 0, same_config.log[-3000:]
    assert same_config.gates == {"dense-v2": ("passed", "comparable"), "lexical": ("passed", "comparable")}


def test_a_rename_with_the_same_configuration_keeps_its_history(started):
    project, base = started
    assert base.code == 0, base.log[-3000:]
    run = project.run("renamed", project.variants("renamed", {**DENSE, "name": "dense-renamed"}, BM25))
    assert run.code == 0, run.log[-3000:]
    assert run.gates == {"dense-renamed": ("passed", "comparable"), "bm25": ("passed", "comparable")}
    gate = project.history_row(run.run_id)["provenance"]["gate"]["dense-renamed"]
    assert gate["previous_run_id"] == base.run_id


# --------------------------------------------------------------------------------------------
# 5. answers: a loosened golden set under the same set id
# --------------------------------------------------------------------------------------------


def test_a_loosened_golden_set_is_not_compared_and_fails(project, tmp_path):
    golden = FIXTURES / "tiny_golden.jsonl"
    good = project.variants("good", DENSE, BM25)
    base = project.run("base", good, golden=golden)
    assert base.code == 0, base.log[-3000:]
    assert {state for _, meta in project.answer_checks(base.run_id).values()
            for key, state in meta.items() if key.endswith(" state")} == {"first_run"}

    regressed = project.run("regressed", project.variants("bad", REGRESSED, BM25), golden=golden)
    assert regressed.code == 1, regressed.log[-3000:]
    assert regressed.gates["dense"][0] == "FAILED"
    rows = project.answer_rows(regressed.run_id)
    assert rows and {r["variant"] for r in rows} == {"dense", "bm25"}
    assert [r for r in rows if r["eligible"]] == []

    loose = loosened_golden(tmp_path / "loose.jsonl")
    for name, variants in (("loosened", good), ("loosened-strict",
                                                project.variants("strict", DENSE, BM25, answers={"gate": {"strict": True}}))):
        run = project.run(name, variants, golden=loose)
        assert run.code == 1, f"{name}: {run.log[-3000:]}"
        assert run.gates == {"dense": ("passed", "comparable"), "bm25": ("passed", "comparable")}, name
        checks = project.answer_checks(run.run_id)
        assert set(checks) == {"answer_gate__dense", "answer_gate__bm25"}, name
        for check, (passed, meta) in checks.items():
            states = {key: value for key, value in meta.items() if key.endswith(" state")}
            assert passed is False and states and set(states.values()) == {"not_compared"}, (name, check, meta)


# --------------------------------------------------------------------------------------------
# 6. re-accepting an older run
# --------------------------------------------------------------------------------------------


def test_re_accepting_an_older_run_makes_it_the_reference(started):
    project, run_a = started
    assert run_a.code == 0, run_a.log[-3000:]
    bad = project.variants("bad", REGRESSED, BM25)
    run_b = project.run("b", bad)
    assert run_b.code == 1, run_b.log[-3000:]

    project.accept(run_b.run_id, "dense", "bm25")  # dense regressed against a comparable run: named
    project.accept(run_a.run_id)
    run_c = project.run("c", bad)
    gate = project.history_row(run_c.run_id)["provenance"]["gate"]
    assert {v: g["reference_run_id"] for v, g in gate.items()} == {"dense": run_a.run_id, "bm25": run_a.run_id}
    assert run_c.gates["dense"] == ("FAILED", "comparable")  # judged against A, dense regressed since
    assert run_c.code == 1, run_c.log[-3000:]
