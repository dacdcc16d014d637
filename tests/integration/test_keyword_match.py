"""The keyword leg's match and ranking settings (`match`, `ranking`, `normalization`) on the real
embedded Postgres: `any` finds chunks sharing a single term where `all` finds none, `websearch`
honours quotes and `-term`, every ranking / normalization gives the scores Postgres computes
for it directly, queries without lexemes or full of tsquery metacharacters never error, the
settings are validated early and round-trip through to_dict/from_dict.

The default (`all`, ts_rank_cd, 0) is Haystack's ranking; tests/integration/test_keyword_index.py
holds it to PgvectorKeywordRetriever."""

import json
import math

import psycopg
import pytest
from psycopg import sql

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.ranking.keyword_index import (
    TSV_COLUMN,
    IndexedKeywordEngine,
    IndexedKeywordRetriever,
    keyword_query_sql,
    keyword_settings,
    tsv_index_name,
)
from eval_pipeline.store.ingest import ChunkingConfig, ingest
from tests.integration.cli import demo_corpus_with

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)
ALL = 10_000
MODES = ("all", "any", "websearch")

# Words the demo corpus never uses, so the expected matches are exactly these documents.
EXTRA_DOCS = [
    {"doc_id": "quokka-phrase", "title": "Quokka", "content": "The quokka sleeps under the baobab tree at noon."},
    {"doc_id": "quokka-apart", "title": "Baobab", "content": "Under the baobab, something sleeps beside a quokka."},
    {"doc_id": "quokka-jam", "title": "Jam", "content": "A quokka never eats marmalade, whatever the tourists say."},
    {"doc_id": "marmalade", "title": "Toast", "content": "Seville orange marmalade on toast; marmalade again at tea."},
    {"doc_id": "zanzibar", "title": "Islands", "content": "Zanzibar spice farms grow cloves, nutmeg and cinnamon "
     "for export, and the Zanzibar ferry runs twice a day in the dry season, longer words padding this one out."},
    # The URL token keeps its quote: to_tsvector gives the lexeme  x.com/a'b?q=1 , which the
    # `any` query must quote correctly.
    {"doc_id": "url", "title": "Link", "content": "Read http://x.com/a'b?q=1 before the quokka tour."},
]

NO_LEXEMES = ["the", "the and of a", "!!!", "?", " ", "&|!():*'\\", "-the", '"the"', "or", "-", '""', "''",
              "\\", ":*", "()", "! & |", "'' & ''", "<->", "it's"]
METACHARACTERS = [
    "quokka & marmalade", "quokka | marmalade", "!quokka", "quokka & !marmalade", "(quokka marmalade",
    "quokka)", "quokka:*", "quok:*", "quokka:A", "'quokka'", "quokka'", "'quokka", "quokka\\", "\\quokka",
    "qu'okka", "qu\\okka", "quokka <-> marmalade", "quokka <2> baobab", "'' quokka ''", "\\' quokka",
    "quokka''marmalade", "a & b | !c", "(((", ")))", "'':*", "&|!():*'\\ quokka &|!():*'\\",
    "x'); DROP TABLE t;--", "%s %(x)s {}", "http://x.com/a'b?q=1", '"quokka -marmalade"', "-quokka",
    "quokka --marmalade", "quokka or or marmalade", '"unbalanced quokka',
]
RANKINGS = [("ts_rank_cd", 0), ("ts_rank_cd", 1), ("ts_rank_cd", 4), ("ts_rank_cd", 32), ("ts_rank", 0),
            ("ts_rank", 1), ("ts_rank", 2), ("ts_rank", 8 | 16), ("ts_rank", 63)]


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return demo_corpus_with(tmp_path_factory.mktemp("kwmatch"), EXTRA_DOCS)


@pytest.fixture(scope="module")
def table(pg_uri, local_embedder, corpus_path):
    snapshot = load_corpus("jsonl", str(corpus_path))
    return ingest(snapshot, connection_string=pg_uri, embedder=local_embedder, chunking=CHUNKING,
                  log=lambda m: None)  # ingest adds the tsvector column


