"""A variant that chooses its refusal threshold (`abstain: {policy: auto}`) is gated on its false
refusals like any other metric, through the whole job (`dagster job execute`, issue #26).

Two runs of one project (a state dir and history of its own) on the tiny corpus with a question
set written here: 20 answerable questions (paraphrases, each asking about one document) and 10
abstention questions that copy a document's sentence word for word but are labelled as having no
answer. Those are the most confident questions of the set for the dense leg, so:

1. `dense` with `abstain: {policy: auto, max_false_refusal: 0.0}`: the threshold is chosen on the
   tuning part so that no answerable tuning question is refused: a first run, passed.
2. the same variant told to refuse every abstention question whatever it costs
   (`max_false_refusal: 1.0`): its threshold rises above the copied sentences' cosine, it refuses
   answerable questions too, its false-refusal rate rises beyond the tolerance (0.05) and the gate
   fails the run (exit 1), naming false_refusal_rate.
"""

from __future__ import annotations

import pytest
import yaml

from eval_pipeline.questions.sets import Question, QuestionSet, load_question_set, write_question_set
from eval_pipeline.ranking.fusion_tuning import split_question_set
from tests.orchestration import verdict_runs

pytestmark = pytest.mark.integration

ANSWERABLE = {
    "kettle-care": ["how do I get rid of the white crust inside the water boiler",
                    "what removes limescale from the kettle", "how long should vinegar stay in the kettle",
                    "why does scale build up quicker in some offices"],
    "bike-storage": ["what is the code for the basement bicycle cage", "where can I leave my bike at work",
                     "can I park my e-scooter with the bikes", "when does the bike cage code change"],
    "notes-q3": ["where is the hackathon held and what do winners get", "how big can a hackathon team be",
                 "what is the trophy of the quarterly hackathon", "what prize does the winning team receive"],
    "vpn-setup": ["my remote tunnel keeps disconnecting, what setting should I change",
                  "which client do I need for remote access", "where do I get the VPN profile",
                  "what MTU fixes a dropping tunnel"],
    "parental-leave": ["how many weeks off do new mothers and fathers get", "can parental leave be split up",
                       "how early must I tell my manager about parental leave",
                       "until what age of the child can leave be taken"],
}
COPIED = [  # sentences of the documents, labelled as having no answer: the most confident questions
    "Fill the kettle halfway with equal parts white vinegar and water, bring it to the boil and leave it for an hour",
    "Rinse three times before making tea again",
    "Cyclists can lock their bicycles in the basement cage behind door B4",
    "Electric scooters are not allowed in the cage because of the fire risk from lithium batteries",
    "The quarterly hackathon moves to Lisbon this year",
    "Teams of at most four people compete for the Golden Wrench trophy",
    "Install the WireGuard client, import the profile from the self-service portal",
    "If the tunnel drops every few minutes, switch the MTU to 1380 in the advanced settings",
    "Every parent receives twenty weeks of fully paid leave",
    "Tell your manager at least eight weeks before the first block starts",
]


def _question_set(path, tiny_snapshot) -> QuestionSet:
    questions = [Question(qid=f"a{i:02d}", question=text, gold=(doc,), form="GAP")
                 for i, (doc, text) in enumerate((d, t) for d, texts in ANSWERABLE.items() for t in texts)]
    questions += [Question(qid=f"x{i:02d}", question=text, gold=(), form="GAP", hard_class="abstention")
                  for i, text in enumerate(COPIED)]
    write_question_set(path, questions, corpus_signature=tiny_snapshot.signature)
    return load_question_set(path, corpus_signature=tiny_snapshot.signature,
                             doc_ids=[d.doc_id for d in tiny_snapshot.documents])


def test_a_rise_in_false_refusals_of_an_auto_variant_fails_the_gate(tmp_path_factory, job_env, tiny_snapshot):
    root = tmp_path_factory.mktemp("abstention_gate")
    questions = root / "questions.jsonl"
    split = split_question_set(_question_set(questions, tiny_snapshot), fraction=0.3, seed=0)
    assert any(not q.answerable for q in split.tuning) and any(q.answerable for q in split.tuning)
    project = verdict_runs.Project(root, job_env("state"))

    def variants(name: str, max_false_refusal: float):
        path = root / f"{name}.variants.yaml"
        path.write_text(yaml.safe_dump({
            "variants": [{"engine": "pg-dense", "name": "dense",
                          "abstain": {"policy": "auto", "max_false_refusal": max_false_refusal}}],
            "tuning": {"fraction": 0.3, "seed": 0},
            "gate": {"tolerances": {"false_refusal_rate": 0.05}}}, sort_keys=False))
        return path

    first = project.run("careful", variants("careful", 0.0), questions=questions)
    assert first.code == 0, first.log[-3000:]
    assert first.gates == {"dense": ("passed", "first_run")}
    assert "auto: dense_cosine <" in first.report  # the chosen threshold is shown in the abstention table

    second = project.run("refuses", variants("refuses", 1.0), questions=questions)
    assert second.code == 1, second.log[-3000:]
    assert second.gates["dense"][0] == "FAILED"
    gate = project.checks(second.run_id)["gate__dense"]
    assert not gate.passed
    # the delta is signed as the gate's rows are (previous minus actual): a rise is negative here
    deltas = {name: value.value for name, value in gate.metadata.items() if name.endswith("false_refusal_rate delta")}
    assert deltas and all(abs(d) > 0.05 for d in deltas.values()), gate.metadata
    assert "false_refusal_rate 0.0000 ->" in gate.metadata["message"].value
