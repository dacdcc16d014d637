"""Unit tests for the pure parts of eval_pipeline.ranking.engines (no database, no model).

MetadataEngine expectations are computed by hand from its docstring:
weights title 4, description 2, filename 3; per field of weight w, +8w when the whole
normalized query is a substring of the field; for each distinct query term of >= 2 chars
found in the field, +w + 0.25*w*occurrences.
"""

from __future__ import annotations

import copy
import itertools

import pytest

from eval_pipeline.corpus.sources import Document
from eval_pipeline.ranking.bm25 import BM25Engine
from eval_pipeline.ranking.engines import (
    MetadataEngine,
    RankedDoc,
    chunks_to_documents,
    normalize_text,
)


def ids(ranked) -> list[str]:
    return [r.doc_id for r in ranked]


# --- chunks_to_documents -------------------------------------------------------------------


def test_first_occurrence_of_a_document_wins():
    chunks = [("a", 0.9), ("b", 0.8), ("a", 0.7), ("c", 0.6), ("b", 0.5)]
    assert chunks_to_documents(chunks, 10) == [RankedDoc("a", 0.9), RankedDoc("b", 0.8), RankedDoc("c", 0.6)]


def test_best_chunk_gives_the_score_even_if_listed_later():
    # a document's best-scoring chunk gives its rank and score
    assert chunks_to_documents([("a", 0.2), ("b", 0.5), ("a", 0.8)], 10) == [RankedDoc("a", 0.8), RankedDoc("b", 0.5)]


def test_depth_cut_counts_documents_not_chunks():
    chunks = [("a", 0.9), ("a", 0.85), ("b", 0.8), ("b", 0.75), ("c", 0.7), ("d", 0.6)]
    assert ids(chunks_to_documents(chunks, 2)) == ["a", "b"]
    assert ids(chunks_to_documents(chunks, 3)) == ["a", "b", "c"]
    assert ids(chunks_to_documents(chunks, 1)) == ["a"]
    assert ids(chunks_to_documents(chunks, 100)) == ["a", "b", "c", "d"]


def test_ties_are_broken_by_doc_id_regardless_of_input_order():
    base = [("b", 1.0), ("a", 1.0), ("d", 2.0), ("c", 1.0), ("e", 0.5)]
    expected = [RankedDoc("d", 2.0), RankedDoc("a", 1.0), RankedDoc("b", 1.0), RankedDoc("c", 1.0), RankedDoc("e", 0.5)]
    for perm in itertools.permutations(base):
        assert chunks_to_documents(list(perm), 10) == expected


def test_ties_with_depth_cut_are_deterministic():
    for perm in itertools.permutations([("z", 1.0), ("y", 1.0), ("x", 1.0)]):
        assert ids(chunks_to_documents(list(perm), 2)) == ["x", "y"]


def test_input_is_not_mutated_and_iterables_are_accepted():
    chunks = [("b", 0.1), ("a", 0.9), ("b", 0.5)]
    before = copy.deepcopy(chunks)
    out = chunks_to_documents(chunks, 5)
    assert chunks == before
    assert out == [RankedDoc("a", 0.9), RankedDoc("b", 0.5)]
    assert chunks_to_documents(iter(before), 5) == out
    assert chunks_to_documents((c for c in before), 5) == out


def test_empty_input():
    assert chunks_to_documents([], 10) == []


# --- normalize_text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello, World!!", "hello world"),
        ("facilities/kettle-care.md", "facilities kettle care md"),
        ("  leading and   trailing  ", "leading and trailing"),
        ("snake_case_name", "snake case name"),
        ("Version 2.0 (beta)", "version 2 0 beta"),
        ("---", ""),
        ("", ""),
    ],
)
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected


def test_normalize_text_keeps_non_ascii_letters():
    assert normalize_text("Café naïve") == "café naïve"
    assert normalize_text("東京 Ωmega") == "東京 ωmega"


# --- MetadataEngine ------------------------------------------------------------------------

KETTLE = Document(
    "kettle-care",
    "Kettle care guide",
    "How to descale the kettle kettle",
    "facilities/kettle-care.md",
    "Body text that is never read.",
)
BIKE = Document(
    "bike",
    "Bicycle parking",
    "Where to leave bikes; not the kettle",
    "facilities/bike.md",
    "kettle care kettle care kettle care",  # body matches the query; must not count
)
BODY_ONLY = Document("body-only", "Unrelated", "nothing here", "misc/other.md", "kettle care")
DOCS = [BIKE, BODY_ONLY, KETTLE]


