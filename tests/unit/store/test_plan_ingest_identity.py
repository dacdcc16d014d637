"""An ingest plan records the embedder identity its table is named by (the shards check it before
they write), and reads it on every plan: weights changed between two plans of one process are
another table, however soon after the first plan they change."""

from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from eval_pipeline.store import ingest
from eval_pipeline.store.ingest import ChunkingConfig, store_fingerprint
from tests.unit.ranking.test_plan_embedder_identity import CountingEmbedder  # counts readings of its identity


@pytest.fixture
def plan(monkeypatch):
    """`plan_ingest` of a table its manifest says is complete, without a database."""

    @contextmanager
    def connect(*args, **kwargs):
        yield SimpleNamespace()

    monkeypatch.setattr(ingest, "connect", connect)
    monkeypatch.setattr(ingest, "_prepare_database", lambda conn, **kwargs: None)
    monkeypatch.setattr(ingest, "_manifest_row", lambda conn, table: (3, 1, None, None, None))
    monkeypatch.setattr(ingest, "advisory_lock", lambda conn, key, **kwargs: None)
    monkeypatch.setattr(ingest, "_unlock_quietly", lambda conn, key: None)
    monkeypatch.setattr(ingest, "ensure_tsvector_column", lambda *args, **kwargs: None)
    snapshot = SimpleNamespace(signature="corpus-1", count=3)

    def run(embedder):
        return ingest.plan_ingest(snapshot, connection_string="postgresql://unused", embedder=embedder,
                                  chunking=ChunkingConfig(), log=lambda line: None)

    return run


def _model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"a" * 64)
    return model


def test_the_plan_records_the_identity_its_table_is_named_by(plan, tmp_path):
    embedder = CountingEmbedder(model=str(_model(tmp_path)))
    planned = plan(embedder)
    assert embedder.reads >= 1
    assert planned.table == f"chunks_{store_fingerprint('corpus-1', ChunkingConfig(), planned.embedder_identity)}"


def test_weights_changed_between_two_plans_of_one_process_are_another_table(plan, tmp_path):
    model = _model(tmp_path)
    embedder = CountingEmbedder(model=str(model))
    before = plan(embedder)
    (model / "weights.bin").write_bytes(b"b" * 64)  # the same size, at once: the digest cache must not hide it
    after = plan(embedder)
    assert before.embedder_identity != after.embedder_identity
    assert before.table != after.table
    assert after.embedder_identity == embedder.identity  # what the shards check before they write
