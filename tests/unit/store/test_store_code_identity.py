"""A vector table, the vector store and the question-embedding cache are keyed by the code that
made what they hold (#23, the sixth review's hole 3a): an edit of the chunking or embedding code
is another table and another embedder identity, while an edit elsewhere, or of a docstring or
comment, keeps them (no corpus is embedded again for nothing).

Each test copies the project's sources, edits the copy and points the project root at it, as a
checkout with the edit would be."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eval_pipeline.common import state, versions
from eval_pipeline.store.embedders import LocalEmbedder, OpenAIEmbedder
from eval_pipeline.store.ingest import ChunkingConfig, chunks_fingerprint, store_fingerprint
from eval_pipeline.store.vectors import store_identity

CHUNKING = ChunkingConfig()


@pytest.fixture
def checkout(monkeypatch, tmp_path):
    """A copy of eval_pipeline's sources; `edit(relative, old, new)` changes a file of it and
    makes it the project's code."""
    monkeypatch.setattr(versions, "_SOURCES", {})
    root = tmp_path / "checkout"
    shutil.copytree(state.PROJECT_ROOT / "eval_pipeline", root / "eval_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "demo_data", "ict_data"))

    def edit(relative: str, old: str, new: str) -> None:
        path: Path = root / relative
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} is no longer in {relative}: re-aim this test"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
        monkeypatch.setattr(state, "PROJECT_ROOT", root)
        versions._SOURCES.clear()

    return edit


def _identities() -> dict[str, str]:
    local, hosted = LocalEmbedder(), OpenAIEmbedder(model="m", base_url="http://embed.example:8000/v1")
    return {"table": store_fingerprint("corpus", CHUNKING, "embedder"),
            "chunks": chunks_fingerprint("corpus", CHUNKING),
            "local": local.identity, "local store": str(store_identity(local)),
            "hosted": hosted.identity, "hosted store": str(store_identity(hosted))}


def _moved(before: dict[str, str]) -> set[str]:
    after = _identities()
    return {name for name in before if after[name] != before[name]}


def test_an_edit_of_the_chunk_text_is_another_table_not_another_embedder(checkout):
    before = _identities()
    checkout("eval_pipeline/store/ingest.py", "remove_extra_whitespaces=True", "remove_extra_whitespaces=False")
    assert _moved(before) == {"table", "chunks"}


def test_an_edit_of_how_a_chunk_is_given_its_stored_vector_is_another_table(checkout):
    before = _identities()
    checkout("eval_pipeline/store/vectors.py", "return [found[k] for k in keys]",
             "return [found[k] for k in keys][::-1]")
    assert _moved(before) == {"table", "chunks"}


def test_an_edit_of_the_embedding_code_is_another_embedder_for_both_kinds_and_their_stores(checkout):
    before = _identities()
    checkout("eval_pipeline/store/embedders.py", "ordered = sorted(response.data, key=lambda d: d.index)",
             "ordered = list(response.data)")
    # the table is named by the embedder identity its caller passes, which moved with it
    assert _moved(before) == {"local", "local store", "hosted", "hosted store"}


def test_docstrings_comments_and_unrelated_modules_move_nothing(checkout):
    before = _identities()
    checkout("eval_pipeline/store/ingest.py", '"""Split every document into Haystack Documents',
             '"""Split (reworded) every document into Haystack Documents')
    checkout("eval_pipeline/store/embedders.py", "# the embedder sets every document's embedding",
             "# (reworded) the embedder sets every document's embedding")
    checkout("eval_pipeline/store/indexes.py", "from __future__ import annotations\n",
             "from __future__ import annotations\n\nUNRELATED_EDIT = 1\n")
    assert _moved(before) == set()


def test_the_local_identity_still_ends_with_the_runtime_and_names_the_code():
    from eval_pipeline.store.embedders import embedding_code

    identity = LocalEmbedder().identity
    assert f"+code:{embedding_code()}+runtime:" in identity
    assert OpenAIEmbedder(model="m").identity.endswith(f"|code:{embedding_code()}")
