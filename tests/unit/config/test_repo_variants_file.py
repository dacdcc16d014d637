"""The repo's own variants.yaml (what `make demo` runs, three variants choosing a refusal
threshold on the tuning part) can choose its thresholds on the demo's question set, and is
refused early, naming the file, on a set too small for it (the tests' tiny set): the question_set
asset's check, before anything is ranked."""

from pathlib import Path

import pytest

from eval_pipeline.config.sweep import load_sweep
from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.questions.sets import load_question_set
from eval_pipeline.ranking.fusion_tuning import split_question_set
from eval_pipeline.ranking.steps import check_thresholds_can_be_chosen

REPO = Path(__file__).resolve().parents[3]


def _split(path: Path, corpus: Path, sweep):
    snapshot = load_corpus("jsonl", str(corpus))
    qs = load_question_set(path, corpus_signature=snapshot.signature, doc_ids=[d.doc_id for d in snapshot.documents])
    fraction, seed = sweep.tuning
    return split_question_set(qs, fraction=fraction, seed=seed)


def test_the_repo_variants_choose_their_thresholds_on_the_demo_set():
    sweep = load_sweep(REPO / "variants.yaml")
    qs = _split(REPO / "eval_pipeline" / "demo_data" / "questions.jsonl", REPO / "eval_pipeline" / "demo_data" / "corpus.jsonl",
                sweep)
    check_thresholds_can_be_chosen(sweep.variants, qs, source=sweep.source)
    assert sum(not q.answerable for q in qs.tuning) > 0 and sum(q.answerable for q in qs.tuning) > 0


def test_the_repo_variants_are_refused_early_on_the_tiny_set():
    sweep = load_sweep(REPO / "variants.yaml")
    qs = _split(REPO / "tests" / "fixtures" / "tiny_questions.jsonl", REPO / "tests" / "fixtures" / "tiny_corpus.jsonl",
                sweep)
    with pytest.raises(ValueError, match=r"variants\.yaml: variant\(s\) 'pg-dense-refuses', 'hybrid-refuses', "
                                         r"'bm25-refuses' choose their refusal threshold"):
        check_thresholds_can_be_chosen(sweep.variants, qs, source=sweep.source)