def test_metadata_hand_computed_scores():
    e = MetadataEngine(DOCS)
    # kettle-care, query "kettle care":
    #   title "kettle care guide" (w=4): substring +32; kettle n=1: 4+1; care n=1: 4+1       -> 42
    #   description "how to descale the kettle kettle" (w=2): kettle n=2: 2+0.25*2*2 = 3      -> 3
    #   filename "facilities kettle care md" (w=3): substring +24; kettle 3+0.75; care 3+0.75 -> 31.5
    #   total 76.5
    # bike: description "where to leave bikes not the kettle": kettle n=1: 2+0.5 = 2.5
    # body-only: nothing in title/description/filename -> dropped
    assert e.score("kettle care") == {"kettle-care": 76.5, "bike": 2.5}
    assert e.search("kettle care") == [RankedDoc("kettle-care", 76.5), RankedDoc("bike", 2.5)]


def test_metadata_distinct_terms_counted_once():
    # "kettle kettle care" is not a substring of any field; terms dedupe to (kettle, care)
    # kettle-care: title 5+5, description 3, filename 3.75+3.75 -> 20.5 ; bike: 2.5
    assert MetadataEngine(DOCS).score("kettle kettle care") == {"kettle-care": 20.5, "bike": 2.5}


def test_metadata_case_and_punctuation_are_normalized():
    e = MetadataEngine(DOCS)
    assert e.score("KETTLE-care!!") == e.score("kettle care") == {"kettle-care": 76.5, "bike": 2.5}


def test_metadata_whole_query_substring_is_not_word_aligned():
    # "ket" is a substring of "kettle" but not a token: only the +8w substring bonus applies
    # kettle-care: title 32 + description 16 + filename 24 = 72 ; bike description: 16
    assert MetadataEngine(DOCS).score("ket") == {"kettle-care": 72.0, "bike": 16.0}


@pytest.mark.parametrize(
    "doc, expected",
    [
        (Document("t", "alpha", "", "", "x"), 8 * 4 + 4 + 0.25 * 4),  # title only: 37
        (Document("d", "", "alpha", "", "x"), 8 * 2 + 2 + 0.25 * 2),  # description only: 18.5
        (Document("f", "", "", "alpha", "x"), 8 * 3 + 3 + 0.25 * 3),  # filename only: 27.75
    ],
)
def test_metadata_field_weights(doc, expected):
    assert MetadataEngine([doc]).score("alpha") == {doc.doc_id: expected}


def test_metadata_occurrences_add_a_quarter_weight_each():
    doc = Document("o", "echo echo echo", "", "", "x")
    # title "echo echo echo", query "echo": substring 32 + term 4 + 0.25*4*3 = 39
    assert MetadataEngine([doc]).score("echo") == {"o": 39.0}


def test_metadata_never_reads_the_body():
    e = MetadataEngine([BODY_ONLY])
    assert e.score("kettle care") == {}
    assert e.search("kettle care") == []
    assert e.search(BODY_ONLY.content) == []


def test_metadata_one_char_terms_are_ignored():
    doc = Document("x-doc", "x marks the spot", "", "", "body")
    # "x spot" is not a substring of the title; only "spot" counts: 4 + 1 = 5
    # (if "x" counted as a term it would add another 5)
    assert MetadataEngine([doc]).score("x spot") == {"x-doc": 5.0}


def test_metadata_ties_broken_by_doc_id_and_zero_scores_dropped():
    docs = [
        Document("b-doc", "Same title", "", "", "body"),
        Document("c-doc", "Nothing", "", "", "same title"),
        Document("a-doc", "Same title", "", "", "body"),
    ]
    e = MetadataEngine(docs)
    result = e.search("same title")
    assert ids(result) == ["a-doc", "b-doc"]
    assert result[0].score == result[1].score == 32 + 5 + 5
    assert "c-doc" not in e.score("same title")


def test_metadata_depth_and_empty_query():
    e = MetadataEngine(DOCS, depth=1)
    assert e.search("kettle care") == [RankedDoc("kettle-care", 76.5)]
    assert e.search("") == []
    assert e.search("?!  --") == []
    assert e.score("") == {}


