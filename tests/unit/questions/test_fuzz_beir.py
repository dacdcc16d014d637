"""Property-based test of the BEIR question reader (queries.jsonl, qrels/<split>.tsv; #25, hunt the
class): random bytes, random Unicode (line separators, lone surrogates, bidi and zero-width
controls, NUL), deep nesting and huge values. The reader loads the set, or raises
QuestionSetError naming the BEIR folder's file, within a time bound; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_pipeline.questions.sets import QuestionSetError, load_beir_questions

# A hang detector, not a timing: a reader that backtracks or recurses without bound takes minutes;
# 30 s per input leaves room for a loaded 2-core machine (timings vary ~2.5x).
HANG = timedelta(seconds=30)

DOCS = ["d1", "d2", "10"]
SPECIAL = ["\u2028", "\u0085", "\x00", "\r", "\n", "\t", "\u200b", "\u202e", "\ufeff", "\ud800", "\udfff", "²", "①",
           "01", "1", '"']
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=10).map("".join)
IDS = st.one_of(st.sampled_from(["1", "2", "01", "²", "10"]), TEXT)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)
HUGE = st.sampled_from([10_001, 500_000]).map(lambda n: "q " * (n // 2))
QUERY = st.fixed_dictionaries({"_id": st.one_of(IDS, st.integers(), VALUES)},
                              optional={"text": st.one_of(TEXT, HUGE, VALUES), "title": VALUES})


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@st.composite
def queries_files(draw) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=300))
    rows = draw(st.lists(st.one_of(QUERY, VALUES), max_size=5))
    lines = [json.dumps(r, ensure_ascii=draw(st.booleans())) for r in rows]
    if draw(st.booleans()):
        n = draw(st.sampled_from([50, 3_000, 100_000]))
        inner = draw(st.sampled_from(["", "9" * 5_000]))  # and a huge number
        lines.append('{"_id": "1", "text": ' + "[" * n + inner + "]" * n + "}")
    if draw(st.booleans()):
        lines.append('{"_id": ' + "7" * 5_000 + ', "text": "q"}')
    return _encode(draw(st.sampled_from(["\n", "\r\n", "\u2028"])).join(lines) + "\n")


@st.composite
def qrels_files(draw) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=300))
    rows = draw(st.lists(st.tuples(IDS, st.one_of(st.sampled_from(DOCS), TEXT),
                                   st.one_of(st.sampled_from(["0", "1", "2", "-1", "x", "1.5", "²"]), TEXT)),
                         max_size=6))
    header = ["query-id\tcorpus-id\tscore"] if draw(st.booleans()) else []
    lines = header + ["\t".join(r) for r in rows] + draw(st.lists(TEXT, max_size=2))
    return _encode("\n".join(lines) + "\n")


@settings(max_examples=100, deadline=HANG, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(queries_files(), qrels_files())
def test_a_beir_set_loads_or_names_the_file(queries, qrels):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "queries.jsonl").write_bytes(queries)
        (folder / "qrels").mkdir()
        (folder / "qrels" / "test.tsv").write_bytes(qrels)
        try:
            load_beir_questions(folder, split="test", doc_ids=DOCS)
        except QuestionSetError as exc:
            assert str(exc).startswith((str(folder / "queries.jsonl"), str(folder / "qrels" / "test.tsv"))), str(exc)
