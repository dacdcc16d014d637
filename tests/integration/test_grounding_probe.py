"""The grounding grader's corpus probe on the real embedded Postgres: items are looked up through
the keyword index (IndexedKeywordRetriever, websearch phrase) and confirmed verbatim."""

import pytest

from eval_pipeline.answering.context import ContextEntry
from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.grading.grounding import KeywordCorpusProbe, ground_answer
from eval_pipeline.store.ingest import ChunkingConfig, ingest
from tests.integration.cli import demo_corpus_with

pytestmark = pytest.mark.integration

DOCS = [{"doc_id": "api-guide", "title": "API guide", "content": "Call ledger.submit_claim(receipt) to file a "
         "claim. The call returns within 150 ms. Old scripts used ledger_v1 instead. Foo bar stands apart."}]


@pytest.fixture(scope="module")
def table(pg_uri, local_embedder, tmp_path_factory):
    snapshot = load_corpus("jsonl", str(demo_corpus_with(tmp_path_factory.mktemp("grounding"), DOCS)))
    info = ingest(snapshot, connection_string=pg_uri, embedder=local_embedder,
                  chunking=ChunkingConfig(split_length=60, split_overlap=5), log=lambda m: None)
    return info.table


def test_the_keyword_probe_finds_verbatim_items_and_refuses_near_misses(pg_uri, table):
    probe = KeywordCorpusProbe(pg_uri)
    try:
        found = probe.contains(table, ["ledger.submit_claim", "150 ms", "Ledgerline", "ledger.submit_claims",
                                       "foo_bar", "the", "ledger.invented_api"])
        again = probe.contains(table, ["LEDGER.SUBMIT_CLAIM"])
    finally:
        probe.close()
    assert found == {"ledger.submit_claim": True, "150 ms": True, "Ledgerline": True,
                     "ledger.submit_claims": False,  # the index stems it to a match; the text is not there
                     "foo_bar": False,  # the index splits it into foo, bar (present as "Foo bar"): not verbatim
                     "the": False,  # only a stopword: the index cannot search it
                     "ledger.invented_api": False}
    assert again == {"LEDGER.SUBMIT_CLAIM": True} and probe.queries == 7  # the repeat, casefolded, is remembered


def test_an_answer_grounded_against_context_and_corpus(pg_uri, table):
    context = (ContextEntry(1, "c", "api-guide", "Call ledger.submit_claim(receipt) to file a claim."),)
    answer = "Use `ledger.submit_claim(r)` [1]; it takes 150 ms and `ledger.fly()` retries."
    probe = KeywordCorpusProbe(pg_uri)
    try:
        g = ground_answer(answer, context, probe=probe, table=table)
    finally:
        probe.close()
    assert [i.text for i in g.items] == ["ledger.submit_claim", "150 ms", "ledger.fly"]
    assert g.in_context == (True, False, False) and g.in_corpus == (True, True, False)