@pytest.fixture(scope="module")
def retrievers(pg_uri, table):
    made = {}

    def get(match="all", ranking=None, normalization=None):
        key = (match, ranking, normalization)
        if key not in made:
            made[key] = IndexedKeywordRetriever(connection_string=pg_uri, table=table.table, match=match,
                                                ranking=ranking, normalization=normalization)
            made[key].warm_up()
        return made[key]

    yield get
    for r in made.values():
        r.close()


@pytest.fixture(scope="module")
def conn(pg_uri):
    with psycopg.connect(pg_uri, autocommit=True) as c:
        yield c


def _docs(retriever, query):
    return {d.meta["doc_id"] for d in retriever.run(query=query, top_k=ALL)["documents"]}


def _quote_lexeme(lexeme: str) -> str:
    """A tsquery lexeme in quotes, written here independently of the code under test."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _direct(conn, table, query, match, ranking, normalization):
    """{chunk id: score} as Postgres computes it, re-parsing content (no stored column, no
    shared SQL): the reference for the retriever's scores."""
    if match == "any":
        lexemes = conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", (query,)).fetchone()[0]
        if not lexemes:
            return {}
        tsquery, text = sql.SQL("CAST(%s AS tsquery)"), " | ".join(_quote_lexeme(x) for x in lexemes)
    else:
        tsquery = sql.SQL("plainto_tsquery('english', %s)" if match == "all" else "websearch_to_tsquery('english', %s)")
        text = query
    statement = sql.SQL(
        "SELECT id, {rank}(to_tsvector('english', coalesce(content, '')), q, %s) FROM {table}, {tsquery} AS x(q) "
        "WHERE to_tsvector('english', coalesce(content, '')) @@ q"
    ).format(rank=sql.SQL(ranking), table=sql.Identifier(table), tsquery=tsquery)
    return dict(conn.execute(statement, (normalization, text)).fetchall())


def _assert_same_as_direct(conn, table, retriever, query):
    got = retriever.run(query=query, top_k=ALL)["documents"]
    want = _direct(conn, table, query, retriever.match, retriever.ranking, retriever.normalization)
    have = {d.id: d.score for d in got}
    assert len(have) == len(got)
    assert have.keys() == want.keys(), query
    for chunk_id, score in want.items():
        assert have[chunk_id] == pytest.approx(score, rel=1e-6, abs=1e-12), (query, chunk_id)
    assert [(-d.score, d.id) for d in got] == sorted((-d.score, d.id) for d in got)
    return have


# --- what each match mode finds ---------------------------------------------------------------

def test_any_finds_documents_sharing_one_term_where_all_finds_nothing(retrievers):
    query = "zanzibar marmalade"  # no document has both words
    assert _docs(retrievers("all"), query) == set()
    assert _docs(retrievers("websearch"), query) == set()  # unquoted terms are ANDed there too
    found = _docs(retrievers("any"), query)
    assert found == {"zanzibar", "marmalade", "quokka-jam"}
    # The union of what each term finds alone; and `any` contains what `all` finds.
    assert found == _docs(retrievers("all"), "zanzibar") | _docs(retrievers("all"), "marmalade")
    assert _docs(retrievers("any"), "quokka marmalade") >= _docs(retrievers("all"), "quokka marmalade") == {"quokka-jam"}


def test_any_ranks_more_shared_terms_higher(retrievers):
    hits = retrievers("any").run(query="quokka marmalade", top_k=ALL)["documents"]
    assert hits[0].meta["doc_id"] in {"quokka-jam", "marmalade"}  # the two documents with both or twice
    by_doc = {d.meta["doc_id"]: d.score for d in hits}
    assert by_doc["quokka-jam"] > by_doc["quokka-apart"]


