"""A partition's per-question scores and its numbers are kept in the state dir by their exact
inputs (the ranked frame, the questions with their labels, the partition key, the code), so the
variant_metrics step of a run whose rankings did not change reads them instead of scoring again
(and never imports scipy for the interval); a changed input or code, or a damaged or foreign
entry, is computed afresh, never trusted."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking.results import RESULT_COLUMNS, STAGE_COLUMNS
from eval_pipeline.scoring import partitions as sp

QUESTIONS = [Question("q1", "a?", ("d1",)), Question("q2", "b?", ("d2",)), Question("q3", "c?", ()),
             Question("q4", "d?", ("d4",))]


def ranked(variant: str = "v", first_of_q2: str = "d3") -> pd.DataFrame:
    rows = []
    for qid, docs, ms in (("q1", ["d1", "d3"], 10.5), ("q2", [first_of_q2, "d2"], 21.0), ("q3", [], 5.0),
                          ("q4", ["d9", "d8", "d4"], 7.25)):
        row = dict.fromkeys(RESULT_COLUMNS)
        row.update(variant=variant, qid=qid, doc_ids=docs, chunk_ids=[d + ":0" for d in docs],
                   scores=[0.9, 0.8, 0.7][:len(docs)], latency_ms=ms, abstained=False,
                   **{c: ms / 2 for c in STAGE_COLUMNS})
        rows.append(row)
    return pd.DataFrame(rows)


def frames(**kw) -> dict[str, pd.DataFrame]:
    return {"v": ranked("v", **kw), "w": ranked("w")}


@pytest.fixture
def scored_count(monkeypatch):
    calls = []
    real = sp.score_variant
    monkeypatch.setattr(sp, "score_variant", lambda results, questions: calls.append(1) or real(results, questions))
    return calls


def entries(folder: Path, kind: str) -> list[Path]:
    return sorted(folder.glob(f"{kind}_*.pkl"))


def same_numbers(a: dict, b: dict) -> bool:
    a, b = dict(a), dict(b)
    ta, tb = a.pop("table"), b.pop("table")
    return pickle.dumps(a) == pickle.dumps(b) and ta == tb


def test_cached_scores_are_the_fresh_scores_without_scoring_again(tmp_path, scored_count):
    fresh = sp.score_partitions(frames(), ["v", "w"], QUESTIONS, cache=None)
    assert len(scored_count) == 2
    first = sp.score_partitions(frames(), ["v", "w"], QUESTIONS, cache=tmp_path)
    again = sp.score_partitions(frames(), ["v", "w"], QUESTIONS, cache=tmp_path)
    assert len(scored_count) == 4 and len(entries(tmp_path, "scored")) == 2
    for key in ("v", "w"):
        pd.testing.assert_frame_equal(first[key], fresh[key])
        pd.testing.assert_frame_equal(again[key], fresh[key])


@pytest.mark.parametrize("change", ["ranking", "label", "question order", "code"])
def test_a_changed_input_is_scored_again(tmp_path, scored_count, monkeypatch, change):
    sp.score_partitions(frames(), ["v"], QUESTIONS, cache=tmp_path)
    ranked_in, questions = frames(), list(QUESTIONS)
    if change == "ranking":
        ranked_in = frames(first_of_q2="d2")
    elif change == "label":
        questions[1] = Question("q2", "b?", ("d3",))
    elif change == "question order":
        questions = questions[::-1]
    else:
        monkeypatch.setattr(sp, "scoring_code_identity", lambda: "another scoring code")
    got = sp.score_partitions(ranked_in, ["v"], questions, cache=tmp_path)
    assert len(scored_count) == 2
    pd.testing.assert_frame_equal(got["v"], sp.score_partitions(ranked_in, ["v"], questions, cache=None)["v"])


@pytest.mark.parametrize("damage", ["truncated", "foreign key", "not a frame", "other questions"])
def test_a_damaged_or_foreign_scores_entry_is_scored_again_and_replaced(tmp_path, scored_count, damage):
    fresh = sp.score_partitions(frames(), ["v"], QUESTIONS, cache=None)["v"]
    sp.score_partitions(frames(), ["v"], QUESTIONS, cache=tmp_path)
    (entry,) = entries(tmp_path, "scored")
    key, frame = pickle.loads(entry.read_bytes())
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:-9])
    elif damage == "foreign key":
        entry.write_bytes(pickle.dumps(("another key", frame)))
    elif damage == "not a frame":
        entry.write_bytes(pickle.dumps((key, {"qid": ["q1"]})))
    else:
        entry.write_bytes(pickle.dumps((key, frame[frame["qid"] != "q4"])))
    before = len(scored_count)
    got = sp.score_partitions(frames(), ["v"], QUESTIONS, cache=tmp_path)["v"]
    assert len(scored_count) == before + 1
    pd.testing.assert_frame_equal(got, fresh)
    stored_key, stored = pickle.loads(entry.read_bytes())
    assert stored_key == key
    pd.testing.assert_frame_equal(stored, fresh)


def test_a_partition_without_ranked_results_is_still_refused(tmp_path):
    with pytest.raises(ValueError, match="no partition for variant"):
        sp.score_partitions(frames(), ["v", "x"], QUESTIONS, cache=tmp_path)


def test_cached_numbers_are_the_fresh_numbers(tmp_path, monkeypatch):
    scored = sp.score_partitions(frames(), ["v"], QUESTIONS, cache=None)["v"]
    fresh = sp.partition_metrics("v", scored, cache=None)
    first = sp.partition_metrics("v", scored, cache=tmp_path)
    monkeypatch.setattr(sp, "summarize", lambda *a, **k: pytest.fail("computed again"))
    again = sp.partition_metrics("v", scored, cache=tmp_path)
    assert same_numbers(first, fresh) and same_numbers(again, fresh)
    assert len(entries(tmp_path, "numbers")) == 1


@pytest.mark.parametrize("change", ["key", "scores", "code", "truncated", "foreign key", "not numbers"])
def test_changed_or_damaged_numbers_are_computed_again(tmp_path, monkeypatch, change):
    scored = sp.score_partitions(frames(), ["v"], QUESTIONS, cache=None)["v"]
    sp.partition_metrics("v", scored, cache=tmp_path)
    key = "v"
    (entry,) = entries(tmp_path, "numbers")
    stored_key, numbers = pickle.loads(entry.read_bytes())
    if change == "key":
        key = "v2"
    elif change == "scores":
        scored = sp.score_partitions(frames(first_of_q2="d2"), ["v"], QUESTIONS, cache=None)["v"]
    elif change == "code":
        monkeypatch.setattr(sp, "scoring_code_identity", lambda: "another scoring code")
    elif change == "truncated":
        entry.write_bytes(entry.read_bytes()[:-5])
    elif change == "foreign key":
        entry.write_bytes(pickle.dumps(("another key", numbers)))
    else:
        entry.write_bytes(pickle.dumps((stored_key, {"mrr": 0.5})))
    computed = []
    real = sp.summarize
    monkeypatch.setattr(sp, "summarize", lambda *a, **k: computed.append(1) or real(*a, **k))
    got = sp.partition_metrics(key, scored, cache=tmp_path)
    assert computed == [1]
    assert same_numbers(got, sp.partition_metrics(key, scored, cache=None))


def test_without_a_folder_nothing_is_kept_whatever_the_environment_names(tmp_path, monkeypatch):
    """The cache folder is an argument (the variant_metrics asset passes its state dir's
    `scored_partitions`): a library call without one writes nothing, even where
    EVAL_PIPELINE_STATE_DIR names a state dir, so a StateResource configured elsewhere is the
    one folder the entries go to."""
    from eval_pipeline.common.state import STATE_DIR_ENV, StateDir

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    sp.partition_metrics("v", sp.score_partitions(frames(), ["v"], QUESTIONS)["v"])
    assert not StateDir(tmp_path / "state").scored_partitions.exists()
    assert [p.name for p in tmp_path.iterdir()] == []
    folder = tmp_path / "asked"
    sp.partition_metrics("v", sp.score_partitions(frames(), ["v"], QUESTIONS, cache=folder)["v"], cache=folder)
    assert len(entries(folder, "scored")) == 1 and len(entries(folder, "numbers")) == 1


def test_a_warm_variant_metrics_never_imports_scipy(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path

        from eval_pipeline.scoring.partitions import partition_metrics, score_partitions
        from tests.unit.scoring.test_scored_partition_cache import QUESTIONS, frames
        cache = Path({str(tmp_path)!r})
        for key, frame in score_partitions(frames(), ["v", "w"], QUESTIONS, cache=cache).items():
            partition_metrics(key, frame, cache=cache)
        print("scipy" in sys.modules)
    """)

    def scipy_imported() -> list[str]:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[3]).stdout.split()

    assert scipy_imported() == ["True"]  # scored and measured
    assert scipy_imported() == ["False"]  # read
