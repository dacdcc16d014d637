"""eval_pipeline.ranking.bm25.BM25Engine: scores by hand, analysis, fields, settings, ties.

bm25s's default variant ("lucene", which the engine uses) scores

    score(d, q) = sum over query terms t of idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))
    idf(t)      = ln(1 + (N - df + 0.5) / (df + 0.5))

with dl and avgdl counted in index terms (after stopwords are dropped).  Scores are float32.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from eval_pipeline.ranking.bm25 import Analyzer, BM25Engine, check_settings
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc

# Three documents; "The", "and" and "with" are English stopwords and are not counted.
TOY = [
    ("c1", "d1", "The apple, banana and apple!"),  # terms: apple banana apple        dl 3
    ("c2", "d2", "banana with cherry"),            # terms: banana cherry             dl 2
    ("c3", "d3", "Cherry date elderberry fig"),    # terms: cherry date elderberry fig dl 4
]


def test_scores_computed_by_hand():
    engine = BM25Engine(TOY, stemmer="none")  # k1 1.5, b 0.75, english stopwords
    # N = 3, avgdl = (3 + 2 + 4) / 3 = 3
    idf_apple = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))   # df 1: ln(8/3)  = 0.98083
    idf_cherry = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # df 2: ln(1.6)  = 0.47000
    # d1: apple tf 2, dl 3: 2 / (2 + 1.5 * (0.25 + 0.75 * 3/3)) = 2 / 3.5
    # d2: cherry tf 1, dl 2: 1 / (1 + 1.5 * (0.25 + 0.75 * 2/3)) = 1 / 2.125
    # d3: cherry tf 1, dl 4: 1 / (1 + 1.5 * (0.25 + 0.75 * 4/3)) = 1 / 2.875
    expected = [("c1", idf_apple * 2 / 3.5), ("c2", idf_cherry / 2.125), ("c3", idf_cherry / 2.875)]
    assert [round(s, 5) for _, s in expected] == [0.56047, 0.22118, 0.16348]
    hits = engine.chunk_hits("apple cherry")
    assert [h.chunk_id for h in hits] == ["c1", "c2", "c3"]
    for hit, (chunk_id, score) in zip(hits, expected):
        assert hit == ChunkHit(chunk_id, "d" + chunk_id[1], pytest.approx(score, rel=1e-6))


def test_k1_and_b_are_used():
    engine = BM25Engine(TOY, stemmer="none", k1=0.9, b=0.4)
    idf_banana = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # df 2
    # d2: banana tf 1, dl 2: 1 / (1 + 0.9 * (0.6 + 0.4 * 2/3));  d1: banana tf 1, dl 3: 1 / (1 + 0.9 * 1.0)
    expected = {"c2": idf_banana / (1 + 0.9 * (0.6 + 0.4 * 2 / 3)), "c1": idf_banana / (1 + 0.9)}
    hits = engine.chunk_hits("banana")
    assert [h.chunk_id for h in hits] == ["c2", "c1"]
    assert {h.chunk_id: h.score for h in hits} == pytest.approx(expected, rel=1e-6)


def test_repeated_query_terms_count_each_time():
    engine = BM25Engine(TOY, stemmer="none")
    once = {h.chunk_id: h.score for h in engine.chunk_hits("fig")}
    twice = {h.chunk_id: h.score for h in engine.chunk_hits("fig fig")}
    assert twice == pytest.approx({k: 2 * v for k, v in once.items()}, rel=1e-6)


def test_stemming_makes_running_match_runs():
    chunks = [("c1", "d1", "She runs every morning"), ("c2", "d2", "He walks to work")]
    stemmed = BM25Engine(chunks, stemmer="english")
    assert [h.chunk_id for h in stemmed.chunk_hits("running")] == ["c1"]
    assert stemmed.query_terms("Running") == ["run"]
    assert BM25Engine(chunks, stemmer="none").chunk_hits("running") == []


def test_stopwords_drop_the():
    chunks = [("c1", "d1", "the cat"), ("c2", "d2", "the dog"), ("c3", "d3", "a bird")]
    english = BM25Engine(chunks, stopwords="english")
    assert english.chunk_hits("the") == []
    assert english.chunk_hits("the cat") == english.chunk_hits("cat")
    assert english.query_terms("The cat and the dog") == ["cat", "dog"]
    kept = BM25Engine(chunks, stopwords="none")
    assert [h.chunk_id for h in kept.chunk_hits("the")] == ["c1", "c2"]


def test_empty_punctuation_and_unknown_queries_return_nothing():
    engine = BM25Engine(TOY)
    for query in ("", "   ", "!!! ...", "the and of", "zebra"):
        assert engine.chunk_hits(query) == []
        assert engine.search(query) == []


def test_title_and_body_finds_a_term_only_in_the_title():
    chunks = [("c1", "d1", "measured in mice"), ("c2", "d1", "second part"), ("c3", "d2", "measured in rats")]
    titles = {"d1": "Vitamin D and bone density", "d2": "Sleep"}
    body = BM25Engine(chunks, titles=titles, fields="body")
    assert body.chunk_hits("vitamin") == []
    both = BM25Engine(chunks, titles=titles, fields="title+body")
    assert [h.chunk_id for h in both.chunk_hits("vitamin")] == ["c1", "c2"]  # the title is on every chunk
    assert [d.doc_id for d in both.search("vitamin")] == ["d1"]
    assert both.settings()["fields"] == "title+body"


def test_title_and_body_needs_every_title():
    with pytest.raises(ValueError, match="needs titles"):
        BM25Engine(TOY, fields="title+body")
    with pytest.raises(ValueError, match=r"no title for doc id\(s\) \['d3'\]"):
        BM25Engine(TOY, fields="title+body", titles={"d1": "", "d2": "x"})
    BM25Engine(TOY, fields="body", titles={})  # titles are not read with fields=body


def test_one_tokenizer_for_chunks_and_queries():
    # TOKEN on case-folded text: "ß" folds to "ss", underscores and hyphens split.
    chunks = [("c1", "d1", "STRASSE closed"), ("c2", "d2", "foo_bar baz-qux")]
    engine = BM25Engine(chunks, stemmer="none")
    assert [h.chunk_id for h in engine.chunk_hits("Straße")] == ["c1"]
    assert [h.chunk_id for h in engine.chunk_hits("bar")] == ["c2"]
    assert [h.chunk_id for h in engine.chunk_hits("QUX")] == ["c2"]
    assert Analyzer(stemmer="none", stopwords="none")("Foo_Bar, BAZ!") == ["foo", "bar", "baz"]


@pytest.mark.parametrize("kwargs, message", [
    ({"stemmer": "porter"}, "bm25 stemmer 'porter' is not valid; valid: english, none"),
    ({"stemmer": None}, "bm25 stemmer None is not valid"),
    ({"stopwords": "en"}, "bm25 stopwords 'en' is not valid; valid: english, none"),
    ({"fields": "title"}, r"bm25 fields 'title' is not valid; valid: body, title\+body"),
    ({"k1": -0.1}, "bm25 k1 -0.1 is not valid"),
    ({"k1": True}, "bm25 k1 True is not valid"),
    ({"k1": float("nan")}, "bm25 k1 nan is not valid"),
    ({"k1": "1.5"}, "bm25 k1 '1.5' is not valid"),
    ({"b": 1.5}, "bm25 b 1.5 is not valid; valid: a number from 0 to 1"),
    ({"b": -0.01}, "bm25 b -0.01 is not valid"),
    ({"chunk_top_k": 0}, "bm25 chunk_top_k 0 is not valid"),
    ({"depth": 2.0}, "bm25 depth 2.0 is not valid"),
])
def test_bad_settings_raise_early_naming_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BM25Engine(TOY, **kwargs)


def test_check_settings_and_other_input_errors():
    assert check_settings() == {"stemmer": "english", "stopwords": "english", "fields": "body", "k1": 1.5, "b": 0.75}
    with pytest.raises(ValueError, match="stemmer"):
        check_settings(stemmer=["english"])
    with pytest.raises(ValueError, match="at least one chunk"):
        BM25Engine([])
    with pytest.raises(ValueError, match="chunk id 'c1' appears more than once"):
        BM25Engine([("c1", "d1", "a b"), ("c1", "d2", "c d")])


def test_settings_record_the_configuration():
    engine = BM25Engine(TOY, stemmer="none", stopwords="none", k1=1, b=0)
    assert engine.settings() == {"stemmer": "none", "stopwords": "none", "fields": "body", "k1": 1.0, "b": 0.0}
    engine.settings()["k1"] = 99.0  # a copy
    assert engine.settings()["k1"] == 1.0
    assert BM25Engine(TOY).settings() == {"stemmer": "english", "stopwords": "english", "fields": "body",
                                          "k1": 1.5, "b": 0.75}
    assert BM25Engine.name == "bm25" and BM25Engine.needs_embedding is False


def test_ties_are_broken_by_chunk_id_even_at_the_cut():
    # Five chunks with equal text score equally; the input order is not id order.
    chunks = [(cid, f"doc-{cid}", "kettle boils") for cid in ("e", "b", "d", "a", "c")] + [("z", "doc-z", "cage")]
    engine = BM25Engine(chunks, chunk_top_k=3)
    hits = engine.chunk_hits("kettle")
    assert [h.chunk_id for h in hits] == ["a", "b", "c"]
    assert len({h.score for h in hits}) == 1
    assert engine.chunk_hits("kettle") == hits  # repeatable
    # Score first, then id: a higher score beats a smaller id.
    mixed = BM25Engine(chunks + [("zz", "doc-zz", "kettle kettle boils")], chunk_top_k=3)
    assert [h.chunk_id for h in mixed.chunk_hits("kettle")] == ["zz", "a", "b"]


def test_the_same_rows_in_any_order_give_the_same_hits():
    forward = BM25Engine(TOY, stemmer="english")
    backward = BM25Engine(list(reversed(TOY)), stemmer="english")
    for query in ("apple cherry", "banana", "cherries and figs"):
        assert forward.chunk_hits(query) == backward.chunk_hits(query)


def test_search_returns_documents_by_their_best_chunk():
    chunks = [("c1", "d1", "cage cage"), ("c2", "d1", "cage"), ("c3", "d2", "cage door")]
    engine = BM25Engine(chunks, depth=1)
    docs = engine.search("cage")
    assert len(docs) == 1 and isinstance(docs[0], RankedDoc)
    assert docs[0].doc_id == "d1" and docs[0].chunk_id == "c1"


def test_chunks_without_any_index_term():
    engine = BM25Engine([("c1", "d1", "the of and"), ("c2", "d2", "")])
    assert engine.chunk_hits("the") == [] and engine.chunk_hits("anything") == []
    some = BM25Engine([("c1", "d1", "the of and"), ("c2", "d2", ""), ("c3", "d3", "kettle")])
    assert [h.chunk_id for h in some.chunk_hits("kettle")] == ["c3"]


def test_importing_the_module_loads_neither_bm25s_nor_pystemmer():
    code = ("import sys, eval_pipeline.ranking.bm25 as m; m.check_settings(stemmer='none'); "
            "print(','.join(x for x in ('bm25s', 'Stemmer', 'numpy') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
