"""The grounding grader: the extractor's items, the lookups, the pooled rates, the grader's rows,
the answer_metrics section and the hallucination log, all hand-worked."""

import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from eval_pipeline.answering.context import ContextEntry
from eval_pipeline.grading.grounding import (
    Item,
    TextCorpusProbe,
    extract_items,
    ground_answer,
    grounding_rates,
    hallucination_log,
    hallucinations_jsonl,
    hallucinations_markdown,
    occurs,
)
from eval_pipeline.grading.registry import GRADER_KINDS, AnswerToGrade, GradingContext


def kinds(answer):
    return [(i.kind, i.text) for i in extract_items(answer)]


@pytest.mark.parametrize("answer, expected", [
    ("Set `answers.keep_text` to true.", [("symbol", "answers.keep_text")]),
    ("Call `load_corpus(path)` first.", [("call", "load_corpus")]),
    ("Run `make demo` now.", [("code", "make demo")]),
    ("A span of punctuation `==` is skipped.", []),
    ('The setting "match: any" ORs the terms.', [("quoted", "match: any")]),
    ("Curly “quoted phrase” too.", [("quoted", "quoted phrase")]),
    ("Then call build_index(x) and pd.DataFrame(rows).", [("call", "build_index"), ("call", "pd.DataFrame")]),
    ("print(x) and len(y) are the language, document(s) a plural.", []),
    ("Edit config.yaml, e.g. the i.e. part, in Python 3.11.", [("symbol", "config.yaml")]),
    ("It keeps 150 words, 1.7 ms p95, 95% recall, a 20-word overlap and 1,000 chunks.",
     [("number", "150 words"), ("number", "1.7 ms"), ("number", "95%"), ("number", "20-word"),
      ("number", "1,000 chunks")]),
    ("Year 2026 and item 3 are bare numbers [1].", []),
    ('{"approver": "finance team", "limit": "150 words"}', []),  # a JSON answer: data, not quotations
    ('Not JSON: {"approver": "finance team"', [("quoted", "approver"), ("quoted", "finance team")]),
    ("`ab.c` and ab.c and AB.C are one item.", [("symbol", "ab.c")]),
    ("`a.b` has no part of two characters: code, not a symbol.", [("code", "a.b")]),
])
def test_the_extractor_finds_each_kind_by_its_rule(answer, expected):
    assert kinds(answer) == expected


def test_a_python_block_gives_imports_and_the_names_it_does_not_bind():
    answer = ("Like this:\n```python\nimport numpy as np\nfrom haystack.components import Foo\n"
              "model = Foo(k=3)\nmodel.fit(np.zeros(3))\nprint(os.path.sep)\n```\n")
    assert kinds(answer) == [("import", "numpy"), ("import", "haystack.components"),
                             ("symbol", "haystack.components.Foo"), ("call", "Foo"), ("call", "np.zeros"),
                             ("symbol", "os.path.sep")]


def test_a_block_that_does_not_parse_is_read_like_prose_without_quotes_or_numbers():
    answer = '```python\ndef broken(:\n    x = api.call(1) "quoted" 5 ms\n```'
    assert kinds(answer) == [("call", "broken"), ("call", "api.call")]


def test_occurs_is_casefolded_whitespace_collapsed_and_word_bounded():
    assert occurs("Match:  ANY", "the setting match: any ORs")
    assert not occurs("log", "the catalog")
    assert occurs("a.b", "x = a.b(1)")
    assert occurs("nn.Linear", "use torch.nn.Linear")  # a dotted suffix is there, bounded by a dot
    assert not occurs("torch.nn.Linear", "use nn.Linear")
    assert not occurs("150 words", "150-word chunks")
    assert not occurs("", "anything")


CONTEXT = (ContextEntry(1, "c1", "d1", "Set answers.keep_text to keep texts. Chunks are 150 words."),
           ContextEntry(2, "c2", "d2", "The pg-keyword engine uses match any."))


def test_ground_answer_looks_up_the_context_then_the_corpus_and_counts_citations():
    answer = "Set `answers.keep_text` [1]; chunks are 150 words [1][2]; call `magic.fix()` and `real.api` [7]."
    probe = TextCorpusProbe(["elsewhere: real.api is documented"])
    g = ground_answer(answer, CONTEXT, probe=probe)
    assert [i.text for i in g.items] == ["answers.keep_text", "150 words", "magic.fix", "real.api"]
    assert g.in_context == (True, True, False, False)
    assert g.in_corpus == (True, True, False, True)
    assert (g.citations, g.unknown_citations) == (2, 1)  # [1] and [2] name entries; [7] does not
    assert g.rate == 0.5
    assert g.ungrounded() == [{"kind": "call", "item": "magic.fix", "in_corpus": False},
                              {"kind": "symbol", "item": "real.api", "in_corpus": True}]
    assert ground_answer(answer, CONTEXT).in_corpus is None  # no probe: the corpus is not measured