def test_websearch_honours_quotes_and_minus(retrievers):
    web, every = retrievers("websearch"), retrievers("all")
    assert _docs(every, "quokka sleeps") == {"quokka-phrase", "quokka-apart"}
    assert _docs(web, '"quokka sleeps"') == {"quokka-phrase"}  # the phrase, words adjacent and in order
    assert _docs(web, '"sleeps quokka"') == set()
    assert _docs(every, '"quokka sleeps"') == {"quokka-phrase", "quokka-apart"}  # quotes are text to plainto
    quokkas = _docs(every, "quokka")
    assert "quokka-jam" in quokkas
    assert _docs(web, "quokka -marmalade") == quokkas - {"quokka-jam"}
    assert _docs(every, "quokka -marmalade") == {"quokka-jam"}  # plainto reads "-marmalade" as a term
    assert _docs(web, "zanzibar or marmalade") == _docs(retrievers("any"), "zanzibar marmalade")
    not_quokka = _docs(web, "-quokka")  # only a negation: every document without the word
    assert not_quokka and not_quokka.isdisjoint(quokkas | {"quokka-phrase", "quokka-apart"})
    assert {"zanzibar", "marmalade"} <= not_quokka


def test_a_lexeme_with_a_quote_is_quoted_for_any(retrievers, conn):
    lexemes = conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))",
                           ("http://x.com/a'b?q=1",)).fetchone()[0]
    assert any("'" in x for x in lexemes), lexemes  # the case the quoting exists for
    assert _docs(retrievers("all"), "http://x.com/a'b?q=1") == {"url"}
    assert _docs(retrievers("any"), "http://x.com/a'b?q=1") == {"url"}
    assert _docs(retrievers("any"), "x.com/a'b?q=1 zanzibar") == {"url", "zanzibar"}


# --- scores: as Postgres defines them ---------------------------------------------------------

@pytest.mark.parametrize("match", MODES)
@pytest.mark.parametrize(("ranking", "normalization"), RANKINGS)
def test_scores_equal_a_direct_postgres_computation(match, ranking, normalization, retrievers, conn, table):
    retriever = retrievers(match, ranking, normalization)
    for query in ["quokka marmalade", "zanzibar marmalade", "How do I submit an expense claim?", "quokka -marmalade",
                  '"quokka sleeps"', "expense claims receipts travel", "VPN laptop password"]:
        _assert_same_as_direct(conn, table.table, retriever, query)


def test_normalization_bits_change_scores_as_documented(retrievers, conn, table):
    query = "quokka marmalade expense"
    for ranking in ("ts_rank", "ts_rank_cd"):
        base = {d.id: d.score for d in retrievers("any", ranking, 0).run(query=query, top_k=ALL)["documents"]}
        assert len(base) > 3
        # 32: rank / (rank + 1)
        scaled = {d.id: d.score for d in retrievers("any", ranking, 32).run(query=query, top_k=ALL)["documents"]}
        assert scaled.keys() == base.keys()
        assert all(scaled[i] == pytest.approx(base[i] / (base[i] + 1), rel=1e-5) for i in base)
        # 2: divided by the document length (the number of positions in its tsvector)
        lengths = dict(conn.execute(sql.SQL(
            "SELECT id, (SELECT sum(greatest(cardinality(positions), 1)) FROM unnest({column})) FROM {table}"
        ).format(column=sql.Identifier(TSV_COLUMN), table=sql.Identifier(table.table))).fetchall())
        by_length = {d.id: d.score for d in retrievers("any", ranking, 2).run(query=query, top_k=ALL)["documents"]}
        assert all(by_length[i] == pytest.approx(base[i] / float(lengths[i]), rel=1e-5) for i in base)
        # 1: "divides the rank by 1 + the logarithm of the document length": in the source,
        # ts_rank divides by log2(length + 1), ts_rank_cd by ln(length + 1)
        log = math.log2 if ranking == "ts_rank" else math.log
        by_log = {d.id: d.score for d in retrievers("any", ranking, 1).run(query=query, top_k=ALL)["documents"]}
        assert all(by_log[i] == pytest.approx(base[i] / log(float(lengths[i]) + 1), rel=1e-5) for i in base)
    # the two functions differ (cover density against term frequency)
    rank = {d.id: d.score for d in retrievers("any", "ts_rank", 0).run(query=query, top_k=ALL)["documents"]}
    cd = {d.id: d.score for d in retrievers("any", "ts_rank_cd", 0).run(query=query, top_k=ALL)["documents"]}
    assert rank.keys() == cd.keys() and any(abs(rank[i] - cd[i]) > 1e-6 for i in rank)


