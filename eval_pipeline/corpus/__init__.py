"""Stage 1, the corpus_snapshot asset: documents from the demo set, a folder, a JSONL file or a
BEIR collection, with an order-independent signature. Entry: `sources.load_corpus`.
"""
