"""The code-graded yardsticks cover what decides a pass and nothing that only shows it."""

from __future__ import annotations

from eval_pipeline.common import versions
from eval_pipeline.grading import run


def _hashed_files(monkeypatch) -> set[str]:
    seen: list[tuple[str, ...]] = []
    real = versions.source_digest

    def spy(*paths: str) -> str:
        seen.append(paths)
        return real(*paths)

    monkeypatch.setattr(versions, "source_digest", spy)
    run.grading_code()
    return {p for paths in seen for p in paths}


def test_how_grades_are_summed_up_and_shown_is_not_in_the_yardstick(monkeypatch):
    files = _hashed_files(monkeypatch)
    assert "eval_pipeline/grading/run.py" in files
    assert "eval_pipeline/grading/summary.py" not in files


def test_the_summary_helpers_live_outside_the_hashed_module():
    from eval_pipeline.grading import summary

    for name in ("answer_metric_frames", "grades_metadata", "grading_lines", "hallucinations_of", "grading_usage",
                 "calibrated_rate", "METRIC_COLUMNS", "GRADING_LINE_FIELDS"):
        assert hasattr(summary, name)
        assert not hasattr(run, name), f"{name} is in grading/run.py, whose every edit changes the yardsticks"


def test_the_regex_package_code_is_in_the_yardstick(monkeypatch):
    before = run.grading_code()
    real = versions.package_code_digest
    monkeypatch.setattr(versions, "package_code_digest",
                        lambda names: "patched" if list(names) == ["regex"] else real(names))
    assert run.grading_code() != before
