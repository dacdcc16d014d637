"""The index sweep's share of chunks found in the vector store (#29), counted without embedding.

A sweep of three chunkings × two models builds its indexes one after the other; a chunk whose
embedded text (title and chunk, as ingest embeds it) an earlier index of the same model already
stored is read from the store instead of embedded. Which texts repeat depends only on the
chunking, not on the model, so this script chunks SciFact under each chunking (the order of
bench/index_sweep.py's SciFact sweep: 300/50, 200/30, 150/20 words, title embedded), hashes the
texts as the store does (`eval_pipeline.store.vectors.text_key`), and prints per index the
chunks, those already stored, and the share; the same figures hold for each model (its own
store). No model is loaded: it counts, it does not time.

    .venv/bin/python bench/incremental_sweep_share.py
"""

from __future__ import annotations

import argparse

from common import SCIFACT_DEFAULT, load_note, print_machine, print_table

CHUNKINGS = ((300, 50), (200, 30), (150, 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="BEIR folder")
    args = parser.parse_args()
    print_machine("Index sweep: chunks found in the vector store, per model")
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.ingest import ChunkingConfig, chunk_batches, embedding_text
    from eval_pipeline.store.vectors import text_key

    snapshot = load_corpus("beir", args.path)
    stored: set[bytes] = set()
    rows, total, found = [], 0, 0
    for length, overlap in CHUNKINGS:
        chunking = ChunkingConfig(split_length=length, split_overlap=overlap)
        chunks = hits = 0
        fresh: set[bytes] = set()
        for batch in chunk_batches(snapshot, chunking, 512):
            for chunk in batch:
                key = text_key(embedding_text(chunk, chunking))
                chunks += 1
                if key in stored or key in fresh:
                    hits += 1
                fresh.add(key)
        stored |= fresh
        rows.append([f"w{length}-o{overlap}", chunks, hits, f"{hits / chunks:.1%}"])
        total, found = total + chunks, found + hits
    print_table(rows, ["index (each model)", "chunks", "from the store", "share"])
    print(f"per model: {found} of {total} chunks from the store ({found / total:.1%}); both models: "
          f"{2 * found} of {2 * total}; distinct texts embedded per model {len(stored)}")
    print(load_note())


if __name__ == "__main__":
    main()
