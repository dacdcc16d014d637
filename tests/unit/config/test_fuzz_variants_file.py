"""Property-based test of the variants-file reader (#25, hunt the class): random bytes, random
Unicode (line separators, lone surrogates, bidi and zero-width controls, NUL), deep nesting, huge
values, YAML anchors and aliases (an alias bomb too), tags (a !!python/object must be refused),
duplicate keys, and random structures built from the file's valid keys (variants, indexes, gate,
answers, ...). `load_sweep` returns a sweep, or raises VariantConfigError naming the file, within
a time bound; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eval_pipeline.config.sweep import load_sweep
from eval_pipeline.ranking.variants import VariantConfigError

# A hang detector, not a timing: a reader that backtracks or recurses without bound takes minutes;
# 30 s per input leaves room for a loaded 2-core machine (timings vary ~2.5x).
HANG = timedelta(seconds=30)

SPECIAL = ["\u2028", "\u2029", "\u0085", "\x00", "\x0b", "\x0c", "\r", "\n", "\t", "\u200b", "\u202e", "\u2066",
           "\ufeff", "\ud800", "\udc80", "\udfff", '"', "'", "\\", ":", "- ", "#", "&a", "*a", "!!", "{", "[", "|",
           "é", "𝔘"]
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=12).map("".join)
NAMES = ["pg-keyword", "pg-dense", "hybrid", "bm25", "metadata", "mmr", "cross-encoder", "rrf", "merge", "dbsf",
         "keyword", "dense", "bundled", "local", "openai", "word", "sentence", "passage", "rrf_k", "weights",
         "hybrid+mmr", "x|hybrid", "0 2 * * *", "hit@1", "mrr", "ndcg@10", "max_pass_rate_drop"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30, max_value=10**40),
                    st.floats(), TEXT, st.sampled_from(NAMES), st.sampled_from([0, 1, 2, 60, 0.5, 0.05, 1e308, -1]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.one_of(TEXT, st.sampled_from(NAMES)), inner,
                                                                      max_size=3)), max_leaves=5)
HUGE = st.sampled_from([10_001, 500_000]).map(lambda n: "w" * n)


def _any(*strategies):
    return st.one_of(*strategies, VALUES)


VARIANT = _any(st.sampled_from(NAMES[:5]), st.fixed_dictionaries(
    {"engine": _any(st.sampled_from(NAMES[:5]))},
    optional={"name": _any(st.sampled_from(["a", "hybrid-x", "B", "x|y"]), HUGE), "depth": VALUES,
              "chunk_top_k": VALUES, "rerank_depth": VALUES, "abstain_below": VALUES,
              "reranker": _any(st.sampled_from(["none", "mmr"]),
                               st.fixed_dictionaries({"kind": _any(st.sampled_from(["mmr", "cross-encoder"]))},
                                                     optional={"model": VALUES, "lambda_": VALUES})),
              "fusion": _any(st.sampled_from(["rrf", "merge", "dbsf"])),
              "legs": _any(st.lists(st.sampled_from(["keyword", "dense", "bm25"]), max_size=3)),
              "weights": _any(st.lists(st.floats(), max_size=3)), "rrf_k": VALUES,
              "tune": _any(st.sampled_from(["rrf_k", "weights"])), "fields": _any(st.just("title+body"))}))
INDEX = _any(st.fixed_dictionaries({}, optional={
    "name": _any(st.sampled_from(["i1", "minilm-w150-o20"])),
    "embedder": _any(st.sampled_from(["bundled", "local", "openai"]),
                     st.fixed_dictionaries({"kind": _any(st.sampled_from(["bundled", "local", "openai"]))},
                                           optional={"model": VALUES, "base_url": VALUES, "api_key_env": VALUES})),
    "chunking": _any(st.fixed_dictionaries({}, optional={
        "split_by": _any(st.sampled_from(["word", "sentence", "passage"])), "split_length": VALUES,
        "split_overlap": VALUES, "embed_title": VALUES}))}))
SECTIONS = {
    "variants": _any(st.lists(VARIANT, max_size=4)),
    "baseline": _any(st.sampled_from(NAMES[:5] + ["i1|hybrid"])),
    "indexes": _any(st.lists(INDEX, max_size=3)),
    "gate": _any(st.fixed_dictionaries({}, optional={
        "tolerances": _any(st.dictionaries(st.sampled_from(["hit@1", "mrr", "ndcg@10", "nope"]), VALUES, max_size=3)),
        "strict": VALUES, "effect": VALUES})),
    "answers": _any(st.fixed_dictionaries({}, optional={
        "gate": _any(st.dictionaries(st.sampled_from(["max_pass_rate_drop", "max_mean_score_drop", "strict"]),
                                     VALUES, max_size=3)),
        "prices": _any(st.dictionaries(TEXT, _any(st.dictionaries(
            st.sampled_from(["prompt_per_1k", "completion_per_1k"]), VALUES, max_size=2)), max_size=2))})),
    "audit": _any(st.dictionaries(st.sampled_from(["leakage_share", "near_duplicate", "max_surface_share",
                                                   "blocking", "nope"]), VALUES, max_size=3)),
    "recommend": _any(st.dictionaries(st.sampled_from(["max_p95_ms", "max_storage_mb", "min_quality"]), VALUES,
                                      max_size=3)),
    "tuning": _any(st.dictionaries(st.sampled_from(["fraction", "seed"]), VALUES, max_size=2)),
    "schedule": _any(st.fixed_dictionaries({"cron": _any(st.sampled_from(["0 2 * * *", "* *"]))})),
}
DOCUMENT = st.fixed_dictionaries({"variants": SECTIONS["variants"]},
                                 optional={k: v for k, v in SECTIONS.items() if k != "variants"})


def _encode(text: str) -> bytes:
    # UTF-8: a lone surrogate is written as the text \\udXXX (YAML's emitter writes one as the escape "\\udXXX",
    # which the reader turns back into the lone surrogate). A file that is not UTF-8 is not read:
    # test_a_file_that_is_not_utf8_names_the_file
    return text.encode("utf-8", "backslashreplace")


def _utf8(data: bytes) -> bytes:
    return data.decode("utf-8", "replace").encode("utf-8")


@st.composite
def structured_files(draw) -> bytes:
    doc = draw(st.one_of(DOCUMENT, DOCUMENT, VALUES))
    how = draw(st.sampled_from(["yaml", "yaml-unicode", "json"]))
    try:
        text = json.dumps(doc, ensure_ascii=False) if how == "json" else \
            yaml.safe_dump(doc, allow_unicode=how == "yaml-unicode", sort_keys=False)
    except (ValueError, yaml.YAMLError):  # a value JSON or the emitter cannot write (inf in JSON is fine)
        text = repr(doc)
    sep = draw(st.sampled_from(["\n", "\r\n", "\u2028", "\u0085"]))
    return _encode(text.replace("\n", sep))


VALID = "variants:\n  - engine: hybrid\n  - engine: bm25\n"
SNIPPETS = [
    # anchors, aliases, merge keys
    "base: &b {engine: hybrid}\nvariants:\n  - *b\n  - <<: *b\n    name: h2\n",
    "variants: &v\n  - engine: hybrid\ngate: *v\n",
    "variants:\n  - &r [*r]\n",
    "variants: *undefined\n",
    # an alias bomb: 9 levels of 9 aliases
    "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)) + VALID,
    # tags
    "variants:\n  - !!python/object/apply:os.getcwd []\n",
    "variants: !!python/object:eval_pipeline.ranking.variants.Variant {key: x}\n",
    "!!python/object/new:builtins.dict {}\n",
    "variants:\n  - engine: !!binary aGVsbG8=\n",
    "variants:\n  - engine: !custom hybrid\n",
    "variants: !!set {hybrid: null}\n",
    "variants:\n  - engine: hybrid\n    depth: !!float 1e999\n",
    "variants:\n  - engine: hybrid\n    depth: !!int 99999999999999999999999999999\n",
    "variants:\n  - engine: hybrid\n    depth: .nan\n",
    "variants:\n  - engine: hybrid\n    abstain_below: !!timestamp 2001-12-14\n",
    # duplicate keys
    VALID + "variants:\n  - engine: bm25\n",
    "variants:\n  - engine: hybrid\n    engine: bm25\n",
    VALID + "gate: {strict: true, strict: false}\n",
    VALID + "? [a, b]\n: 1\n? [a, b]\n: 2\n",
    VALID + "? {a: 1}\n: x\n",
    # several documents, directives, odd keys
    VALID + "---\n" + VALID,
    "%YAML 1.1\n---\n" + VALID,
    VALID + "1: 2\n",  # keys of two types that do not sort (test_keys_that_do_not_sort_name_the_file)
    VALID + "indexes:\n  - embedder: {kind: local, model: ./no-such-folder}\n",
    VALID + "indexes:\n  - embedder: {kind: local, model: /}\n",
]


def _deep_flow(n: int, brackets: tuple[str, str], value: str) -> str:
    return VALID + "gate: " + brackets[0] * n + value + brackets[1] * n + "\n"


def _deep_block(n: int) -> str:
    return VALID + "audit:\n" + "".join(" " * (i + 1) + "a:\n" for i in range(n)) + " " * n + "  1\n"


# Nesting the reader survives here; deeper, it refuses naming the file (test_deep_nesting_names_the_file).
DEEP = st.builds(_deep_flow, st.sampled_from([10, 100, 300]), st.sampled_from([("[", "]"), ("{a: ", "}")]),
                 st.sampled_from(["1", "9" * 4_300, "-" + "9" * 4_300, "1e999", "0x" + "f" * 3_000]))
# (a YAML integer of more than 4300 digits is refused naming the file: test_a_huge_integer_names_the_file)
DEEP_BLOCK = st.builds(_deep_block, st.sampled_from([10, 100, 300]))
SPLICE = st.builds(lambda base, at, junk: base[:at % (len(base) + 1)] + junk + base[at % (len(base) + 1):],
                   st.sampled_from([VALID] + [s for s in SNIPPETS if "!!" not in s and "1: 2" not in s]),
                   st.integers(0, 400), TEXT)  # (tagged scalars spliced: test_a_bad_tagged_scalar_names_the_file)

FILES = st.one_of(st.binary(max_size=400).map(_utf8), st.text(max_size=200).map(_encode), structured_files(),
                  structured_files(), st.sampled_from(SNIPPETS).map(_encode), DEEP.map(_encode),
                  DEEP_BLOCK.map(_encode), SPLICE.map(_encode))


def _check(path: Path) -> None:
    try:
        load_sweep(path)
    except VariantConfigError as exc:
        assert str(exc).startswith(str(path)), str(exc)


@settings(max_examples=100, deadline=HANG, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(FILES)
def test_a_variants_file_loads_or_names_the_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_bytes(data)
        _check(path)


@pytest.mark.parametrize("text", SNIPPETS)
def test_each_snippet_loads_or_names_the_file(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_text(text, encoding="utf-8")
        _check(path)


@pytest.mark.parametrize("text", [s for s in SNIPPETS if "!!python" in s])
def test_a_python_tag_is_refused(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(VariantConfigError) as info:
            load_sweep(path)
        assert str(info.value).startswith(str(path))


@settings(max_examples=5, deadline=HANG, derandomize=True, database=None)
@example(_deep_flow(500, ("[", "]"), "1"))
@example(_deep_flow(100_000, ("{a: ", "}"), "1"))
@example(_deep_block(2_000))
@given(st.builds(_deep_flow, st.sampled_from([500, 5_000, 100_000]), st.sampled_from([("[", "]"), ("{a: ", "}")]),
                 st.just("1")))
def test_deep_nesting_names_the_file(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_text(text, encoding="utf-8")
        _check(path)


NOT_UTF8 = [b"\x80", "variants:\n  - engine: hybrid\n    name: \ud800\n".encode("utf-8", "surrogatepass"),
            b"\xff\xfevariants: []", "variants:\n  - engine: hybrid\n".encode("latin-1") + b"# caf\xe9\n"]


@settings(max_examples=5, deadline=HANG, derandomize=True, database=None)
@example(NOT_UTF8[0])
@example(NOT_UTF8[1])
@given(st.sampled_from(NOT_UTF8))
def test_a_file_that_is_not_utf8_names_the_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_bytes(data)
        _check(path)


@settings(max_examples=5, deadline=HANG, derandomize=True, database=None)
@example(_deep_flow(10, ("[", "]"), "9" * 5_000))
@example(VALID + "gate: {effect: " + "1" * 4_301 + "}\n")
@given(st.builds(lambda n, where: VALID.replace("bm25", "bm25\n    depth: " + "9" * n) if where else
                 VALID + "x: " + "9" * n + "\n", st.sampled_from([4_301, 10_000, 100_000]), st.booleans()))
def test_a_huge_integer_names_the_file(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_text(text, encoding="utf-8")
        _check(path)


UNSORTABLE = [VALID + "1: 2\nnull: 3\n", "variants:\n  - {engine: hybrid, 1: 2, null: 3}\n",
              "variants:\n  - {engine: hybrid, reranker: {kind: mmr, 1: 2, null: 3}}\n"]


@settings(max_examples=10, deadline=HANG, derandomize=True, database=None)
@example(UNSORTABLE[0])
@example(UNSORTABLE[1])
@example(UNSORTABLE[2])
@given(st.builds(lambda text, pair: text.replace("1: 2, null: 3", pair).replace("1: 2\nnull: 3",
                                                                              pair.replace(", ", "\n")),
                 st.sampled_from(UNSORTABLE), st.sampled_from(["1: 2, null: 3", "1: 2, x: 3", "true: 1, x: 2",
                                                               "[a]: 1, 2.5: 2, x: 3"])))
def test_keys_that_do_not_sort_name_the_file(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_text(text, encoding="utf-8")
        _check(path)


BAD_TAGGED = ["!!int 099999999999999999999999999999", "!!int x", "!!float x", '!!int ""', "!!bool x", "!!timestamp x",
              "!!timestamp 2001-13-45", "!!int 0b2", "!!int 0x", "!!timestamp 2001-12-14 25:00:00"]


@settings(max_examples=10, deadline=HANG, derandomize=True, database=None)
@example("variants:\n  - engine: hybrid\n    depth: !!int 099999999999999999999999999999\n")
@example(VALID + "x: !!bool x\n")
@example(VALID + "x: !!timestamp x\n")
@example(VALID + 'x: !!int ""\n')
@given(st.builds(lambda value, where: VALID + "gate: {effect: " + value + "}\n" if where else
                 VALID.replace("bm25", "bm25\n    depth: " + value), st.sampled_from(BAD_TAGGED), st.booleans()))
def test_a_bad_tagged_scalar_names_the_file(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "variants.yaml"
        path.write_text(text, encoding="utf-8")
        _check(path)