def test_ts_rank_scores_a_negated_term_query_as_postgres_does(retrievers):
    """ts_rank scores an AND query by pairs of terms found near each other; a negated term is never
    found, so "quokka -marmalade" scores 1e-20 for every match (ties, in id order); ts_rank_cd
    still ranks.  Worth knowing before pairing websearch with ts_rank on queries with `-`."""
    flat = retrievers("websearch", "ts_rank", 1).run(query="quokka -marmalade", top_k=ALL)["documents"]
    assert flat and all(0 < d.score < 1e-10 for d in flat)
    assert [d.id for d in flat] == sorted(d.id for d in flat)
    ranked = retrievers("websearch", "ts_rank_cd", 0).run(query="quokka -marmalade", top_k=ALL)["documents"]
    assert {d.id for d in ranked} == {d.id for d in flat} and all(d.score > 1e-6 for d in ranked)


# --- queries that must never error ----------------------------------------------------------

@pytest.mark.parametrize("match", MODES)
@pytest.mark.parametrize("query", NO_LEXEMES)
def test_stopwords_or_punctuation_only_returns_nothing(match, query, retrievers):
    for ranking in ("ts_rank_cd", "ts_rank"):
        assert retrievers(match, ranking).run(query=query)["documents"] == [], (match, ranking, query)


@pytest.mark.parametrize("match", MODES)
def test_tsquery_metacharacters_never_error_and_are_not_syntax(match, retrievers, conn, table):
    for ranking, normalization in (("ts_rank_cd", 0), ("ts_rank", 1)):
        retriever = retrievers(match, ranking, normalization)
        for query in METACHARACTERS + NO_LEXEMES:
            _assert_same_as_direct(conn, table.table, retriever, query)  # runs; equals Postgres' own reading
    if match != "websearch":
        # Operators are text: "!quokka" still finds quokkas, "quokka:*" is no prefix search.
        assert "quokka-jam" in _docs(retrievers(match), "!quokka")
        assert _docs(retrievers(match), "quok:*") == set()
    any_ = retrievers("any")
    assert _docs(any_, "quokka & !marmalade") == _docs(any_, "quokka marmalade")


@pytest.mark.parametrize("match", ("any", "websearch"))
def test_gin_index_is_used_for_every_mode(match, conn, table):
    conn.execute("SET enable_seqscan = off")
    try:
        statement = sql.SQL("EXPLAIN ") + keyword_query_sql(table.table, match=match)
        plan = "\n".join(r[0] for r in conn.execute(statement, ("quokka marmalade", 100)).fetchall())
    finally:
        conn.execute("RESET enable_seqscan")
    assert tsv_index_name(table.table) in plan and "Bitmap Index Scan" in plan, plan


# --- settings: validated early, defaults, round trips ------------------------------------------

def test_defaults_by_match():
    assert keyword_settings() == {"match": "all", "ranking": "ts_rank_cd", "normalization": 0}
    assert keyword_settings("any") == {"match": "any", "ranking": "ts_rank", "normalization": 1}
    assert keyword_settings("websearch") == {"match": "websearch", "ranking": "ts_rank", "normalization": 1}
    assert keyword_settings("any", "ts_rank_cd") == {"match": "any", "ranking": "ts_rank_cd", "normalization": 1}
    assert keyword_settings("all", normalization=5) == {"match": "all", "ranking": "ts_rank_cd", "normalization": 5}
    r = IndexedKeywordRetriever(connection_string="postgresql://x", table="t")
    assert r.settings() == {"match": "all", "ranking": "ts_rank_cd", "normalization": 0}
    assert IndexedKeywordRetriever(connection_string="postgresql://x", table="t", match="websearch",
                                   normalization=0).settings() == {"match": "websearch", "ranking": "ts_rank",
                                                                   "normalization": 0}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"match": "some"}, r"match must be one of 'all', 'any', 'websearch', got 'some'"),
    ({"match": None}, r"match must be one of .*, got None"),
    ({"match": "ANY"}, r"got 'ANY'"),
    ({"ranking": "bm25"}, r"ranking must be one of 'ts_rank_cd', 'ts_rank', got 'bm25'"),
    ({"ranking": "ts_rank_cd(x); --"}, r"ranking must be one of .*, got 'ts_rank_cd\(x\); --'"),
    ({"normalization": 64}, r"normalization must be an integer bitmask 0\.\.63 .*, got 64"),
    ({"normalization": -1}, r"got -1"),
    ({"normalization": True}, r"got True"),
    ({"normalization": 1.0}, r"got 1\.0"),
    ({"normalization": "1"}, r"got '1'"),
])
def test_bad_settings_fail_early_naming_the_value(kwargs, message):
    unreachable = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    with pytest.raises(ValueError, match=message):
        keyword_settings(**kwargs)
    with pytest.raises(ValueError, match=message):
        IndexedKeywordRetriever(connection_string=unreachable, table="t", **kwargs)
    with pytest.raises(ValueError, match=message):  # before it connects (it would fail differently)
        IndexedKeywordEngine(unreachable, "t", **kwargs)
    with pytest.raises(ValueError, match=message):
        keyword_query_sql("t", **kwargs)


