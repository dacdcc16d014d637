"""The grader registry (eval_pipeline.grading.registry, issue #24): grade_variants runs the
chosen kinds in registration order, a `grade_one` kind per answer beside the others, a
`grade_all` kind once over every variant's answers with the grading context, and a kind that
needs an LLM is refused without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.run import answer_variants
from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.grading.judges import GRADERS, TOKEN_SPENDING
from eval_pipeline.grading.registry import GRADER_KINDS, GraderKind
from eval_pipeline.grading.run import grade_row, grade_variants
from tests.orchestration.test_answer_wiring import ScriptedGenerator, quoting, ranked_frame, tiny_golden, tiny_texts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def answers(tmp_path):
    snapshot = load_corpus("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))
    golden, texts = tiny_golden(snapshot), tiny_texts(snapshot)
    cache = AnswerCache(tmp_path / "answers")
    frames = {v: ranked_frame(golden, texts) for v in ("v1", "v2")}
    return answer_variants(frames, golden, texts=texts, generator=ScriptedGenerator(quoting), cache=cache, k=3,
                           keep_text=False), golden, cache


@pytest.fixture
def batch_grader():
    seen = []

    def grade_all(todo, context):
        seen.append((len(todo), context.variants, context.llm))
        rows: dict[str, list] = {}
        for a in todo:
            rows.setdefault(a.variant, []).append(
                grade_row(a.variant, a.prompt.id, "toy_batch", "graded", passed=True, score=1.0))
        return rows, {v: f"toy_batch:{context.sampling}" for v in context.variants}

    GRADER_KINDS.register(GraderKind("toy_batch", needs=frozenset({"llm"}), grade_all=grade_all))
    yield seen
    GRADER_KINDS.unregister("toy_batch")


def test_a_grade_all_kind_grades_every_variant_at_once_with_the_context(answers, batch_grader, tmp_path):
    frames, golden, cache = answers
    assert "toy_batch" in GRADERS and "toy_batch" in TOKEN_SPENDING

    class LLM:
        def identity(self):
            return {"temperature": 0.0}

    llm = LLM()
    graded, yardsticks = grade_variants(frames, golden, graders=["toy_batch", "deterministic"], cache=cache, llm=llm,
                                        grade_cache=tmp_path / "grades")
    n = len(frames["v1"])
    assert batch_grader == [(2 * n, ("v1", "v2"), llm)]
    for v in ("v1", "v2"):  # registry order: the built-in per-answer grader's rows first, whatever the order asked
        assert list(graded[v]["grader"]) == ["deterministic"] * n + ["toy_batch"] * n
        assert list(yardsticks[v]) == ["deterministic", "toy_batch"] and yardsticks[v]["toy_batch"] == "toy_batch:t0.0"


def test_a_kind_that_needs_an_llm_is_refused_without_one(answers, batch_grader):
    frames, golden, cache = answers
    with pytest.raises(ValueError, match="graders toy_batch call a model: an LLM and a grade cache are needed"):
        grade_variants(frames, golden, graders=["toy_batch"], cache=cache)
    assert batch_grader == []


def test_self_judged_labels_the_yardsticks_of_the_graders_that_call_a_model(answers, batch_grader, tmp_path):
    frames, golden, cache = answers

    class LLM:
        def identity(self):
            return {"temperature": 0.0}

    _, yardsticks = grade_variants(frames, golden, graders=["toy_batch", "deterministic", "grounding"], cache=cache,
                                   llm=LLM(), grade_cache=tmp_path / "grades", self_judged=True)
    assert yardsticks["v1"]["toy_batch"] == "toy_batch:t0.0+self-judged"
    assert not yardsticks["v1"]["deterministic"].endswith("self-judged")  # no model: nothing to label
    assert yardsticks["v1"]["grounding"].endswith("+context-only")


def test_grade_variants_hands_the_corpus_probe_and_tables_to_the_grounding_grader(answers, tmp_path):
    from eval_pipeline.grading.grounding import TextCorpusProbe

    _, golden, _ = answers
    snapshot = load_corpus("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))
    texts = tiny_texts(snapshot)
    cache = AnswerCache(tmp_path / "invented")
    frames = answer_variants({v: ranked_frame(golden, texts) for v in ("v1", "v2")}, golden, texts=texts,
                             generator=ScriptedGenerator(lambda prompt, context: "Call `made.up()` [1]."),
                             cache=cache, k=3)
    asked = []

    class Probe(TextCorpusProbe):
        def contains(self, table, items):
            asked.append((table, tuple(items)))
            return super().contains(table, items)

    tabled = {v: f.assign(store_table=f"table_{v}") for v, f in frames.items()}
    graded, yardsticks = grade_variants(tabled, golden, graders=["grounding"], cache=cache,
                                        corpus_probe=Probe(["made.up is real"]))
    assert yardsticks["v1"]["grounding"].endswith("+corpus")
    assert set(asked) == {("table_v1", ("made.up",)), ("table_v2", ("made.up",))}
    g = graded["v1"]
    assert set(g["status"]) == {"graded"} and not g["passed"].any()  # not in the context: not grounded...
    assert all('"n_in_corpus": 1' in d for d in g["details_json"])  # ...though the corpus has it
