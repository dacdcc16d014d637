"""A message about one setting of a variant names the line of that setting, not the line its
variant starts on: `FILE:12: variant 1: depth ...` for a `depth: -1` on line 12, so the line a
person is sent to is the line to edit. A message about the variant as a whole (not a mapping,
no engine, the key of another variant) keeps the variant's line (or none, as before). The text
after `FILE:LINE` never changes (README: `FILE:LINE: variant N: SETTING …`): each expected
message here is the one the same settings give when they are not read from a file (no line),
with the line put in; and that message, from a mapping not read from a file, is unchanged.

Each file marks the line the message must name with `# <-`."""

from __future__ import annotations

import pytest
import yaml

from eval_pipeline.config.sweep import load_sweep, parse_sweep
from eval_pipeline.ranking.variants import VariantConfigError, parse_variant

HEAD = "baseline: first\ngate:\n  strict: false\nvariants:\n  - engine: pg-dense\n    name: first\n"

SETTINGS = {
    "depth": "  - engine: pg-dense\n    name: d\n    depth: -1  # <-\n",
    "chunk_top_k": "  - engine: pg-dense\n    depth: 5\n    chunk_top_k: 0  # <-\n    name: c\n",
    "chunk_top_k too deep for a leg": "  - engine: pg-dense\n    name: c\n    chunk_top_k: 99999  # <-\n",
    "rerank_depth": "  - engine: pg-dense\n    name: r\n    rerank_depth: 0  # <-\n",
    "abstain_below": "  - engine: pg-dense\n    name: a\n    abstain_below: .nan  # <-\n",
    "engine": "  - name: e\n    engine: elastic  # <-\n",
    "fusion": "  - engine: hybrid\n    fusion: sum  # <-\n",
    "legs": "  - engine: hybrid\n    legs:  # <-\n      - keyword\n",
    "weights": "  - engine: hybrid\n    legs: [keyword, dense]\n    weights: [1, -1]  # <-\n",
    "rrf_k": "  - engine: hybrid\n    name: h\n    rrf_k: 0  # <-\n    fusion: rrf\n",
    "rrf_k without rrf fusion": "  - engine: hybrid\n    rrf_k: 10  # <-\n    fusion: merge\n",
    "tune": "  - engine: hybrid\n    name: t\n    tune: depth  # <-\n",
    "tune beside the tuned setting": "  - engine: hybrid\n    rrf_k: 10\n    tune: rrf_k  # <-\n",
    "reranker": "  - engine: pg-dense\n    name: x\n    reranker: colbert  # <-\n",
    "reranker kind in a mapping": "  - engine: pg-dense\n    reranker:\n      kind: colbert  # <-\n",
    # a check of one option: that option's line
    "reranker option": ("  - engine: pg-dense\n    reranker:\n      kind: cross-encoder\n      model: m\n"
                        "      device: 3  # <-\n"),
    # the reranker's constructor refuses its options as a whole: the reranker's line
    "reranker options together": "  - engine: pg-dense\n    reranker:  # <-\n      kind: mmr\n      lambda_: 2\n",
    # several unknown options: the first one in the file (the message lists them sorted)
    "unknown reranker options": ("  - engine: pg-dense\n    reranker:\n      kind: mmr\n      zeta: 1  # <-\n"
                                 "      alpha: 2\n"),
    "abstain": "  - engine: pg-dense\n    name: a\n    abstain: sometimes  # <-\n",
    "abstain beside abstain_below": "  - engine: pg-dense\n    abstain_below: 0.5\n    abstain: auto  # <-\n",
    "abstain setting": ("  - engine: pg-dense\n    abstain:\n      policy: threshold\n      below: .inf  # <-\n"),
    "abstain policy in a mapping": "  - engine: pg-dense\n    abstain:\n      policy: sometimes  # <-\n",
    "abstain needs below": "  - engine: pg-dense\n    abstain:  # <-\n      policy: threshold\n",
    "unknown abstain settings": ("  - engine: pg-dense\n    abstain:\n      policy: auto\n      zeta: 1  # <-\n"
                                 "      alpha: 2\n"),
    "leg option match": "  - engine: pg-keyword\n    name: k\n    match: sometimes  # <-\n",
    "leg option fields": "  - engine: hybrid\n    legs: [bm25, dense]\n    fields: 3  # <-\n",
    "name": "  - engine: pg-dense\n    depth: 5\n    name: Not A Key  # <-\n",
    # several unknown settings: the first one in the file (the message lists them sorted)
    "unknown settings": "  - engine: pg-dense\n    depth: 5\n    zeta: 1  # <-\n    alpha: 2\n",
    # flow style: the setting is on the variant's line
    "flow style": "  - {engine: pg-dense, depth: -1}  # <-\n",
    "flow style over lines": "  - {engine: pg-dense,\n     depth: -1}  # <-\n",
}

