"""The code-graded yardsticks cover what decides a pass and nothing that only shows it."""

from __future__ import annotations

from eval_pipeline.common import versions
from eval_pipeline.grading import run


def hashed_files(monkeypatch) -> set[str]:
    """The project files `run.grading_code` hashes (a spy on `versions.source_digest`)."""
    seen: list[tuple[str, ...]] = []
    real = versions.source_digest

    def spy(*paths: str) -> str:
        seen.append(paths)
        return real(*paths)

    monkeypatch.setattr(versions, "source_digest", spy)
    run.grading_code()
    return {p for paths in seen for p in paths}


def test_how_grades_reach_the_numbers_is_in_the_yardstick_and_how_they_are_shown_is_not(monkeypatch):
    files = hashed_files(monkeypatch)
    assert {"eval_pipeline/grading/run.py", "eval_pipeline/grading/summary.py"} <= files
    assert "eval_pipeline/grading/presentation.py" not in files


def test_the_presentation_helpers_live_outside_the_hashed_modules():
    from eval_pipeline.grading import presentation, summary

    for name in ("grades_metadata", "grading_lines", "hallucinations_of", "grading_usage", "calibrated_rate",
                 "GRADING_LINE_FIELDS"):
        assert hasattr(presentation, name)
        for hashed in (run, summary):
            assert not hasattr(hashed, name), f"{name} is in {hashed.__name__}, whose every edit changes the yardsticks"


def test_the_regex_package_code_is_in_the_yardstick(monkeypatch):
    before = run.grading_code()
    real = versions.package_code_digest
    monkeypatch.setattr(versions, "package_code_digest",
                        lambda names: "patched" if list(names) == ["regex"] else real(names))
    assert run.grading_code() != before
