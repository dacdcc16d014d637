"""Stage 2, the pgvector_store asset: the embedded PostgreSQL, the embedders, chunking and
ingest into a pgvector table named by what it holds, and the stored tsvector.
Entry: `ingest.ingest`. The one way to connect: `database.connect`.
"""