# A setting a variant takes from an anchored mapping through a merge key (`<<: *base`) names the
# line of that `<<` in the variant at fault: the value is written in another variant (or in a
# mapping shared by several), and a line there would point outside the variant the message
# names; the `<<` line is where this variant takes it, where an override goes. A setting the
# variant gives itself, next to a merge, names its own line.
MERGES = {
    "a merged setting": ("  - &base\n    engine: hybrid\n    rrf_k: 10\n    name: a\n"
                         "  - name: b\n    <<: *base  # <-\n    fusion: merge\n"),
    # a setting inside a setting (a reranker option) taken through a merge: the `<<` line too
    "a merged nested setting": ("  - engine: pg-dense\n    name: a\n    reranker: &rr\n      kind: mmr\n"
                                "      lambda_: 0.5\n"
                                "  - engine: pg-dense\n    name: b\n    reranker:\n      <<: *rr  # <-\n"
                                "      kind: bi-encoder\n"),
    "an own setting beside a merge": ("  - &base\n    engine: hybrid\n    name: a\n"
                                      "  - <<: *base\n    name: b\n    rrf_k: 0  # <-\n"),
    # a setting given as an alias of a mapping written in another variant: the setting's line
    # here, not a line inside the other variant
    "an alias of another variant's mapping": ("  - engine: pg-dense\n    name: a\n    abstain: &ab\n"
                                              "      policy: threshold\n      below: 0.3\n"
                                              "      score: dense_cosine\n"
                                              "  - engine: bm25\n    abstain: *ab  # <-\n"),
}

# About the variant as a whole: the line its mapping starts on
WHOLE = {
    "no engine": "  - name: e  # <-\n    depth: 5\n",
    "no engine, flow style": "  - {name: e, depth: 5}  # <-\n",
    # two variants with one key: the line of the later one, which needs the other name
    "the key of another variant": "  - engine: bm25\n  - engine: bm25  # <-\n",
}

# No line today, none after: an item that is not a mapping read from the file
UNLOCATED = {
    "not a mapping": "  - [pg-dense]\n",
    "an invalid engine given as a string": "  - elastic\n",
}


def _file(tmp_path, variants: str) -> tuple[str, str]:
    text = HEAD + variants
    path = tmp_path / "variants.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path), text


def _marked_line(text: str) -> int:
    (line,) = [n for n, row in enumerate(text.splitlines(), start=1) if row.endswith("# <-")]
    return line


def _message(call) -> str:
    with pytest.raises(VariantConfigError) as raised:
        call()
    return str(raised.value)


def _check(tmp_path, variants: str) -> None:
    path, text = _file(tmp_path, variants)
    unlocated = _message(lambda: parse_sweep(yaml.safe_load(text), source=path))
    assert unlocated.startswith(f"{path}: variant "), unlocated
    expected = f"{path}:{_marked_line(text)}: variant " + unlocated.removeprefix(f"{path}: variant ")
    assert _message(lambda: load_sweep(path)) == expected


@pytest.mark.parametrize("case", list(SETTINGS))
def test_a_message_about_a_setting_names_the_settings_line(tmp_path, case):
    _check(tmp_path, SETTINGS[case])


@pytest.mark.parametrize("case", list(MERGES))
def test_a_setting_from_a_merge_key_names_the_line_of_the_merge(tmp_path, case):
    _check(tmp_path, MERGES[case])


@pytest.mark.parametrize("case", list(WHOLE))
def test_a_message_about_the_whole_variant_names_its_first_line(tmp_path, case):
    _check(tmp_path, WHOLE[case])


@pytest.mark.parametrize("case", list(UNLOCATED))
def test_a_message_without_a_line_stays_without_one(tmp_path, case):
    path, text = _file(tmp_path, UNLOCATED[case])
    assert _message(lambda: load_sweep(path)) == _message(lambda: parse_sweep(yaml.safe_load(text), source=path))


def test_the_issue_example(tmp_path):
    path = tmp_path / "variants.yaml"
    path.write_text("\n" * 9 + "variants:\n  - engine: pg-dense\n    depth: -1\n", encoding="utf-8")
    assert _message(lambda: load_sweep(path)) == f"{path}:12: variant 1: depth must be an integer in [1, 1000], got -1"


def test_a_mapping_not_read_from_a_file_gives_todays_message():
    variants = [{"engine": "pg-dense", "depth": -1}]
    assert _message(lambda: parse_sweep({"variants": variants})) == (
        "<config>: variant 1: depth must be an integer in [1, 1000], got -1")
    assert _message(lambda: parse_sweep({"variants": variants}, source="v.yaml")) == (
        "v.yaml: variant 1: depth must be an integer in [1, 1000], got -1")
    reranked = [{"engine": "pg-dense", "reranker": {"kind": "mmr", "colour": 1}}]
    assert _message(lambda: parse_sweep({"variants": reranked})) == (
        "<config>: variant 1 ('pg-dense+mmr'): reranker 'mmr' has no option(s) 'colour'; valid options: lambda_")


def test_a_plain_label_is_kept_as_given():
    assert _message(lambda: parse_variant({"engine": "pg-dense", "depth": -1}, "the reference configuration x")) == (
        "the reference configuration x: depth must be an integer in [1, 1000], got -1")
    assert _message(lambda: parse_variant({"engine": "pg-dense", "reranker": {"kind": "mmr", "lambda_": 2}}, "ref")) \
        == "ref ('pg-dense+mmr'): reranker 'mmr': lambda_ must be a number in [0, 1], got 2; valid options: lambda_"


def test_a_file_that_loads_still_loads(tmp_path):
    path, _ = _file(tmp_path, "  - &base\n    engine: hybrid\n    name: h1\n    reranker:\n      kind: mmr\n"
                              "  - <<: *base\n    name: h2\n    rrf_k: 30\n")
    assert list(load_sweep(path).keys) == ["first", "h1", "h2"]