def test_metadata_engine_interface():
    e = MetadataEngine(DOCS)
    assert e.name == "metadata" and e.needs_embedding is False
    assert e.search("kettle care", None) == e.search("kettle care", [0.1, 0.2])


# --- BM25Engine ----------------------------------------------------------------------------

CHUNKS = [
    ("c1", "doc-kettle", "Descale the kettle with white vinegar and water"),
    ("c2", "doc-bike", "Lock bicycles in the basement cage"),
    ("c3", "doc-trip", "Book train tickets for the offsite in Lisbon"),
    ("c4", "doc-bike", "The cage code changes every month"),
]


@pytest.fixture(scope="module")
def bm25():
    return BM25Engine(CHUNKS)


@pytest.mark.parametrize(
    "query, first",
    [("vinegar kettle", "doc-kettle"), ("train to Lisbon", "doc-trip"), ("basement cage code", "doc-bike")],
)
def test_bm25_right_document_first(bm25, query, first):
    result = bm25.search(query)
    assert result and result[0].doc_id == first
    assert all(r.score > 0 for r in result)
    assert len(ids(result)) == len(set(ids(result)))


def test_bm25_two_chunks_of_one_document_give_one_entry(bm25):
    result = bm25.search("cage")
    assert ids(result) == ["doc-bike"]


def test_bm25_stopword_only_or_unknown_query_returns_empty(bm25):
    assert bm25.search("the and of") == []
    assert bm25.search("!!! ...") == []
    assert bm25.search("") == []
    assert bm25.search("zebra") == []


def test_bm25_depth():
    full = BM25Engine(CHUNKS).search("kettle cage Lisbon")
    assert len(full) == 3
    assert BM25Engine(CHUNKS, depth=1).search("kettle cage Lisbon") == full[:1]


def test_bm25_needs_chunks_and_interface(bm25):
    with pytest.raises(ValueError, match="at least one chunk"):
        BM25Engine([])
    assert bm25.name == "bm25" and bm25.needs_embedding is False


# --- fusion -------------------------------------------------------------------------------

def test_rrf_matches_haystack_document_joiner_at_k61():
    """Our RRF (configurable k) is Haystack's DocumentJoiner RRF when k = 61."""
    from haystack import Document as HDocument
    from haystack.components.joiners import DocumentJoiner

    from eval_pipeline.ranking.engines import ChunkHit, fuse

    keyword = [ChunkHit("a:0", "a", 3.0), ChunkHit("b:0", "b", 2.0), ChunkHit("c:1", "c", 1.0)]
    dense = [ChunkHit("c:1", "c", 0.9), ChunkHit("d:0", "d", 0.8), ChunkHit("a:0", "a", 0.7), ChunkHit("e:2", "e", 0.1)]
    for weights in (None, [0.3, 0.7]):
        ours = fuse([keyword, dense], mode="rrf", rrf_k=61, weights=weights)
        docs = [[HDocument(id=h.chunk_id, content="x", score=h.score) for h in leg] for leg in (keyword, dense)]
        theirs = DocumentJoiner(join_mode="reciprocal_rank_fusion", weights=weights).run(documents=docs)["documents"]
        assert [h.chunk_id for h in ours] == [d.id for d in theirs]
        assert [h.score for h in ours] == pytest.approx([d.score for d in theirs], abs=1e-12)


def test_rrf_k_changes_scores_by_hand():
    from eval_pipeline.ranking.engines import ChunkHit, fuse

    a, b = ChunkHit("a:0", "a", 1.0), ChunkHit("b:0", "b", 1.0)
    # k=1, equal weights 1/2, n=2: a = (0.5*2)/(1+0) + (0.5*2)/(1+1) = 1.5, then / (2/1) = 0.75
    fused = fuse([[a, b], [b, a]], mode="rrf", rrf_k=1)
    assert [(h.chunk_id, h.score) for h in fused] == [("a:0", 0.75), ("b:0", 0.75)]  # tie: chunk id order


def test_fuse_rejects_bad_mode_and_weights():
    from eval_pipeline.ranking.engines import ChunkHit, fuse

    with pytest.raises(ValueError, match="fusion mode 'max' is not valid"):
        fuse([[ChunkHit("a:0", "a", 1.0)], []], mode="max")
    with pytest.raises(ValueError, match="one entry per leg"):
        fuse([[], []], weights=[1.0])
