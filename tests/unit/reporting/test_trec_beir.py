"""BEIR question sets in, TREC run files out."""

import gzip
import json

import pytest

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.metrics.retrieval import ndcg_at_k, reciprocal_rank
from eval_pipeline.questions.sets import QuestionSetError, load_beir_questions
from eval_pipeline.reporting.trec import qrels_lines, read_run, run_lines, write_trec_files


def _beir(tmp_path, qrels="query-id\tcorpus-id\tscore\r\n1\td1\t2\r\n1\td2\t1\r\n2\td3\t1\r\n10\td1\t0\r\n"):
    docs = [{"_id": f"d{i}", "title": f"T{i}", "text": f"text {i}"} for i in (1, 2, 3)]
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(d) for d in docs) + "\n")
    queries = [{"_id": q, "text": f"query {q}"} for q in ("1", "2", "3", "10")]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(qrels)
    return load_corpus("beir", str(tmp_path))


def test_beir_questions_keep_graded_relevance(tmp_path):
    snapshot = _beir(tmp_path)
    qs = load_beir_questions(tmp_path, split="test", doc_ids=[d.doc_id for d in snapshot.documents])
    by_id = {q.qid: q for q in qs.questions}
    assert [q.qid for q in qs.questions] == ["1", "2", "10"]  # only judged queries, natural order
    assert by_id["1"].qrels() == {"d1": 2, "d2": 1}
    assert by_id["1"].gold == ("d1", "d2")
    assert by_id["10"].gold == () and not by_id["10"].answerable  # judged, nothing relevant


def test_beir_judged_non_relevant_documents_stay_judged(tmp_path):
    """A grade-0 judgement is a judgement: Judged@k counts it, a grader never sees it as a hole."""
    from eval_pipeline.validity.coverage import judged_at_k

    snapshot = _beir(tmp_path, qrels="query-id\tcorpus-id\tscore\n1\td1\t1\n1\td3\t0\n10\td1\t0\n")
    by_id = {q.qid: q for q in load_beir_questions(tmp_path, split="test",
                                                   doc_ids=[d.doc_id for d in snapshot.documents]).questions}
    assert by_id["1"].qrels() == {"d1": 1, "d3": 0} and by_id["1"].gold == ("d1",)
    assert judged_at_k(["d3", "d2"], by_id["1"].qrels(), 2) == 0.5
    assert by_id["10"].qrels() == {"d1": 0} and not by_id["10"].answerable


def test_beir_errors_name_file_and_line(tmp_path):
    snapshot = _beir(tmp_path, qrels="query-id\tcorpus-id\tscore\n1\td1\n")
    with pytest.raises(QuestionSetError, match=r"test.tsv:2: expected 3 tab-separated columns"):
        load_beir_questions(tmp_path, split="test", doc_ids=[d.doc_id for d in snapshot.documents])
    (tmp_path / "qrels" / "test.tsv").write_text("1\tnope\t1\n")
    with pytest.raises(QuestionSetError, match="judged document ids not in the corpus: \\['nope'\\]"):
        load_beir_questions(tmp_path, split="test", doc_ids=[d.doc_id for d in snapshot.documents])
    with pytest.raises(QuestionSetError, match="dev.tsv: missing"):
        load_beir_questions(tmp_path, split="dev", doc_ids=["d1"])


def test_trec_run_preserves_our_tie_order():
    # Two documents whose engine scores tie: we rank b before z (doc id ascending);
    # the written scores must make trec_eval read the same order.
    lines = run_lines("bm25", {"q1": ["b", "z", "c"]})
    assert lines == ["q1 Q0 b 1 3 bm25", "q1 Q0 z 2 2 bm25", "q1 Q0 c 3 1 bm25"]
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run = {"q1": {ln.split()[2]: float(ln.split()[4]) for ln in lines}}
    qrels = {"q1": {"z": 1}}
    got = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "ndcg_cut_10"}).evaluate(run)["q1"]
    assert got["recip_rank"] == reciprocal_rank(["b", "z", "c"], qrels["q1"]) == 0.5
    assert got["ndcg_cut_10"] == pytest.approx(ndcg_at_k(["b", "z", "c"], qrels["q1"], 10), abs=1e-12)


def test_write_and_read_back(tmp_path):
    from eval_pipeline.questions.sets import Question

    questions = [Question("q1", "x", ("a",)), Question("q2", "y", ("b", "c"), relevance={"b": 2, "c": 1})]
    paths = write_trec_files(tmp_path, {"dense": {"q1": ["a", "b"], "q2": []}}, questions)
    assert read_run(paths["dense"]) == {"q1": ["a", "b"]}
    assert (tmp_path / "qrels.txt").read_text().splitlines() == qrels_lines(questions) == [
        "q1 0 a 1", "q2 0 b 2", "q2 0 c 1"]
    with pytest.raises(ValueError, match="whitespace"):
        write_trec_files(tmp_path, {"dense": {"q1": ["a doc"]}}, questions)