def test_the_probe_is_asked_only_for_items_the_context_lacks():
    asked = []

    class Probe:
        def contains(self, table, items):
            asked.append((table, list(items)))
            return {i: False for i in items}

    ground_answer("Use `answers.keep_text` and `x.y`.", CONTEXT, probe=Probe(), table="t1")
    assert asked == [("t1", ["x.y"])]


def test_rates_are_pooled_over_items_and_citations_averaged_over_answers():
    # answer 1: 4 items, 2 in context, 3 in corpus, 2 citations; answer 2: 1 item, in context and corpus, 0
    # citations; answer 3: no items, 1 citation. grounded 3/5, corpus 4/5, citations (2+0+1)/3 = 1.
    details = [{"n_items": 4, "n_in_context": 2, "n_in_corpus": 3, "citations": 2, "unknown_citations": 1},
               {"n_items": 1, "n_in_context": 1, "n_in_corpus": 1, "citations": 0, "unknown_citations": 0},
               {"n_items": 0, "n_in_context": 0, "n_in_corpus": 0, "citations": 1, "unknown_citations": 0}]
    r = grounding_rates(details)
    assert (r["n_answers"], r["n_answers_with_items"], r["n_items"]) == (3, 2, 5)
    assert r["grounded_rate"] == pytest.approx(0.6) and r["corpus_rate"] == pytest.approx(0.8)
    assert r["citations_per_answer"] == 1.0 and r["unknown_citations"] == 1
    assert (r["n_ungrounded"], r["n_not_in_corpus"]) == (2, 1)


def test_rates_without_items_or_probe_are_nan_not_zero():
    empty = grounding_rates([])
    assert empty["n_items"] == 0 and math.isnan(empty["grounded_rate"]) and math.isnan(empty["citations_per_answer"])
    unprobed = grounding_rates([{"n_items": 2, "n_in_context": 1, "n_in_corpus": None, "citations": 0,
                                 "unknown_citations": 0}])
    assert unprobed["grounded_rate"] == 0.5 and math.isnan(unprobed["corpus_rate"])
    assert unprobed["n_in_corpus"] is None


def _record(text, context=CONTEXT):
    return {"text": text, "context": [[e.number, e.chunk_id, e.doc_id, e.text] for e in context]}


def _grade(todo, probe=None):
    kind = GRADER_KINDS.get("grounding")
    context = GradingContext(llm=None, grade_cache=None, max_tokens=None, sampling="t?", variants=("v",),
                             corpus=probe, tables={"v": "t1"})
    return kind.grade_all(todo, context)


def _prompt(pid):
    return SimpleNamespace(id=pid, prompt="q?", reference=None)


def test_the_grader_rows_pass_when_every_item_is_in_the_context():
    todo = [AnswerToGrade("v", _prompt("p1"), _record("Set `answers.keep_text` [1]."), False),
            AnswerToGrade("v", _prompt("p2"), _record("Call `magic.fix()` and `answers.keep_text`."), False),
            AnswerToGrade("v", _prompt("p3"), _record("Nothing checkable here [2]."), False),
            AnswerToGrade("v", _prompt("p4"), None, False)]
    rows, yardsticks = _grade(todo, TextCorpusProbe([]))
    by = {r["prompt_id"]: r for r in rows["v"]}
    assert (by["p1"]["status"], by["p1"]["passed"], by["p1"]["score"]) == ("graded", True, 1.0)
    assert (by["p2"]["status"], by["p2"]["passed"], by["p2"]["score"]) == ("graded", False, 0.5)
    assert by["p2"]["reason"] == "1 of 2 item(s) not in the context: 'magic.fix'"
    assert by["p3"]["status"] == "not_applicable" and json.loads(by["p3"]["details_json"])["citations"] == 1
    assert (by["p4"]["status"], by["p4"]["passed"], by["p4"]["score"]) == ("no_answer", False, 0.0)
    assert yardsticks["v"].startswith("grounding:v1+") and yardsticks["v"].endswith("+corpus")
    assert _grade(todo)[1]["v"].endswith("+context-only")


