"""The answer intervals are stored in the state dir's statistics cache under their exact inputs
(each interval's per-prompt values in order, the resamples, seed and confidence, and the code
that computes them), so a warm run reads them instead of importing scipy and resampling; an
input or code change, or an entry that is damaged, foreign or holds impossible numbers, is
computed afresh, never trusted."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eval_pipeline.grading import answer_metrics as am
from tests.unit.grading.test_answer_metrics import answer, frames, grade

PIDS = [f"p{i}" for i in range(8)]


def inputs(flip: int | None = None):
    """Eight answers graded by two graders, passes and scores spread; `flip` turns one pass."""
    a = [answer(p) for p in PIDS]
    g = [grade(p, "decision", passed=(i % 3 == 0) != (i == flip), score=i / 7) for i, p in enumerate(PIDS)]
    g += [grade(p, "static", passed=i % 2 == 0, score=(i % 4) / 3) for i, p in enumerate(PIDS)]
    return frames(a, g)


def entries(folder):
    return sorted(folder.glob("answer_intervals_*.pkl"))


def same(x, y) -> bool:
    return json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)  # NaN equal to NaN


@pytest.fixture
def counted(monkeypatch):
    """How many intervals were resampled (bootstrap_ci calls)."""
    from eval_pipeline.metrics import statistics  # not at the top: the subprocess below must not import scipy

    calls = []
    real = statistics.bootstrap_ci
    monkeypatch.setattr(statistics, "bootstrap_ci", lambda values, **kw: calls.append(1) or real(values, **kw))
    return calls


def test_a_cached_run_gives_what_a_fresh_one_does_without_resampling(tmp_path, counted):
    fresh = am.answer_metrics(*inputs(), n_resamples=300, seed=4)
    resampled = len(counted)
    assert resampled == 4  # two graders, pass rate and mean score each
    first = am.answer_metrics(*inputs(), n_resamples=300, seed=4, interval_cache=tmp_path)
    assert len(counted) == 2 * resampled and len(entries(tmp_path)) == 1
    again = am.answer_metrics(*inputs(), n_resamples=300, seed=4, interval_cache=tmp_path)
    assert len(counted) == 2 * resampled  # read, not resampled
    assert same(fresh, first) and same(fresh, again)


@pytest.mark.parametrize("change", [{"flip": 5}, {"seed": 5}, {"n_resamples": 301}, {"confidence": 0.9}])
def test_a_changed_input_is_computed_again(tmp_path, counted, change):
    flip = change.pop("flip", None)
    boot = {"n_resamples": 300, "seed": 4, **change}
    am.answer_metrics(*inputs(), n_resamples=300, seed=4, interval_cache=tmp_path)
    before = len(counted)
    changed = am.answer_metrics(*inputs(flip), **boot, interval_cache=tmp_path)
    assert len(counted) == before + 4
    assert same(changed, am.answer_metrics(*inputs(flip), **boot))
    assert len(entries(tmp_path)) == 2


def test_a_changed_code_identity_is_computed_again(tmp_path, counted, monkeypatch):
    am.answer_metrics(*inputs(), n_resamples=300, interval_cache=tmp_path)
    before = len(counted)
    monkeypatch.setattr(am, "interval_code_identity", lambda: "another statistics module")
    am.answer_metrics(*inputs(), n_resamples=300, interval_cache=tmp_path)
    assert len(counted) == before + 4


@pytest.mark.parametrize("damage", ["truncated", "foreign key", "not a pickle", "wrong shape", "impossible numbers"])
def test_a_damaged_or_foreign_entry_is_computed_again_and_replaced(tmp_path, counted, damage):
    fresh = am.answer_metrics(*inputs(), n_resamples=300)
    am.answer_metrics(*inputs(), n_resamples=300, interval_cache=tmp_path)
    (entry,) = entries(tmp_path)
    key, intervals = pickle.loads(entry.read_bytes())
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:-7])
    elif damage == "foreign key":
        entry.write_bytes(pickle.dumps(("another key", intervals)))
    elif damage == "not a pickle":
        entry.write_text("{}")
    elif damage == "wrong shape":
        entry.write_bytes(pickle.dumps((key, intervals[:-1])))
    else:  # the right key, numbers no bootstrap of these values can give
        entry.write_bytes(pickle.dumps((key, [[-1.0, 2.0]] * len(intervals))))
    before = len(counted)
    again = am.answer_metrics(*inputs(), n_resamples=300, interval_cache=tmp_path)
    assert len(counted) == before + 4
    assert same(again, fresh)
    assert pickle.loads(entry.read_bytes()) == (key, intervals)  # the entry was written again


def test_an_unwritable_cache_costs_the_cache_not_the_metrics(tmp_path, counted):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    fresh = am.answer_metrics(*inputs(), n_resamples=300)
    assert same(am.answer_metrics(*inputs(), n_resamples=300, interval_cache=blocked), fresh)


def test_no_cache_by_default_and_nothing_to_resample_writes_nothing(tmp_path, counted):
    a, g = inputs()
    none_scored = g.assign(status="not_applicable", passed=None, score=None)
    am.answer_metrics(a, none_scored, interval_cache=tmp_path)
    assert counted == [] and entries(tmp_path) == []


def test_a_cached_run_never_imports_scipy(tmp_path):
    """The point of the cache: a warm run's answer_metrics step does not pay scipy's import."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path

        from eval_pipeline.grading.answer_metrics import answer_metrics
        from tests.unit.grading.test_answer_interval_cache import inputs
        answer_metrics(*inputs(), n_resamples=300, interval_cache=Path({str(tmp_path)!r}))
        print("scipy" in sys.modules)
    """)
    def scipy_imported() -> list[str]:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[3]).stdout.split()

    assert scipy_imported() == ["True"]  # computed
    assert scipy_imported() == ["False"]  # read


def test_answer_metric_frames_keeps_its_intervals_only_where_it_is_told(tmp_path, monkeypatch):
    """answer_metric_frames passes the folder it is given (the answer_metrics asset gives its
    state dir's statistics cache) to every interval; without one, none, even where
    EVAL_PIPELINE_STATE_DIR names a state dir (a library call writes nothing)."""
    from eval_pipeline.answering.prompts import CheckedGoldenSet
    from eval_pipeline.common.state import STATE_DIR_ENV
    from eval_pipeline.grading import summary
    from eval_pipeline.questions.golden import GoldenPrompt, GoldenPromptSet

    golden = CheckedGoldenSet(GoldenPromptSet("t", (GoldenPrompt("p0", "What?"),), "memory"), "corpus-1", "test")
    a, g = inputs()
    asked = []

    class Stop(Exception):
        pass

    def spy(*args, **kwargs):
        asked.append(kwargs.get("interval_cache"))
        raise Stop

    monkeypatch.setattr(summary, "answer_metrics", spy)
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    with pytest.raises(Stop):
        summary.answer_metric_frames({"v": a}, {"v": g}, golden)
    with pytest.raises(Stop):
        summary.answer_metric_frames({"v": a}, {"v": g}, golden, interval_cache=tmp_path / "asked")
    assert asked == [None, tmp_path / "asked"]
