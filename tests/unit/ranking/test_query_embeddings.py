"""Question embeddings are computed in batches of bounded size, and the cache gives back
exactly what was computed."""

import numpy as np
import pytest

from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking.caches import QUERY_BATCH, QueryEmbeddingCache


class RecordingEmbedder:
    identity = "recording-v1"

    def __init__(self):
        self.calls: list[int] = []

    def warm_up(self):
        pass

    def embed(self, texts):
        self.calls.append(len(texts))
        return [[float(len(t)), 0.5, -1.0 / 3.0] for t in texts]


def _questions(n):
    return [Question(qid=f"q{i}", question="x" * (i % 7 + 1), gold=("d",)) for i in range(n)]


def test_questions_are_embedded_in_batches_of_at_most_query_batch(tmp_path):
    embedder, questions = RecordingEmbedder(), _questions(2 * QUERY_BATCH + 3)
    embeddings, _, cached = QueryEmbeddingCache(tmp_path).get_or_compute(embedder, questions)
    assert not cached and embedder.calls == [QUERY_BATCH, QUERY_BATCH, 3]
    assert list(embeddings) == [q.qid for q in questions]
    assert embeddings["q8"] == pytest.approx([2.0, 0.5, -1.0 / 3.0])


def test_a_cached_read_equals_the_computed_embeddings(tmp_path):
    questions = _questions(5)
    computed, _, _ = QueryEmbeddingCache(tmp_path).get_or_compute(RecordingEmbedder(), questions)
    again = RecordingEmbedder()
    read, seconds, cached = QueryEmbeddingCache(tmp_path).get_or_compute(again, questions)
    assert cached and again.calls == [] and seconds == 0.0
    assert read == computed  # float32 in both: a cached run ranks on the same numbers
    assert np.float32(read["q0"][2]) == np.float32(-1.0 / 3.0)


def test_a_short_reply_from_the_embedder_is_an_error(tmp_path):
    class Short(RecordingEmbedder):
        def embed(self, texts):
            return super().embed(texts)[:-1]

    with pytest.raises(RuntimeError, match="embedder returned 4 vectors for 5 questions"):
        QueryEmbeddingCache(tmp_path).get_or_compute(Short(), _questions(5))
    assert list(tmp_path.iterdir()) == []  # nothing half-computed is cached


def test_what_computing_them_took_is_kept_so_a_cached_read_is_timed_alike(tmp_path):
    """Two indexes with one embedder (or a warm run after a cold one) read the same cached
    vectors: the query latency they report must include the embedding all the same."""
    questions = _questions(4)
    cache = QueryEmbeddingCache(tmp_path)
    assert cache.recorded_seconds(RecordingEmbedder(), questions) is None
    _, seconds, cached = cache.get_or_compute(RecordingEmbedder(), questions)
    assert not cached and cache.recorded_seconds(RecordingEmbedder(), questions) == pytest.approx(seconds)
    for path in tmp_path.glob("*.seconds"):  # an entry from before the cost was kept: computed again
        path.unlink()
    again = RecordingEmbedder()
    _, _, cached = cache.get_or_compute(again, questions)
    assert not cached and again.calls == [4] and cache.recorded_seconds(again, questions) is not None
