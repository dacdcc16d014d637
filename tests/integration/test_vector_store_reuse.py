"""Content-addressed embeddings against the real Postgres and the real model: a new corpus
version's table is built from the vector store plus its new texts, and equals a cold build of
it row for row (ids, content, metadata, vectors to 1e-6); nothing is reused after the weights
are swapped; a vector embedded alone equals the one embedded in a batch to 1e-6 (what makes
reuse across batches sound); prune and drop.

The module works in a database of its own, so the counts are not moved by what other tests
put in the session's vector stores."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import psycopg
import pytest

from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
from eval_pipeline.store.embedders import LocalEmbedder, default_model_path
from eval_pipeline.store.ingest import (
    MANIFEST_TABLE,
    ChunkingConfig,
    chunk_documents,
    embedding_text,
    ingest,
)
from eval_pipeline.store.vectors import STORES_TABLE, list_stores, main, prune, store_identity, table_for

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=60, split_overlap=10)
MARK = "Revised in corpus version two."


@pytest.fixture(scope="module")
def uri(embedded_pg):
    url = embedded_pg.uri("vector_reuse")
    yield url
    with psycopg.connect(embedded_pg.uri("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS vector_reuse WITH (FORCE)")


def _records():
    """The demo corpus's first 12 documents (about 90 chunks at 60/10 of its 254): what these tests
    check is which texts are embedded, stored and reused, and a third of the corpus holds every case
    (edited, removed and added documents) at a third of the embedding."""
    lines = (DEMO_DATA_DIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[:12]]


def _write(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _version_two(records):
    """Two documents edited (a sentence appended to their last part), two removed, two added."""
    edited = [dict(r) for r in records]
    for r in edited[:2]:
        r["content"] = r["content"] + " " + MARK
    kept = edited[:-2]
    added = [{"doc_id": f"added-{n}", "title": f"Added document {n}", "description": "",
              "filename": f"added-{n}.md", "content": f"A new page number {n} about the canteen's opening hours "
              "on bank holidays, which only version two of the corpus has."} for n in (1, 2)]
    return kept + added


def _rows(uri, table):
    with psycopg.connect(uri) as conn:
        return conn.execute(f'SELECT id, content, meta, embedding::text FROM "{table}" ORDER BY id').fetchall()


def _forget_table(uri, table):
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.execute(f"DELETE FROM {MANIFEST_TABLE} WHERE table_name = %s", (table,))


def _texts(snapshot):
    return {embedding_text(c, CHUNKING) for c in chunk_documents(snapshot, CHUNKING)}


def _assert_same_table(rows, cold):
    assert [r[:3] for r in rows] == [r[:3] for r in cold]  # ids, content, metadata
    got = np.array([json.loads(r[3]) for r in rows])
    want = np.array([json.loads(r[3]) for r in cold])
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-6


def test_a_vector_embedded_alone_equals_it_embedded_in_a_batch(local_embedder):
    """Batch-independence of the bundled model on CPU: padding to the batch's longest text
    must not move a vector by more than 1e-6 (measured 1.8e-7 on 203 SciFact texts)."""
    texts = sorted(_texts(load_corpus("demo")), key=len)
    texts = texts[:3] + texts[-3:] + ["ok", "a b c"]  # the shortest and longest chunks, two tiny texts
    batch = np.array(local_embedder.embed(texts))
    alone = np.array([local_embedder.embed([t])[0] for t in texts])
    assert np.abs(batch - alone).max() <= 1e-6


def test_a_new_corpus_version_embeds_only_its_new_texts_and_equals_a_cold_build(uri, local_embedder, tmp_path):
    one = load_corpus("jsonl", str(_write(tmp_path / "v1.jsonl", _records())))
    two = load_corpus("jsonl", str(_write(tmp_path / "v2.jsonl", _version_two(_records()))))
    first = ingest(one, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    assert first.chunks_from_store == 0 and first.chunks_embedded == first.chunk_count == len(_texts(one))

    logged = []
    info = ingest(two, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=logged.append)
    new_texts = _texts(two) - _texts(one)
    # edited: the chunk holding the end of each of 2 documents; added: 1 chunk each (short)
    assert len(new_texts) == 4
    assert (info.chunks_embedded, info.chunks_from_store) == (4, info.chunk_count - 4)
    assert any(f"4 chunks embedded, {info.chunk_count - 4} from the vector store" in m for m in logged)
    incremental = _rows(uri, info.table)

    _forget_table(uri, info.table)
    cold = ingest(two, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None,
                  reuse_vectors=False)
    assert cold.table == info.table and (cold.chunks_embedded, cold.chunks_from_store) == (cold.chunk_count, 0)
    _assert_same_table(incremental, _rows(uri, cold.table))

    again = ingest(two, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    assert again.reused and (again.chunks_embedded, again.chunks_from_store) == (cold.chunk_count, 0)  # its build's


def test_another_chunking_of_the_same_corpus_reuses_the_texts_it_shares(uri, local_embedder):
    """Documents shorter than both chunk lengths give one identical chunk under each."""
    demo = load_corpus("demo")
    wide = ChunkingConfig(split_length=400, split_overlap=10)
    wider = ChunkingConfig(split_length=500, split_overlap=20)
    shared = ({embedding_text(c, wide) for c in chunk_documents(demo, wide)}
              & {embedding_text(c, wider) for c in chunk_documents(demo, wider)})
    ingest(demo, connection_string=uri, embedder=local_embedder, chunking=wide, log=lambda m: None)
    info = ingest(demo, connection_string=uri, embedder=local_embedder, chunking=wider, log=lambda m: None)
    assert len(shared) > 0 and info.chunks_from_store == len(shared)
    assert info.chunks_embedded == info.chunk_count - len(shared)


def test_nothing_is_reused_after_the_weights_are_swapped(uri, tmp_path):
    """The same folder, other weights (sre-embedding-model, a fine-tune of the same
    architecture): another identity, another store; every vector is the new model's."""
    import sre_embedding_model

    folder = tmp_path / "model"
    shutil.copytree(default_model_path(), folder)
    demo = load_corpus("jsonl", str(_write(tmp_path / "corpus.jsonl", _records())))
    before = LocalEmbedder(model=str(folder))
    old = ingest(demo, connection_string=uri, embedder=before, chunking=CHUNKING, log=lambda m: None)
    assert old.chunks_embedded == old.chunk_count
    old_identity = store_identity(before)  # read now: an identity follows the folder's bytes

    sre = Path(sre_embedding_model.__file__).parent / "model_weights"
    # replaced, not rewritten in place: the first model still maps the old file's pages
    shutil.copyfile(sre / "model.safetensors", folder / "model.safetensors.new")
    os.replace(folder / "model.safetensors.new", folder / "model.safetensors")
    after = LocalEmbedder(model=str(folder))
    assert store_identity(after) != old_identity and store_identity(before) == store_identity(after)
    new = ingest(demo, connection_string=uri, embedder=after, chunking=CHUNKING, log=lambda m: None)
    assert new.table != old.table
    assert (new.chunks_embedded, new.chunks_from_store) == (new.chunk_count, 0)

    rows = _rows(uri, new.table)
    by_id = {c.id: embedding_text(c, CHUNKING) for c in chunk_documents(demo, CHUNKING)}
    expected = np.array(LocalEmbedder(model=str(folder)).embed([by_id[r[0]] for r in rows]))  # loads the new weights
    stored = np.array([json.loads(r[3]) for r in rows])
    assert np.abs(stored - expected).max() <= 1e-6
    stale = np.array([json.loads(r[3]) for r in _rows(uri, old.table)])
    assert np.abs(stored - stale).max() > 1e-3  # the swap changed the vectors: reusing them would show


