"""Property-based test of the review-file reader (extra golds, #25, hunt the class): random
bytes, random Unicode (line separators, lone surrogates, bidi and zero-width controls, NUL, a
BOM), deep nesting and huge values, and random rows built from the review file's fields. The
reader returns its rows, or raises QuestionSetError (ExtraGoldsError) naming the file, within a
time bound; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_pipeline.questions.extra_golds import load_extra_golds, read_review_rows
from eval_pipeline.questions.sets import Question, QuestionSetError

# A hang detector, not a timing: a reader that backtracks or recurses without bound takes minutes;
# 30 s per input leaves room for a loaded 2-core machine (timings vary ~2.5x).
HANG = timedelta(seconds=30)

DOCS = ["d1", "d2"]
QUESTIONS = [Question(qid="q1", question="What is one?", gold=("d1",)),
             Question(qid="q2", question="What is two?", gold=())]
SPECIAL = ["\u2028", "\u2029", "\u0085", "\x00", "\x0b", "\x0c", "\x1c", "\r", "\n", "\t", "\u200b", "\u202e",
           "\u2066", "\ufeff", "\ud800", "\udc80", "\udfff", '"', "\\", "{", "[", "é", "𝔘", " "]
TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=15)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT,
                    st.sampled_from(DOCS + ["q1", "q2", "What is one?", "gpt-x@https://e", 0, 1, 2, 3, 3.0, True]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(TEXT, inner, max_size=3)), max_leaves=5)
HUGE = st.sampled_from([10_001, 1_440_000]).map(lambda n: "w " * (n // 2))
GOOD = {"question_id": st.sampled_from(["q1", "q2", "q3"]), "doc_id": st.sampled_from(DOCS + ["d9"]),
        "grade": st.sampled_from([0, 1, 2, 3, 4, -1, 2.0, 2.5, True]), "judged_by": st.just("gpt-x@https://e"),
        "accept": st.sampled_from([True, False, "yes", 1, None])}
ROW = st.fixed_dictionaries(
    {name: st.one_of(strategy, strategy, TEXT, VALUES) for name, strategy in GOOD.items()},
    optional={"question": st.one_of(st.sampled_from(["What is one?", "What is 1?"]), TEXT, HUGE, VALUES),
              "passage": st.one_of(TEXT, HUGE, VALUES), "reason": st.one_of(TEXT, HUGE, VALUES),
              "prompt_version": st.one_of(st.none(), TEXT, VALUES), "accepted_by": st.one_of(st.none(), TEXT, VALUES),
              "note": VALUES})


def _encode(line: str) -> bytes:
    return line.encode("utf-8", "surrogatepass")  # a lone surrogate written raw is a byte that is not UTF-8


@st.composite
def jsonl_files(draw) -> bytes:
    rows = draw(st.lists(st.one_of(ROW, ROW, VALUES), max_size=5))
    ascii_only = draw(st.booleans())
    sep = draw(st.sampled_from(["\n", "\r\n", "\u2028", "\u0085", "\n\n", "\r"]))
    bom = draw(st.sampled_from(["", "", "\ufeff"]))
    return _encode(bom + sep.join(json.dumps(r, ensure_ascii=ascii_only) for r in rows)
                   + draw(st.sampled_from(["", "\n"])))


@st.composite
def deep_files(draw) -> bytes:
    n = draw(st.sampled_from([10, 500, 2_000, 100_000]))
    opening, closing = draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
    value = opening * n + draw(st.sampled_from(["1", "9" * 5_000, "1e999", "-0.0"])) + closing * n  # and huge numbers
    field = draw(st.sampled_from(["question_id", "grade", "accept", "passage", "note"]))
    row = {"question_id": "q1", "doc_id": "d2", "grade": 2, "judged_by": "m", "accept": True}
    row.pop(field, None)
    line = json.dumps(row)[:-1] + ', "' + field + '": ' + value + "}"
    return (line + "\n").encode()


FILES = st.one_of(st.binary(max_size=400), st.text(max_size=200).map(_encode), jsonl_files(), jsonl_files(),
                  deep_files())


def _check(path: Path, call) -> None:
    try:
        call()
    except QuestionSetError as exc:  # ExtraGoldsError is one
        assert str(exc).startswith(str(path)), str(exc)


@settings(max_examples=100, deadline=HANG, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(FILES)
def test_a_review_file_loads_or_names_the_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "review.jsonl"
        path.write_bytes(data)
        _check(path, lambda: read_review_rows(path, questions=QUESTIONS, doc_ids=DOCS))
        _check(path, lambda: load_extra_golds(path))
        _check(path, lambda: load_extra_golds(path, questions=QUESTIONS, doc_ids=DOCS))