@pytest.mark.parametrize("settings", [
    {}, {"match": "any"}, {"match": "websearch"}, {"match": "all", "ranking": "ts_rank", "normalization": 2},
    {"match": "any", "ranking": "ts_rank_cd", "normalization": 63}, {"match": "websearch", "normalization": 0},
])
def test_round_trip_keeps_every_setting(settings, pg_uri, table, monkeypatch):
    from haystack import Pipeline
    from haystack.utils import Secret

    monkeypatch.setenv("KWMATCH_TEST_PG", pg_uri)
    retriever = IndexedKeywordRetriever(connection_string=Secret.from_env_var("KWMATCH_TEST_PG"), table=table.table,
                                        top_k=7, **settings)
    data = retriever.to_dict()
    assert {k: data["init_parameters"][k] for k in ("match", "ranking", "normalization")} == retriever.settings()
    clone = IndexedKeywordRetriever.from_dict(json.loads(json.dumps(data)))
    assert clone.to_dict() == data
    assert clone.settings() == retriever.settings() == keyword_settings(**settings)
    query = "quokka marmalade expense claim"
    assert [(d.id, d.score) for d in clone.run(query=query)["documents"]] == \
        [(d.id, d.score) for d in retriever.run(query=query)["documents"]]
    # Through a Haystack pipeline's YAML too.
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["eval_pipeline.ranking.keyword_index"])
    assert loaded.get_component("retriever").to_dict() == data
    for r in (retriever, clone, loaded.get_component("retriever")):
        r.close()


def test_a_dict_from_before_the_settings_loads_with_haystack_defaults(monkeypatch, pg_uri, table):
    from haystack.utils import Secret

    monkeypatch.setenv("KWMATCH_TEST_PG", pg_uri)
    data = IndexedKeywordRetriever(connection_string=Secret.from_env_var("KWMATCH_TEST_PG"), table=table.table,
                                   match="any").to_dict()
    for key in ("match", "ranking", "normalization"):
        del data["init_parameters"][key]
    assert IndexedKeywordRetriever.from_dict(data).settings() == {"match": "all", "ranking": "ts_rank_cd",
                                                                  "normalization": 0}


def test_engine_passes_the_settings_through(pg_uri, table, retrievers):
    engine = IndexedKeywordEngine(pg_uri, table.table, chunk_top_k=50, depth=5, match="any")
    assert engine.settings() == {"match": "any", "ranking": "ts_rank", "normalization": 1}
    hits = engine.chunk_hits("zanzibar marmalade")
    assert {h.doc_id for h in hits} == {"zanzibar", "marmalade", "quokka-jam"}
    assert [d.doc_id for d in engine.search("zanzibar marmalade")][:1] == [hits[0].doc_id]
    default = IndexedKeywordEngine(pg_uri, table.table, chunk_top_k=50)
    assert default.settings() == keyword_settings() and default.chunk_hits("zanzibar marmalade") == []
    engine.close()
    default.close()
