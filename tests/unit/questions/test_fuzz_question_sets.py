"""Property-based test of the question-set reader (#25, hunt the class): random bytes, random
Unicode (line separators, lone surrogates, bidi and zero-width controls, NUL), deep nesting and
huge values. The reader loads the file, or raises QuestionSetError naming the file, within a
time bound; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_pipeline.questions.sets import HEADER_KIND, QuestionSetError, load_question_set, stamp_question_file

# A hang detector, not a timing: a reader that backtracks or recurses without bound takes minutes;
# 30 s per input leaves room for a loaded 2-core machine (timings vary ~2.5x).
HANG = timedelta(seconds=30)

SIG = "abcdef0123456789"
DOCS = ["d1", "d2"]
SPECIAL = ["\u2028", "\u2029", "\u0085", "\x00", "\x0b", "\x0c", "\x1c", "\r", "\n", "\t", "\u200b", "\u202e",
           "\u2066", "\ufeff", "\ud800", "\udc80", "\udfff", '"', "\\", "{", "[", "é", "𝔘"]
TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=15)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT,
                    st.sampled_from(DOCS + ["MATCH", "GAP"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(TEXT, inner, max_size=3)), max_leaves=5)
HUGE = st.sampled_from([10_001, 1_440_000]).map(lambda n: "w " * (n // 2))
QUESTION = st.fixed_dictionaries(
    {"qid": st.one_of(TEXT, VALUES), "question": st.one_of(TEXT, HUGE, VALUES),
     "gold": st.one_of(st.lists(st.sampled_from(DOCS), max_size=2), VALUES)},
    optional={"form": VALUES, "relevance": VALUES, "hard_class": VALUES, "gist": st.one_of(TEXT, VALUES),
              "extra": VALUES})
HEADER = st.one_of(st.just({"kind": HEADER_KIND, "version": 1, "corpus_signature": SIG}),
                   st.dictionaries(TEXT, VALUES, max_size=3))


def _encode(line: str) -> bytes:
    return line.encode("utf-8", "surrogatepass")  # a lone surrogate written raw is a byte that is not UTF-8


@st.composite
def jsonl_files(draw) -> bytes:
    rows = [draw(HEADER)] + draw(st.lists(st.one_of(QUESTION, VALUES), max_size=4))
    ascii_only = draw(st.booleans())
    sep = draw(st.sampled_from(["\n", "\r\n", "\u2028", "\n\n"]))
    return _encode(sep.join(json.dumps(r, ensure_ascii=ascii_only) for r in rows) + draw(st.sampled_from(["", "\n"])))


@st.composite
def deep_files(draw) -> bytes:
    n = draw(st.sampled_from([10, 500, 2_000, 100_000]))
    opening, closing = draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
    header = json.dumps({"kind": HEADER_KIND, "version": 1, "corpus_signature": SIG})
    value = opening * n + draw(st.sampled_from(["1", "9" * 5_000, "1e999", "-0.0"])) + closing * n  # and huge numbers
    field = draw(st.sampled_from(["qid", "question", "gold", "relevance"]))
    line = '{"qid": "q1", "question": "q?", "gold": ["d1"], "' + field + '": ' + value + "}"
    return (header + "\n" + line + "\n").encode()


FILES = st.one_of(st.binary(max_size=400), st.text(max_size=200).map(_encode), jsonl_files(), deep_files())


def _check(path: Path, call) -> None:
    try:
        call()
    except QuestionSetError as exc:
        assert str(exc).startswith(str(path)), str(exc)


@settings(max_examples=100, deadline=HANG, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(FILES)
def test_a_question_set_loads_or_names_the_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "q.jsonl"
        path.write_bytes(data)
        _check(path, lambda: load_question_set(path, corpus_signature=SIG, doc_ids=DOCS, require_fingerprint=False))
        _check(path, lambda: stamp_question_file(path, SIG, DOCS))
