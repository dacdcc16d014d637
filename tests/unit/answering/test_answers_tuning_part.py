"""The answers asset ranks the golden prompts with the question set's tuning part whenever a
variant chooses something on it: its fusion (`tune:`) or its refusal threshold (`abstain: {policy:
auto}`). Without it, an auto variant's threshold has nothing to be chosen on (issue #26)."""

from types import SimpleNamespace

import pytest

from eval_pipeline.answering import run as answering
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.questions.sets import Question, QuestionSet
from eval_pipeline.ranking import steps
from eval_pipeline.ranking.fusion_tuning import split_question_set


class Ranked(Exception):
    """Stops produce_answers where it ranks: the question set it would rank is what is tested."""

    def __init__(self, question_set):
        super().__init__("ranked")
        self.question_set = question_set


def _ranked_prompts(monkeypatch, variant: dict) -> QuestionSet:
    questions = tuple(Question(qid=f"q{i:03d}", question=f"question {i}", gold=(f"d{i % 7}",) if i % 5 else ())
                      for i in range(40))
    split = split_question_set(QuestionSet(questions=questions, header={}, path="qs.jsonl"), fraction=0.3, seed=0)
    prompt = Question(qid="p1", question="a prompt nobody tuned on", gold=("d1",))
    golden = SimpleNamespace(golden=object(), as_question_set=lambda: QuestionSet(questions=(prompt,), header={},
                                                                                   path="golden:g"))

    def rank(variants, *, question_set, **kwargs):
        raise Ranked(question_set)

    monkeypatch.setattr(steps, "rank_in_one_step", rank)
    variants = parse_sweep({"variants": [variant]}).variants
    with pytest.raises(Ranked) as ranked:
        answering.produce_answers(variants, golden, snapshot=None, store=None, state=None, connection_string="",
                                  embedder=None, build_reranker=None, generator=None, k=5, keep_text=False,
                                  code_version="test", log=lambda m: None, tuning_from=split)
    return ranked.value.question_set


@pytest.mark.parametrize("variant", [{"engine": "pg-dense", "abstain": {"policy": "auto"}},
                                     {"engine": "hybrid", "tune": "rrf_k"}])
def test_prompts_carry_the_tuning_part_when_a_variant_chooses_on_it(monkeypatch, variant):
    prompts = _ranked_prompts(monkeypatch, variant)
    assert prompts.tuning and [q.qid for q in prompts.questions] == ["p1"]


@pytest.mark.parametrize("variant", [{"engine": "pg-dense"},
                                     {"engine": "pg-dense", "abstain": {"policy": "threshold", "below": 0.3}}])
def test_prompts_have_no_tuning_part_when_nothing_is_chosen_on_it(monkeypatch, variant):
    assert not _ranked_prompts(monkeypatch, variant).tuning


def test_the_golden_prompts_ranking_says_what_it_plans(monkeypatch):
    """The answers step ranks the golden prompts through the ranking plan, whose line ends
    "(N reused unchanged)": in the answers step's log that read as the answers reused, on a run
    whose answers were all generated again. The line says it is the golden prompts' ranking."""
    logged: list[str] = []

    def rank(variants, *, log, **kwargs):
        log("1 variant(s) in 1 step(s): pg-dense (1 reused unchanged)")
        raise Ranked(None)

    monkeypatch.setattr(steps, "rank_in_one_step", rank)
    golden = SimpleNamespace(golden=object(), as_question_set=lambda: QuestionSet(questions=(), header={}, path="g"))
    with pytest.raises(Ranked):
        answering.produce_answers(parse_sweep({"variants": ["pg-dense"]}).variants, golden, snapshot=None, store=None,
                                  state=None, connection_string="", embedder=None, build_reranker=None, generator=None,
                                  k=5, keep_text=False, code_version="test", log=logged.append, tuning_from=None)
    assert logged == ["ranking the golden prompts: 1 variant(s) in 1 step(s): pg-dense (1 reused unchanged)"]
