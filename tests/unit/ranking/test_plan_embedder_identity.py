"""The ranking plan reads the query embedder's identity once (each reading walks and stats the
model's files), and reads it again on every plan: weights changed between two plans of one
process are another query embedder, so every results key that names it changes."""

from types import SimpleNamespace

import pytest

from eval_pipeline.common.state import StateDir
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking import steps
from eval_pipeline.store.embedders import LocalEmbedder
from eval_pipeline.store.ingest import ChunkingConfig


class CountingEmbedder(LocalEmbedder):
    """A local embedder over a folder of test files, counting the readings of its identity."""

    reads = 0

    @property
    def identity(self) -> str:
        self.reads += 1
        return super().identity


@pytest.fixture
def plan(monkeypatch, tmp_path):
    monkeypatch.setattr(steps, "check_inputs_agree", lambda **kwargs: None)
    monkeypatch.setattr(steps, "result_environment", lambda: {"package": "1"})
    monkeypatch.setattr(steps, "store_environment", lambda connection_string: {"server": "17"})
    monkeypatch.setattr(steps.ResultsCache, "has", lambda self, key: True)  # all reused: nothing embedded
    store = SimpleNamespace(table="chunks_test", corpus_signature="corpus-1", chunking=ChunkingConfig())
    question_set = SimpleNamespace(fingerprint="questions-1", tuning_fingerprint="tuning-1", questions=())
    variants = parse_sweep({"variants": ["pg-dense", "pg-keyword", "hybrid", "metadata"]}).variants

    def run(embedder) -> dict[str, str | None]:
        planned = steps.plan_ranking_batches(
            variants, corpus_signature="corpus-1", store=store, question_set=question_set,
            state=StateDir(tmp_path / "state"), connection_string="postgresql://unused", embedder=embedder,
            build_reranker=lambda *a, **k: None, miss_k=10, reuse=True, workers=1, code_version="abc123",
            log=lambda line: None)
        return {k: v for _, batch in planned for k, v in batch.results_keys.items()}

    return run


def test_the_plan_reads_the_embedders_identity_once_for_all_its_variants(plan, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"a" * 64)
    embedder = CountingEmbedder(model=str(model))
    keys = plan(embedder)
    assert embedder.reads == 1  # one reading for three variants that embed their questions
    assert len(keys) == 4 and all(keys.values())


def test_weights_changed_between_two_plans_of_one_process_change_every_key_that_names_them(plan, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "weights.bin"
    weights.write_bytes(b"a" * 64)
    embedder = CountingEmbedder(model=str(model))
    before_identity = embedder.identity
    before = plan(embedder)
    weights.write_bytes(b"b" * 64)  # the same size, at once: the digest cache must not hide it
    after_identity = embedder.identity
    after = plan(embedder)
    assert before_identity != after_identity
    for key in ("pg-dense", "pg-keyword", "hybrid"):
        assert before[key] != after[key], key
    assert before["metadata"] == after["metadata"]  # ranked without the embedder: its key does not name it


def test_embedding_code_changed_between_two_plans_of_one_process_changes_every_key_that_names_it(
        plan, tmp_path, monkeypatch):
    """The code part of the identity (`embedding_code`, the syntax-tree digest of the embedding
    code, taken once per process: the code loaded is the code that runs) is read on every plan
    too: the plan keeps no identity of its own from one plan to the next."""
    from eval_pipeline.store import embedders

    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"a" * 64)
    embedder = CountingEmbedder(model=str(model))
    before = plan(embedder)
    monkeypatch.setattr(embedders, "embedding_code", lambda: "edited0000000")
    after = plan(embedder)
    for key in ("pg-dense", "pg-keyword", "hybrid"):
        assert before[key] != after[key], key
    assert before["metadata"] == after["metadata"]