def test_answer_metrics_reports_the_grounding_section_and_summary_columns():
    from eval_pipeline.grading.answer_metrics import answer_metrics, answer_summary_row
    from eval_pipeline.grading.run import GRADE_COLUMNS

    todo = [AnswerToGrade("v", _prompt("p1"), _record("Set `answers.keep_text` [1]."), False),
            AnswerToGrade("v", _prompt("p2"), _record("Call `magic.fix()` and `answers.keep_text` [1][2]."), False)]
    rows, _ = _grade(todo, TextCorpusProbe([]))
    grades = pd.DataFrame(rows["v"], columns=GRADE_COLUMNS)
    answers = pd.DataFrame([{"variant": "v", "prompt_id": p, "form": "how", "retrieved_gold": True,
                             "model_sent": "m", "model_reported": "m", "prompt_tokens": 0, "completion_tokens": 0,
                             "retrieval_ms": 1.0, "generation_ms": 1.0, "cached": False, "error": None}
                            for p in ("p1", "p2")])
    m = answer_metrics(answers, grades)
    g = m["graders"]["grounding"]
    assert g["pass_rate"] == 0.5 and g["mean_score"] == 0.75
    assert g["grounding"]["grounded_rate"] == pytest.approx(2 / 3)  # 3 items, 2 in context
    assert g["grounding"]["corpus_rate"] == pytest.approx(2 / 3)  # the empty corpus adds nothing
    assert g["grounding"]["citations_per_answer"] == 1.5
    row = answer_summary_row(m)["grounding"]
    assert row["grounded_rate"] == pytest.approx(2 / 3) and row["citations_per_answer"] == 1.5


def test_the_hallucination_log_lists_ungrounded_items_with_ids_and_text_only_when_kept():
    todo = [AnswerToGrade("v", _prompt("p2"), _record("Call `magic.fix()` and `answers.keep_text`."), False)]
    rows, _ = _grade(todo, TextCorpusProbe([]))
    log = hallucination_log(rows["v"], answer_keys={("v", "p2"): "abc123"})
    assert log == [{"variant": "v", "prompt_id": "p2", "answer_key": "abc123", "kind": "call", "item": "magic.fix",
                    "in_corpus": False, "answer": None}]
    kept = hallucination_log(rows["v"], answer_texts={("v", "p2"): "Call magic.fix()"})
    assert kept[0]["answer"] == "Call magic.fix()"
    assert json.loads(hallucinations_jsonl(log))["item"] == "magic.fix"
    md = hallucinations_markdown(log)
    assert "| v | 1 | 1 |" in md and "call `magic.fix` (**not in corpus**)" in md
    assert "No ungrounded items." in hallucinations_markdown([])


def test_extract_refuses_a_non_string():
    with pytest.raises(TypeError, match="answer must be a str"):
        extract_items(None)  # type: ignore[arg-type]
    assert Item("call", "f") == Item("call", "f")


def test_grading_lines_and_the_run_hallucination_log_from_frames():
    from eval_pipeline.grading.run import GRADE_COLUMNS
    from eval_pipeline.grading.presentation import GRADING_LINE_FIELDS, grading_lines, hallucinations_of

    todo = [AnswerToGrade("v", _prompt("p2"), _record("Call `magic.fix()` and `answers.keep_text`."), False)]
    rows, yardsticks = _grade(todo, TextCorpusProbe([]))
    grades = {"v": pd.DataFrame(rows["v"], columns=GRADE_COLUMNS).assign(yardstick=yardsticks["v"])}

    def answers(text):
        return {"v": pd.DataFrame([{"prompt_id": "p2", "answer_key": "k2", "prompt_tokens": 1000,
                                    "completion_tokens": 500, "model_sent": "m", "model_reported": None,
                                    "cached": False, "answer": text}])}

    (line,) = grading_lines(answers(None), grades, prices={"m": {"prompt_per_1k": 1.0, "completion_per_1k": 2.0}})
    assert tuple(line) == GRADING_LINE_FIELDS
    assert (line["grader"], line["status"], line["passed"], line["score"]) == ("grounding", "graded", False, 0.5)
    assert line["answer_cost"] == 2.0 and line["answer"] is None and line["repair"] is None  # 1000/1000*1 + 500/1000*2
    assert line["yardstick"] == yardsticks["v"]
    assert grading_lines(answers(None), grades)[0]["answer_cost"] is None  # no price for m: unknown, not 0
    log = hallucinations_of(answers(None), grades)
    assert [(e["answer_key"], e["item"], e["answer"]) for e in log] == [("k2", "magic.fix", None)]
    kept = hallucinations_of(answers("Call magic.fix()"), grades)
    assert kept[0]["answer"] == "Call magic.fix()"