def test_list_prune_and_drop(uri, local_embedder, tiny_snapshot, capsys, monkeypatch):
    ingest(tiny_snapshot, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    stores = {s["table"]: s for s in list_stores(uri)}
    mine = table_for(store_identity(local_embedder))
    assert mine in stores and stores[mine]["rows"] > 0 and stores[mine]["bytes"] > 0
    assert stores[mine]["dims"] == 384
    rows = stores[mine]["rows"]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"UPDATE {mine} SET used_at = now() - interval '40 days' WHERE key IN "
                     f"(SELECT key FROM {mine} ORDER BY key LIMIT 3)")
    assert prune(uri, "30d", tables=[mine]) == {mine: 3}
    assert {s["table"]: s["rows"] for s in list_stores(uri)}[mine] == rows - 3
    with pytest.raises(ValueError, match="no vector store 'vectors_nope'"):
        prune(uri, "30d", tables=["vectors_nope"])

    monkeypatch.setenv("STORES_URL", uri)
    assert main(["--url-env", "STORES_URL", "list"]) == 0
    assert f"{mine}  {rows - 3} vectors" in capsys.readouterr().out
    assert main(["--url-env", "STORES_URL", "drop", store_identity(local_embedder)]) == 0
    assert capsys.readouterr().out.strip() == f"dropped {mine}"
    with psycopg.connect(uri) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (mine,)).fetchone()[0] is None
        assert conn.execute(f"SELECT count(*) FROM {STORES_TABLE} WHERE table_name = %s", (mine,)).fetchone()[0] == 0
