"""Property-based test of the golden prompt set reader (#25, hunt the class): random bytes,
random Unicode (line separators, lone surrogates, bidi and zero-width controls, NUL), deep
nesting (in a json_schema too) and huge values. The reader loads the set, or raises
GoldenPromptError naming the file, within a time bound; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_pipeline.questions.golden import GoldenPromptError, load_golden_prompts, stamp_golden_file

# A hang detector, not a timing: a reader that backtracks or recurses without bound takes minutes;
# 30 s per input leaves room for a loaded 2-core machine (timings vary ~2.5x).
HANG = timedelta(seconds=30)

DOCS = ["d1", "d2"]
SPECIAL = ["\u2028", "\u2029", "\u0085", "\x00", "\x0b", "\r", "\n", "\u200b", "\u202e", "\u2066", "\ufeff",
           "\ud800", "\udfff", '"', "\\", "(", ")", "*", "+", "?", "\\w", "é", "e\u0301"]
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=12).map("".join)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT,
                    st.sampled_from(DOCS + ["MATCH", "object", "array", "string", "i", "m"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)
HUGE = st.sampled_from([10_001, 300_000]).map(lambda n: "w " * (n // 2))
SCHEMA = st.recursive(
    st.fixed_dictionaries({"type": st.one_of(st.sampled_from(["object", "array", "string", "number"]), VALUES)}),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(TEXT, inner, max_size=2)},
                              optional={"required": st.lists(TEXT, max_size=2)}),
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
        st.dictionaries(TEXT, inner, max_size=2)),
    max_leaves=5)
ASSERTION = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["exact", "contains"]), "value": st.one_of(TEXT, VALUES)},
                          optional={"case_sensitive": VALUES}),
    st.fixed_dictionaries({"type": st.just("regex"), "pattern": st.one_of(TEXT, st.just(r"^(\w+\s?)*$"))},
                          optional={"flags": VALUES}),
    st.fixed_dictionaries({"type": st.just("json_schema"), "schema": st.one_of(SCHEMA, VALUES)}),
    VALUES)
PROMPT = st.fixed_dictionaries(
    {"id": st.one_of(TEXT, VALUES), "prompt": st.one_of(TEXT, HUGE, VALUES),
     "assertions": st.one_of(st.lists(ASSERTION, max_size=3), VALUES)},
    optional={"reference": st.one_of(TEXT, VALUES), "gold": st.one_of(st.lists(st.sampled_from(DOCS)), VALUES),
              "form": VALUES, "tags": VALUES, "static": VALUES, "extra": VALUES})
HEADER = st.one_of(st.just({"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "team.fuzz"}),
                   st.dictionaries(TEXT, VALUES, max_size=3))


def _encode(line: str) -> bytes:
    return line.encode("utf-8", "surrogatepass")


@st.composite
def jsonl_files(draw) -> bytes:
    rows = [draw(HEADER)] + draw(st.lists(st.one_of(PROMPT, VALUES), max_size=3))
    ascii_only = draw(st.booleans())
    sep = draw(st.sampled_from(["\n", "\r\n", "\u2028"]))
    return _encode(sep.join(json.dumps(r, ensure_ascii=ascii_only) for r in rows) + "\n")


@st.composite
def deep_files(draw) -> bytes:
    n = draw(st.sampled_from([31, 33, 400, 3_000, 100_000]))
    header = json.dumps({"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "team.fuzz"})
    if draw(st.booleans()):  # a deep schema
        schema = '{"type": "array", "items": ' * n + '{"type": "string"}' + "}" * n
        line = '{"id": "p1", "prompt": "p?", "assertions": [{"type": "json_schema", "schema": ' + schema + "}]}"
    else:
        inner = draw(st.sampled_from(["", "9" * 5_000, "1e999"]))  # and huge numbers
        line = '{"id": "p1", "prompt": "p?", "reference": "r", "assertions": [], "tags": ' + "[" * n + inner + \
            "]" * n + "}"
    return (header + "\n" + line + "\n").encode()


FILES = st.one_of(st.binary(max_size=400), st.text(max_size=200).map(_encode), jsonl_files(), deep_files())


def _check(path: Path, call) -> None:
    try:
        call()
    except GoldenPromptError as exc:
        assert str(exc).startswith(str(path)), str(exc)


@settings(max_examples=100, deadline=HANG, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(FILES)
def test_a_golden_set_loads_or_names_the_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "golden.jsonl"
        path.write_bytes(data)
        _check(path, lambda: load_golden_prompts(path, doc_ids=DOCS, require_fingerprint=False))
        _check(path, lambda: stamp_golden_file(path, set_id="team.fuzz", doc_ids=DOCS))
