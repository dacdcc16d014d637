"""Abstention policies (issue #26): the `abstain:` setting, the confidence, the refusal in the
sweep, and `auto` choosing its threshold on the tuning questions only."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking import steps
from eval_pipeline.ranking import sweep as sweep_mod
from eval_pipeline.ranking.abstention import AbstainSpec, confidence, refuses
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc
from eval_pipeline.ranking.inputs import ConfigurationRefused
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.ranking.variants import VariantConfigError
from eval_pipeline.scoring.variant import score_variant, summarize


def _variant(**item):
    return parse_sweep({"variants": [item]}).variants[0]


def test_the_default_score_is_the_dense_cosine_when_there_is_a_dense_leg():
    assert _variant(engine="hybrid", abstain={"policy": "auto"}).abstain == AbstainSpec(
        policy="auto", score="dense_cosine")
    assert _variant(engine="bm25", abstain={"policy": "auto"}).abstain.score == "top_score"
    assert _variant(engine="pg-dense").abstain == AbstainSpec(policy="none", score="dense_cosine")
    legacy = _variant(engine="bm25", abstain_below=2.5)
    assert legacy.abstain == AbstainSpec(policy="threshold", score="top_score", below=2.5)
    assert legacy.describe()["abstain_below"] == 2.5 and "abstain" not in legacy.describe()  # identity kept


@pytest.mark.parametrize("item, message", [
    ({"engine": "hybrid", "abstain": {"policy": "sometimes"}}, "abstain.policy 'sometimes' is not valid; valid: none, "
                                                               "threshold, auto"),
    ({"engine": "hybrid", "abstain": {"policy": "auto", "below": 0.3}}, "abstain with policy auto has no setting(s) "
                                                                        "['below']"),
    ({"engine": "hybrid", "abstain": {"policy": "threshold"}}, "abstain with policy threshold needs below"),
    ({"engine": "hybrid", "abstain": {"policy": "threshold", "below": "low"}}, "abstain.below must be a finite number, "
                                                                               "got 'low'"),
    ({"engine": "hybrid", "abstain": {"policy": "auto", "max_false_refusal": 1.5}},
     "abstain.max_false_refusal must be a number in [0, 1], got 1.5"),
    ({"engine": "hybrid", "abstain": {"policy": "auto", "objective": "recall"}},
     "abstain.objective 'recall' is not valid; valid: max_false_refusal, f1"),
    ({"engine": "hybrid", "abstain": {"policy": "auto", "objective": "f1", "max_false_refusal": 0.1}},
     "abstain.max_false_refusal applies to objective max_false_refusal"),
    ({"engine": "bm25", "abstain": {"policy": "auto", "score": "dense_cosine"}},
     "abstain.score dense_cosine needs a dense leg"),
    ({"engine": "hybrid", "abstain": {"policy": "auto", "score": "fused"}}, "abstain.score 'fused' is not valid"),
    ({"engine": "bm25", "abstain": {"policy": "auto"}, "abstain_below": 1.0}, "give abstain_below or abstain"),
    ({"engine": "hybrid", "abstain": [1]}, "abstain must be a mapping"),
])
def test_a_bad_abstain_setting_is_an_early_error_naming_it(item, message):
    with pytest.raises(VariantConfigError) as info:
        parse_sweep({"variants": [item]}, source="v.yaml")
    assert str(info.value).startswith("v.yaml: variant 1: ") and message in str(info.value), str(info.value)


def test_the_confidences_and_the_refusal_rule():
    final = [RankedDoc("a", 0.9), RankedDoc("b", 0.6)]
    assert confidence("top_score", final, None) == 0.9
    assert confidence("margin", final, None) == pytest.approx(0.3)
    assert confidence("margin", final[:1], None) == 0.9
    assert confidence("dense_cosine", final, [ChunkHit("x:0", "x", 0.4), ChunkHit("y:0", "y", 0.7)]) == 0.7
    assert math.isnan(confidence("top_score", [], None))
    spec = AbstainSpec(policy="threshold", below=0.5)
    assert refuses(spec, 0.49) and not refuses(spec, 0.5) and refuses(spec, math.nan)  # equal is answered


# --- the sweep ----------------------------------------------------------------------------------

SNAPSHOT = CorpusSnapshot(documents=tuple(Document(d, d, "", f"{d}.md", f"{d} text") for d in ("G", "a", "b")),
                          source="test")
# each question's dense cosine is in its text: "q 0.8" -> the dense leg's top hit scores 0.8
QUESTIONS = [Question("s1", "0.9", ("G",)), Question("s2", "0.3", ("G",)), Question("s3", "0.2", ())]
TUNING = [Question("t1", "0.8", ("G",)), Question("t2", "0.7", ("G",)), Question("t3", "0.5", ()),
          Question("t4", "0.4", ())]


def _leg_hits(name, top_k, q, settings=None):
    cos = float(q.question)
    hits = {"keyword": [ChunkHit("a:0", "a", 1.0)], "dense": [ChunkHit("G:0", "G", cos), ChunkHit("b:0", "b", 0.1)]}
    return sweep_mod._Timed(hits[name], 0.0, None)


def _sweep(monkeypatch, **kw) -> Sweep:
    s = Sweep(snapshot=SNAPSHOT, connection_string="postgresql://u@h/db", table="t", query_embeddings={},
              embed_ms_per_query=0.0, **kw)
    monkeypatch.setattr(s, "leg_hits", _leg_hits)
    return s


def test_a_threshold_refuses_below_it_and_keeps_what_it_would_have_returned(monkeypatch):
    v = _variant(engine="hybrid", abstain={"policy": "threshold", "below": 0.5})
    frame = _sweep(monkeypatch).run([v], QUESTIONS)[v.key].set_index("qid")
    assert list(frame["confidence"]) == [0.9, 0.3, 0.2]  # the dense cosine, not the fused RRF score
    assert list(frame["abstained"]) == [False, True, True]
    assert frame.loc["s2", "doc_ids"] == [] and "G" in frame.loc["s2", "unrefused_doc_ids"]
    assert frame.loc["s1", "unrefused_doc_ids"] is None  # answered: its list is doc_ids
    assert frame.loc["s2", "triage"] == "dropped_by_threshold"
    scored = score_variant(frame.reset_index(), QUESTIONS)
    row = summarize({v.key: scored}).iloc[0]
    assert row["correct_refusal_rate"] == 1.0 and row["false_refusal_rate"] == 0.5  # s3 refused rightly, s2 not
    assert row["hit@10"] == 0.5 and row["hit@10 without refusal"] == 1.0  # with and without the policy


def test_auto_chooses_its_threshold_on_the_tuning_questions_only(monkeypatch):
    v = _variant(engine="hybrid", abstain={"policy": "auto"})
    read: list[str] = []

    def recording(name, top_k, q, settings=None):
        read.append(q.qid)
        return _leg_hits(name, top_k, q, settings)

    def make_sweep(**kw):
        s = Sweep(**kw)
        monkeypatch.setattr(s, "leg_hits", recording)
        return s

    class Cache:
        def __init__(self, path):
            pass

        def get_or_compute(self, embedder, questions):
            return {}, 0.0, False

    monkeypatch.setattr(steps, "Sweep", make_sweep)
    monkeypatch.setattr(steps, "QueryEmbeddingCache", Cache)
    qs = SimpleNamespace(questions=tuple(QUESTIONS), tuning=tuple(TUNING))
    out = steps.tune_abstention([v], qs, snapshot=SNAPSHOT, connection_string="postgresql://u@h/db", table="t",
                                embedder=None, state=SimpleNamespace(query_embeddings=None), miss_k=10,
                                code_version="x", rerankers={})
    chosen, provenance = out[v.key]
    assert set(read) == {"t1", "t2", "t3", "t4"}  # never a scored question
    # tuning: answerable 0.8, 0.7; abstention 0.5, 0.4; at most 5% of the answerable refused: 0.7 refuses both
    assert chosen.abstain.below == 0.7 and provenance["correct_refusals"] == 2 and provenance["false_refusals"] == 0
    assert provenance["score"] == "dense_cosine" and provenance["threshold"] == 0.7
    assert chosen.describe() == v.describe()  # the identity is the policy; the choice is provenance


def test_auto_refuses_a_tuning_part_without_abstention_questions(monkeypatch):
    v = _variant(engine="hybrid", abstain={"policy": "auto"})
    monkeypatch.setattr(steps, "QueryEmbeddingCache", lambda path: SimpleNamespace(
        get_or_compute=lambda e, q: ({}, 0.0, False)))
    monkeypatch.setattr(steps, "Sweep", lambda **kw: _sweep(monkeypatch, **{k: v for k, v in kw.items()
                                                                             if k in ("rerankers", "miss_k")}))
    qs = SimpleNamespace(questions=tuple(QUESTIONS), tuning=tuple(TUNING[:2]))
    # ConfigurationRefused: a reference configuration refused so is not comparable by design (verdict.paired)
    with pytest.raises(ConfigurationRefused, match=r"variant\(s\) 'hybrid' choose their refusal threshold .* tuning part, which "
                                         r"holds 2 answerable and 0 abstention question\(s\)"):
        steps.tune_abstention([v], qs, snapshot=SNAPSHOT, connection_string="c", table="t", embedder=None,
                              state=SimpleNamespace(query_embeddings=None), miss_k=10, code_version="x", rerankers={})
    with pytest.raises(ConfigurationRefused, match="and the set was not split"):
        steps.tune_abstention([v], SimpleNamespace(questions=(), tuning=()), snapshot=SNAPSHOT, connection_string="c",
                              table="t", embedder=None, state=None, miss_k=10, code_version="x", rerankers={})


def test_results_of_an_auto_variant_depend_on_the_tuning_part():
    v = _variant(engine="hybrid", abstain={"policy": "auto"})
    qs = SimpleNamespace(fingerprint="F", tuning_fingerprint="T")
    assert steps.results_questions(qs, v) == "F+tuning:T"
    assert steps.results_questions(qs, _variant(engine="hybrid")) == "F"


def test_the_provenance_of_a_chosen_threshold_is_recorded_with_the_results():
    v = _variant(engine="hybrid", abstain={"policy": "auto", "objective": "f1"})
    assert json.loads(json.dumps(v.describe()))["abstain"] == {"policy": "auto", "score": "dense_cosine",
                                                                "objective": "f1"}


def test_the_question_set_refuses_a_tuning_part_an_auto_variant_cannot_use_before_ranking():
    """The check the question_set asset runs (steps.check_thresholds_can_be_chosen): an auto
    variant needs abstention and answerable questions in the tuning part; other variants need
    nothing; the message names the variants file, the variants, the counts and the fixes."""
    auto, plain = _variant(engine="hybrid", abstain={"policy": "auto"}), _variant(engine="bm25")
    no_abstention = SimpleNamespace(path="q.jsonl", tuning=tuple(TUNING[:2]))
    steps.check_thresholds_can_be_chosen([plain], no_abstention, source="v.yaml")  # nothing to choose
    with pytest.raises(ValueError, match=r"^v\.yaml: variant\(s\) 'hybrid' .* holds 2 answerable and 0 abstention "
                                         r"question\(s\) \(q\.jsonl\): without abstention questions .*\(abstain: "
                                         r"\{policy: threshold, below: X\}"):
        steps.check_thresholds_can_be_chosen([plain, auto], no_abstention, source="v.yaml")
    only_abstention = SimpleNamespace(path="q.jsonl", tuning=tuple(q for q in TUNING if not q.answerable))
    with pytest.raises(ValueError, match="without answerable questions"):
        steps.check_thresholds_can_be_chosen([auto], only_abstention, source="v.yaml")
    steps.check_thresholds_can_be_chosen([auto], SimpleNamespace(path="q.jsonl", tuning=tuple(TUNING)))
