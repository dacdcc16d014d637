"""Each engine against the real embedded Postgres and the real all-MiniLM-L6-v2 model."""

import psycopg
import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.store.ingest import MANIFEST_TABLE, ChunkingConfig, fetch_chunks, ingest
from tests.integration.cli import CountingEmbedder

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)


@pytest.fixture(scope="module")
def store(pg_uri, local_embedder, tiny_snapshot):
    return ingest(tiny_snapshot, connection_string=pg_uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)


def test_ingest_writes_chunks_with_parent_ids(store, pg_uri, tiny_snapshot):
    assert store.dims == 384
    chunks = fetch_chunks(pg_uri, store.table)
    assert len(chunks) == store.chunk_count > len(tiny_snapshot.documents)  # 30-word chunks split docs
    assert {doc_id for _, doc_id, _ in chunks} == {d.doc_id for d in tiny_snapshot.documents}
    for chunk_id, doc_id, _ in chunks:
        assert chunk_id.rsplit(":", 1)[0] == doc_id


def test_unchanged_inputs_are_not_reembedded(store, pg_uri, local_embedder, tiny_snapshot):
    counting = CountingEmbedder(local_embedder)
    again = ingest(tiny_snapshot, connection_string=pg_uri, embedder=counting, chunking=CHUNKING, log=lambda m: None)
    assert again.reused and again.table == store.table and counting.texts == 0
    other = ingest(tiny_snapshot, connection_string=pg_uri, embedder=counting,
                   chunking=ChunkingConfig(split_length=40, split_overlap=0), log=lambda m: None)
    assert other.table != store.table and not other.reused and counting.texts == other.chunk_count


def test_half_written_table_is_rebuilt(pg_uri, local_embedder, tiny_snapshot):
    chunking = ChunkingConfig(split_length=25, split_overlap=0)
    first = ingest(tiny_snapshot, connection_string=pg_uri, embedder=local_embedder, chunking=chunking, log=lambda m: None)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        # Simulate a run that died after writing part of the table: rows gone, no manifest row.
        conn.execute(f'DELETE FROM "{first.table}" WHERE id LIKE %s', ("kettle-care:%",))
        conn.execute(f"DELETE FROM {MANIFEST_TABLE} WHERE table_name = %s", (first.table,))
    counting = CountingEmbedder(local_embedder)
    rebuilt = ingest(tiny_snapshot, connection_string=pg_uri, embedder=counting, chunking=chunking, log=lambda m: None)
    assert not rebuilt.reused and counting.texts == first.chunk_count
    assert len(fetch_chunks(pg_uri, first.table)) == first.chunk_count


def _sweep(store, pg_uri, snapshot, embeddings, **kwargs):
    return Sweep(snapshot=snapshot, connection_string=pg_uri, table=store.table,
                 query_embeddings=embeddings, embed_ms_per_query=0.0, **kwargs)


@pytest.fixture(scope="module")
def tiny_embeddings(local_embedder, tiny_questions):
    return {q.qid: v for q, v in zip(tiny_questions.questions,
                                      local_embedder.embed([q.question for q in tiny_questions.questions]))}


@pytest.mark.parametrize(
    "engine, qid, expected",
    [
        ("pg-keyword", "t2", "bike-storage"),   # shares the document's words
        ("pg-dense", "t1", "kettle-care"),      # paraphrase: "white crust in the water boiler"
        ("pg-dense", "t5", "parental-leave"),
        ("hybrid", "t4", "vpn-setup"),
        ("bm25", "t3", "notes-q3"),
        ("metadata", "t4", "vpn-setup"),
    ],
)
def test_engine_ranks_gold_first(engine, qid, expected, store, pg_uri, tiny_snapshot, tiny_questions, tiny_embeddings):
    (variant,) = parse_sweep({"variants": [engine]}).variants
    question = [q for q in tiny_questions.questions if q.qid == qid]
    row = _sweep(store, pg_uri, tiny_snapshot, tiny_embeddings).run_variant(variant, question).iloc[0]
    assert row["error"] is None
    assert row["doc_ids"][0] == expected
    assert len(row["doc_ids"]) == len(set(row["doc_ids"]))  # chunks normalized to documents
    assert list(row["scores"]) == sorted(row["scores"], reverse=True)
    assert row["miss_class"] is None


def test_metadata_engine_cannot_see_body_only_facts(store, pg_uri, tiny_snapshot, tiny_questions, tiny_embeddings):
    sweep_config = parse_sweep({"variants": ["metadata", "bm25"]})
    t3 = [q for q in tiny_questions.questions if q.qid == "t3"]
    results = _sweep(store, pg_uri, tiny_snapshot, tiny_embeddings).run(sweep_config.variants, t3)
    assert "notes-q3" not in results["metadata"]["doc_ids"].iloc[0]
    assert results["metadata"]["miss_class"].iloc[0] == "never_candidate"
    assert results["bm25"]["doc_ids"].iloc[0][0] == "notes-q3"


def test_shared_work_across_variants(store, pg_uri, tiny_snapshot, tiny_questions, tiny_embeddings):
    """Each leg is queried once per question however many variants use it (RRF scores are at most 1.0,
    so a threshold of 1.5 makes the variant refuse everything)."""
    config = parse_sweep({"variants": ["pg-keyword", "pg-dense", "hybrid",
                                       {"engine": "hybrid", "abstain_below": 1.5, "name": "hybrid-strict"}]})
    sweep = _sweep(store, pg_uri, tiny_snapshot, tiny_embeddings)
    results = sweep.run(config.variants, tiny_questions.questions)
    n = len(tiny_questions.questions)
    assert sweep.queries_by_stage["keyword"] == n and sweep.queries_by_stage["dense"] == n
    strict = results["hybrid-strict"]
    assert strict["abstained"].all() and all(ids == [] for ids in strict["doc_ids"])
    assert set(strict.loc[strict["qid"] != "t6", "miss_class"]) == {"abstained"}


