"""`question_set.compare_with` (issue #30): a second question set on the same corpus, checked
before anything is embedded (each error names the setting), built and cached like the first
(an ICT set needs no model), recorded in the first set's header and reloaded from there by the
report; and ranked per index with every partition's frames keyed as the run's own."""

from types import SimpleNamespace

import pandas as pd
import pytest

from assets import ComparedSetConfig, QuestionSetConfig
from eval_pipeline.common.state import StateDir
from eval_pipeline.questions.build import (
    COMPARED_SETS,
    build_compared_set,
    build_question_set,
    load_compared_sets,
    preflight_compared_set,
    record_compared_set,
)
from eval_pipeline.questions.sets import write_question_set
from eval_pipeline.reporting import set_validity
from tests.integration.cli import FIXTURES


def _no_llm():
    raise AssertionError("no model is called")


def test_defaults():
    assert QuestionSetConfig().generator == "llm" and QuestionSetConfig().compare_with is None
    other = QuestionSetConfig(compare_with={}).compare_with
    assert (other.name, other.source, other.generator, other.seed) == ("ict", "generate", "ict", 0)


@pytest.mark.parametrize("compare_with, message", [
    ({"name": "has space"}, "question_set.compare_with.name 'has space' is not valid"),
    ({"source": "file"}, "question_set.compare_with.path must name the JSONL set"),
    ({"source": "file", "path": "/nonexistent/q.jsonl"}, "question_set.compare_with: "),
    ({"source": "file", "path": str(FIXTURES / "tiny_questions.jsonl")}, "names the run's own question set"),
])
def test_bad_settings_fail_naming_the_setting(tiny_snapshot, compare_with, message):
    settings = QuestionSetConfig(path=str(FIXTURES / "tiny_questions.jsonl"), compare_with=compare_with)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        preflight_compared_set(settings, tiny_snapshot)


def test_an_ict_set_is_built_cached_recorded_and_reloaded(tiny_snapshot, tmp_path):
    state = StateDir(tmp_path / "state")
    settings = QuestionSetConfig(path=str(FIXTURES / "tiny_questions.jsonl"),
                                 compare_with=ComparedSetConfig(name="ict", k=2, seed=1))
    first, _ = build_question_set(settings, tiny_snapshot, llm_client=_no_llm, state=state, warn=lambda m: None)
    other, metadata = build_compared_set(settings, tiny_snapshot, llm_client=_no_llm, state=state,
                                         warn=lambda m: None)
    assert other.header["generator"] == "ict" and other.questions
    assert str(other.path).endswith(f"compared_questions_ict_{tiny_snapshot.signature}.jsonl")
    assert metadata["generation_units_generated"] > 0
    again, metadata = build_compared_set(settings, tiny_snapshot, llm_client=_no_llm, state=state,
                                         warn=lambda m: None)
    assert metadata["generation_units_generated"] == 0 and metadata["generation_units_cached"] > 0
    assert again.fingerprint == other.fingerprint

    recorded = record_compared_set(first, "ict", other)
    assert recorded.fingerprint == first.fingerprint  # the header is no part of the set's identity
    assert [r["name"] for r in recorded.header[COMPARED_SETS]] == ["ict"]
    [(name, loaded)] = load_compared_sets(recorded, tiny_snapshot)
    assert name == "ict" and loaded.fingerprint == other.fingerprint
    assert load_compared_sets(first, tiny_snapshot) == []

    write_question_set(other.path, other.questions[:1], corpus_signature=tiny_snapshot.signature)
    with pytest.raises(ValueError, match="changed since the question set was built"):
        load_compared_sets(recorded, tiny_snapshot)


def test_ranked_per_index_and_keyed_by_partition(monkeypatch):
    calls = []

    def rank(name, question_set, variants, *, store, embedder, build_reranker, **common):
        calls.append((store, [v.key for v in variants], common["tuning_from"]))
        return set_validity.ComparedSet(name, question_set, {v.key: pd.DataFrame({"store": [store]})
                                                              for v in variants})

    monkeypatch.setattr(set_validity, "rank_compared_set", rank)
    a, b = SimpleNamespace(key="dense"), SimpleNamespace(key="bm25")
    pairs = [("small|dense", "small", a), ("small|bm25", "small", b), ("large|dense", "large", a)]
    [compared] = set_validity.rank_compared_sets(
        [("ict", "the set")], pairs, stores={"small": "S", "large": "L"}, embedder_for=lambda i: i,
        builder_for=lambda i: i, tuning_from="run set")
    assert list(compared.per_variant) == ["small|dense", "small|bm25", "large|dense"]
    assert compared.per_variant["large|dense"]["store"].iloc[0] == "L"
    assert calls == [("S", ["dense", "bm25"], "run set"), ("L", ["dense"], "run set")]


def test_a_compared_set_s_scores_are_read_back_when_its_rankings_did_not_change(tmp_path, monkeypatch):
    """The second set's per-question scores are kept as the run's own partitions' are
    (`scoring.partitions.score_partitions`, under the state dir's scored_partitions): a warm
    run reads them instead of scoring every variant again."""
    from eval_pipeline.scoring import partitions

    questions = [SimpleNamespace(qid=q, to_json=lambda q=q: {"qid": q}) for q in ("q1", "q2")]
    question_set = SimpleNamespace(questions=questions, tuning=None)
    ranked = {"dense": pd.DataFrame({"qid": ["q1", "q2"], "rank": [1, 2]}),
              "bm25": pd.DataFrame({"qid": ["q1", "q2"], "rank": [2, 1]})}
    monkeypatch.setattr(set_validity.steps, "rank_in_one_step", lambda variants, **_: dict(ranked))
    scored: list[int] = []

    def score(frame, qs):
        scored.append(len(frame))
        return frame.assign(score=frame["rank"] * 1.0)

    monkeypatch.setattr(partitions, "score_variant", score)
    common = dict(snapshot=None, store=None, state=StateDir(tmp_path / "state"), connection_string="", embedder=None,
                  build_reranker=None, code_version="v", log=print)
    variants = [SimpleNamespace(key="dense"), SimpleNamespace(key="bm25")]
    first = set_validity.rank_compared_set("ict", question_set, variants, **common)
    again = set_validity.rank_compared_set("ict", question_set, variants, **common)
    assert len(scored) == 2, scored  # each variant scored once, in the first run
    for key in ranked:
        pd.testing.assert_frame_equal(first.per_variant[key], again.per_variant[key])
