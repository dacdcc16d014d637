"""Inputs that do not belong together are refused, never judged together.

Each case is a sequence of partial materializations a user can make from the UI (one asset
at a time), found by attacking the gate: the report or the ranking must not combine a
corpus, a vector table, a question set, an embedder and ranked results that were not
produced together.
"""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from eval_pipeline.scoring.variant import score_variant
from eval_pipeline.verdict.retrieval import code_version
from eval_pipeline.questions.sets import Question, QuestionSet, question_set_fingerprint
from eval_pipeline.ranking.caches import QueryEmbeddingCache
from eval_pipeline.ranking.inputs import InconsistentInputs, check_inputs_agree
from eval_pipeline.store.ingest import ChunkingConfig, StoreInfo, store_fingerprint


class FakeEmbedder:
    model_id = revision = "fake"

    def __init__(self, identity="fake@1"):
        self.identity = identity
        self.calls = 0

    def warm_up(self):
        pass

    def embed(self, texts):
        self.calls += 1
        return [[float(len(t)), 1.0] for t in texts]


def _store(corpus="c1", embedder=FakeEmbedder()):
    chunking = ChunkingConfig()
    fp = store_fingerprint(corpus, chunking, embedder.identity)
    return StoreInfo(f"chunks_{fp}", fp, corpus, embedder.model_id, chunking, 3, 2, 0.1, True)


def _questions(corpus="c1", gold="d1"):
    qs = (Question("q1", "what?", (gold,)),)
    return QuestionSet(qs, {"kind": "eval-pipeline/question-set", "corpus_signature": corpus}, "q.jsonl")


def test_agreeing_inputs_pass():
    check_inputs_agree(corpus_signature="c1", store=_store(), questions=_questions(), embedder=FakeEmbedder())


@pytest.mark.parametrize("case", ["corpus", "store corpus", "questions corpus", "embedder"])
def test_a_corpus_store_questions_or_embedder_from_elsewhere_is_refused(case):
    kwargs = dict(corpus_signature="c1", store=_store(), questions=_questions(), embedder=FakeEmbedder())
    if case == "corpus":
        kwargs["corpus_signature"] = "c2"  # corpus_snapshot materialized alone, from another corpus
    elif case == "store corpus":
        kwargs["store"] = _store(corpus="c2")
    elif case == "questions corpus":
        kwargs["questions"] = _questions(corpus="c2")
    else:
        kwargs["embedder"] = FakeEmbedder("other@2")  # the embedder changed since the table was built
    with pytest.raises(InconsistentInputs):
        check_inputs_agree(**kwargs)


def test_results_ranked_for_other_labels_are_not_scored():
    """Same qids, other gold: scoring results ranked for one labelling against another would
    record numbers nobody measured."""
    ranked_for = _questions(gold="d1").questions
    results = pd.DataFrame({"variant": ["v"], "qid": ["q1"], "doc_ids": [["d1"]], "scores": [[1.0]],
                            "latency_ms": [1.0], "error": [None], "abstained": [False], "miss_class": [None],
                            "questions_fingerprint": [question_set_fingerprint(ranked_for)]})
    assert score_variant(results, ranked_for)["hit@1"].tolist() == [1.0]
    with pytest.raises(ValueError, match="ranked for another question set"):
        score_variant(results, _questions(gold="d2").questions)


def test_query_embedding_cache_keys_are_unambiguous(tmp_path):
    """'a' + '\\x01' + 'b\\x01c' must not collide with 'a\\x01b' + 'c'."""
    cache = QueryEmbeddingCache(tmp_path)
    embedder = FakeEmbedder()
    first = [Question("a", "b\x01c", ("d",))]
    second = [Question("a\x01b", "c", ("d",))]
    vectors, _, cached = cache.get_or_compute(embedder, first)
    assert not cached
    other, _, cached = cache.get_or_compute(embedder, second)
    assert not cached and other["a\x01b"] == [1.0, 1.0] and vectors["a"] == [3.0, 1.0]


def test_local_embedder_identity_names_the_runtime_that_embeds():
    """torch, transformers, sentence-transformers and tokenizers versions change vectors too."""
    from eval_pipeline.store.embedders import LocalEmbedder, embedding_runtime

    runtime = embedding_runtime()
    assert {"torch", "transformers", "sentence-transformers", "tokenizers"} <= set(runtime)
    assert LocalEmbedder().identity.endswith(f"+runtime:{runtime_digest(runtime)}")


def runtime_digest(runtime):
    from eval_pipeline.store.embedders import runtime_digest as digest

    return digest(runtime)


def _repo(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (tmp_path / "eval_pipeline").mkdir()
    (tmp_path / "eval_pipeline" / "engines.py").write_text("X = 1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    return git


def test_code_version_is_dirty_with_an_untracked_module(tmp_path):
    """An untracked eval_pipeline/engines/__init__.py is imported in preference to the tracked
    engines.py, and `git describe --dirty` does not see it."""
    _repo(tmp_path)
    clean = code_version(tmp_path)
    assert not clean.endswith("-dirty") and clean != "unknown"
    (tmp_path / "eval_pipeline" / "engines").mkdir()
    (tmp_path / "eval_pipeline" / "engines" / "__init__.py").write_text("X = 2\n")
    assert code_version(tmp_path).endswith("-dirty")


def test_code_version_is_dirty_with_an_assume_unchanged_file(tmp_path):
    git = _repo(tmp_path)
    git("update-index", "--assume-unchanged", "eval_pipeline/engines.py")
    (tmp_path / "eval_pipeline" / "engines.py").write_text("X = 3\n")
    assert code_version(tmp_path).endswith("-dirty")


