"""Identity is content: the benchmark a run measured, a variant's configuration, the engine.

A label a user can keep while changing what it stands for (a re-stamped question set, a
variant's name) must never make two different measurements look alike, nor two alike ones
look different."""

from dataclasses import replace

import pytest

from eval_pipeline.history.identity import (
    benchmark_fingerprint,
    configuration_fingerprint,
    normalized_text,
    scoring_protocol,
    variant_configuration,
)
from eval_pipeline.questions.sets import Question


def q(qid, gold, text=None, **kw):
    return Question(qid=qid, question=text or f"what is {qid}?", gold=tuple(gold), form="MATCH", hard_class=None,
                    gist=None, **kw)


BASE = [q("q1", ["d1"]), q("q2", ["d2", "d3"]), q("q3", [])]


def test_rewording_a_question_is_another_benchmark():
    reworded = [replace(BASE[0], question="please tell me: what is q1?"), *BASE[1:]]
    assert benchmark_fingerprint(reworded) != benchmark_fingerprint(BASE)


@pytest.mark.parametrize("changed", [
    [q("q1", ["d9"]), *BASE[1:]],  # a gold edited
    [q("q1", ["d1"]), q("q2", ["d2"]), BASE[2]],  # a gold removed
    [*BASE[:2], q("q3", ["d1"])],  # an abstention made answerable
    [q("q0", ["d1"]), *BASE[1:]],  # an id changed
    BASE[:2],  # a question dropped from the scored subset
    [replace(BASE[0], relevance={"d1": 2}), *BASE[1:]],  # a grade changed
])
def test_labels_and_the_scored_subset_are_part_of_it(changed):
    assert benchmark_fingerprint(changed) != benchmark_fingerprint(BASE)


def test_the_tuning_part_is_part_of_it():
    assert benchmark_fingerprint(BASE[1:], tuning=BASE[:1]) != benchmark_fingerprint(BASE[1:])
    assert benchmark_fingerprint(BASE[1:], tuning=BASE[:1]) != benchmark_fingerprint(BASE)
    # a question moved between the parts is another benchmark
    assert benchmark_fingerprint(BASE[1:], tuning=BASE[:1]) != benchmark_fingerprint(BASE[:2], tuning=BASE[2:])


def test_order_gold_order_and_white_space_are_not():
    assert benchmark_fingerprint(list(reversed(BASE))) == benchmark_fingerprint(BASE)
    assert benchmark_fingerprint([q("q2", ["d3", "d2"]), BASE[0], BASE[2]]) == benchmark_fingerprint(BASE)
    spaced = [replace(BASE[0], question="  what   is\tq1? "), *BASE[1:]]
    assert benchmark_fingerprint(spaced) == benchmark_fingerprint(BASE)
    assert normalized_text(" a\u00a0 b\n") == "a b"
    # case reaches the engines: it is kept
    assert benchmark_fingerprint([replace(BASE[0], question="WHAT IS Q1?"), *BASE[1:]]) != benchmark_fingerprint(BASE)


def test_an_empty_benchmark_is_refused():
    with pytest.raises(ValueError, match="at least one scored question"):
        benchmark_fingerprint([])


PROVENANCE = {"embedder": "minilm", "embedder_revision": "rev1", "chunking": {"split_length": 150},
              "variants": {"hybrid": {"engine": "hybrid", "depth": 20}, "renamed": {"engine": "hybrid", "depth": 20},
                           "shallow": {"engine": "hybrid", "depth": 3},
                           "tuned": {"engine": "hybrid", "depth": 20, "tuned": {"chosen": {"rrf_k": 1}}}}}


def test_a_configuration_has_no_name():
    assert configuration_fingerprint(PROVENANCE, "hybrid") == configuration_fingerprint(PROVENANCE, "renamed")
    assert configuration_fingerprint(PROVENANCE, "hybrid") != configuration_fingerprint(PROVENANCE, "shallow")
    # what this run's tuning chose is an outcome, not the configuration
    assert configuration_fingerprint(PROVENANCE, "tuned") == configuration_fingerprint(PROVENANCE, "hybrid")
    assert configuration_fingerprint(PROVENANCE, "absent") is None


@pytest.mark.parametrize("field, value", [("embedder", "bge"), ("embedder_revision", "rev2"),
                                          ("chunking", {"split_length": 60})])
def test_the_index_is_part_of_a_configuration(field, value):
    other = {**PROVENANCE, field: value}
    assert configuration_fingerprint(other, "hybrid") != configuration_fingerprint(PROVENANCE, "hybrid")


def test_a_pair_is_configured_on_its_own_index():
    index = {"table": "t1", "embedder": "sre", "embedder_revision": "rev9", "chunking": {"split_length": 60}}
    pair = {**PROVENANCE, "variants": {"i|hybrid": {"engine": "hybrid", "depth": 20, "index": index}}}
    assert variant_configuration(pair, "i|hybrid")["index"] == {"embedder": "sre", "embedder_revision": "rev9",
                                                               "embedder_identity": None,
                                                               "chunking": {"split_length": 60}}


def test_the_embedder_identity_is_part_of_the_index():
    """An endpoint's input types change every vector but not the model name or revision."""
    plain = {**PROVENANCE, "embedder_identity": "openai:e5"}
    sided = {**PROVENANCE, "embedder_identity": "openai:e5+input_type:passage/query"}
    assert configuration_fingerprint(plain, "hybrid") != configuration_fingerprint(sided, "hybrid")


def test_the_scoring_protocol_holds_the_scoring_code():
    assert scoring_protocol("v1").startswith("v1+") and scoring_protocol("v1") != scoring_protocol("v2")


def test_code_identity_is_the_syntax_not_the_formatting(tmp_path, monkeypatch):
    """A reformatted or re-documented file keeps the engine's and the scoring protocol's
    identity (a lint pass must not make every run not_compared); a changed statement does not."""
    from eval_pipeline.common import versions

    def digest(text):
        (tmp_path / "m.py").write_text(text)
        monkeypatch.setattr("eval_pipeline.common.state.PROJECT_ROOT", tmp_path)
        versions._SOURCES.clear()
        try:
            return versions.source_digest("m.py")
        finally:
            versions._SOURCES.clear()

    base = digest('def f(x):\n    """Twice."""\n    return x * 2\n')
    assert digest('def f(x):  # doubled\n    """Two times x, re-documented."""\n    return (x *\n            2)\n') == base
    assert digest('def f(x):\n    """Twice."""\n    return x * 3\n') != base


def test_a_question_set_split_for_tuning_the_file_no_longer_asks_for_is_refused():
    """The question set materialized under a variants file with `tune` is split; reported under a
    file without it (or with another split), every variant would be scored on a stale subset."""
    from types import SimpleNamespace

    from eval_pipeline.verdict.run import check_split_current
    from eval_pipeline.ranking.inputs import InconsistentInputs

    split = SimpleNamespace(split={"fraction": 0.3, "seed": 0, "n_tuning": 3, "n_held_out": 7})
    unsplit = SimpleNamespace(split=None)
    check_split_current(split, (0.3, 0))
    check_split_current(unsplit, None)
    with pytest.raises(InconsistentInputs, match="no fusion tuning"):
        check_split_current(split, None)
    with pytest.raises(InconsistentInputs, match="seed 1"):
        check_split_current(split, (0.3, 1))
    with pytest.raises(InconsistentInputs, match="not split"):
        check_split_current(unsplit, (0.3, 0))