def test_engine_error_is_recorded_per_question(store, tiny_snapshot, tiny_questions, tiny_embeddings):
    broken = Sweep(snapshot=tiny_snapshot, connection_string="postgresql://nobody@/nodb?host=/nonexistent",
                   table=store.table, query_embeddings=tiny_embeddings, embed_ms_per_query=0.0)
    (variant,) = parse_sweep({"variants": ["hybrid"]}).variants
    results = broken.run_variant(variant, tiny_questions.questions)
    assert len(results) == len(tiny_questions.questions)  # nothing skipped
    assert results["error"].notna().all()
    assert all(ids == [] for ids in results["doc_ids"])
    answerable = results[results["qid"] != "t6"]
    assert set(answerable["miss_class"]) == {"errored"}


def test_query_embeddings_once_per_question_per_run(store, pg_uri, local_embedder, tiny_snapshot, tiny_questions, tmp_path):
    """The embedder sees each question once per run, in one batch, whatever the number of
    variants; the next run reads the cache and embeds nothing."""
    from eval_pipeline.ranking.caches import QueryEmbeddingCache

    counting = CountingEmbedder(local_embedder)
    questions = tiny_questions.questions
    cache = QueryEmbeddingCache(tmp_path)
    embeddings, seconds, cached = cache.get_or_compute(counting, questions)
    assert (counting.calls, counting.texts, cached) == (1, len(questions), False)
    config = parse_sweep({"variants": ["pg-dense", "hybrid", {"engine": "hybrid", "reranker": "mmr"},
                                       {"engine": "hybrid", "legs": ["bm25", "dense"], "name": "hb"}]})
    from eval_pipeline.ranking.rerankers import make_reranker

    sweep = _sweep(store, pg_uri, tiny_snapshot, embeddings, rerankers={"hybrid+mmr": make_reranker("mmr")})
    results = sweep.run(config.variants, questions)
    assert all(f["error"].isna().all() for f in results.values())
    assert counting.calls == 1  # the sweep itself never embeds
    again, seconds, cached = cache.get_or_compute(counting, questions)
    assert cached and seconds == 0.0 and counting.calls == 1
    assert again.keys() == embeddings.keys()
    assert all(again[q] == pytest.approx(embeddings[q], abs=1e-6) for q in embeddings)


def test_dense_leg_returns_chunk_top_k_through_hnsw(tmp_path, local_embedder):
    """pgvector's HNSW scan returns at most ef_search rows (default 40); the sweep raises it to
    the leg's depth, so a top-100 dense leg gets 100 chunks even when the index is used."""
    import psycopg

    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.database import EmbeddedPostgres

    pg = EmbeddedPostgres(tmp_path / "pg")
    try:
        uri = pg.uri("eval")
        with psycopg.connect(uri, autocommit=True) as conn:  # make the planner use the HNSW index
            conn.execute("ALTER DATABASE eval SET enable_seqscan = off")
        snapshot = load_corpus("demo")
        info = ingest(snapshot, connection_string=uri, embedder=local_embedder,
                      chunking=ChunkingConfig(split_length=60, split_overlap=0), log=lambda m: None)
        assert info.chunk_count > 100
        question = [__import__("eval_pipeline.questions.sets", fromlist=["Question"]).Question("q", "holiday policy", ())]
        embeddings = {"q": local_embedder.embed(["holiday policy"])[0]}
        sweep = _sweep(info, uri, snapshot, embeddings)
        hits = sweep.leg_hits("dense", 100, question[0])
        assert hits.error is None and len(hits.value) == 100
    finally:
        pg.stop()


def test_leg_settings_reach_their_engines_and_are_recorded(store, pg_uri, local_embedder, tiny_snapshot,
                                                            tiny_questions):
    """`match: any` on a pg-keyword variant and `stemmer: none` on bm25 each get their own leg
    (another candidate pool than the defaults) and the results record the resolved settings."""
    import json

    sweep_cfg = parse_sweep({"variants": [
        {"engine": "pg-keyword"}, {"engine": "pg-keyword", "match": "any", "name": "kw-any"},
        {"engine": "bm25"}, {"engine": "bm25", "stemmer": "none", "name": "bm25-raw"}]})
    questions = tiny_questions.questions
    embeddings = dict(zip([q.qid for q in questions], local_embedder.embed([q.question for q in questions])))
    sweep = Sweep(snapshot=tiny_snapshot, connection_string=pg_uri, table=store.table,
                  query_embeddings=embeddings, embed_ms_per_query=0.0)
    frames = sweep.run(sweep_cfg.variants, questions)
    configs = {k: json.loads(f["variant_config"].iloc[0]) for k, f in frames.items()}
    assert configs["pg-keyword"]["leg_settings"]["keyword"] == {"match": "all", "ranking": "ts_rank_cd",
                                                                "normalization": 0}
    assert configs["kw-any"]["leg_settings"]["keyword"] == {"match": "any", "ranking": "ts_rank", "normalization": 1}
    assert configs["kw-any"]["match"] == "any"
    assert configs["bm25"]["leg_settings"]["bm25"]["stemmer"] == "english"
    assert configs["bm25-raw"]["leg_settings"]["bm25"]["stemmer"] == "none"
    returned = {k: sum(len(d) for d in f["doc_ids"]) for k, f in frames.items()}
    assert returned["kw-any"] >= returned["pg-keyword"]  # ORed terms match at least what ANDed terms match
    assert all(f["error"].isna().all() for f in frames.values())
