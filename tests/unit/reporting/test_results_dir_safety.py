"""Publishing swaps the whole results folder for a new one (an atomic rename). A results folder
that is, holds or sits inside the state dir (the embedded Postgres's data, every cache, Dagster's
storage) would be swapped from under the running server and lost; one that is or holds the
checkout would take the code with it. Such a folder is refused before any step runs, naming
the setting and what it would destroy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval_pipeline.reporting.publish import UnsafeResultsDir, check_results_dir


@pytest.fixture
def layout(tmp_path):
    checkout = tmp_path / "checkout"
    state = checkout / ".eval_state"
    (state / "pgdata").mkdir(parents=True)
    return checkout, state


def protected(checkout: Path, state: Path) -> dict:
    return {"the state dir (the embedded Postgres, caches, run history)": (state, "inside"),
            "the checkout (the code)": (checkout, "holds")}


@pytest.mark.parametrize("where", ["state", "pgdata", "checkout", "parent", "inside_state"])
def test_a_results_folder_that_is_holds_or_sits_inside_the_state_is_refused(layout, where):
    checkout, state = layout
    results = {"state": state, "pgdata": state / "pgdata", "checkout": checkout, "parent": checkout.parent,
               "inside_state": state / "results"}[where]
    with pytest.raises(UnsafeResultsDir) as err:
        check_results_dir(results, protected(checkout, state), setting="report.results_dir")
    message = str(err.value)
    assert "report.results_dir" in message and str(results) in message


def test_the_default_folder_beside_the_state_is_fine(layout):
    checkout, state = layout
    assert check_results_dir(checkout / "results", protected(checkout, state)) == (checkout / "results").resolve()
    assert check_results_dir(checkout / "out" / "results", protected(checkout, state))


def test_a_relative_path_and_a_symlink_are_resolved_before_the_check(layout, monkeypatch):
    checkout, state = layout
    monkeypatch.chdir(checkout)
    with pytest.raises(UnsafeResultsDir):
        check_results_dir(Path("."), protected(checkout, state))
    with pytest.raises(UnsafeResultsDir):
        check_results_dir(Path(".eval_state/../.eval_state"), protected(checkout, state))
    link = checkout.parent / "results-link"
    os.symlink(state, link)
    with pytest.raises(UnsafeResultsDir):
        check_results_dir(link, protected(checkout, state))


def test_it_is_a_value_error_naming_what_would_be_destroyed(layout):
    checkout, state = layout
    with pytest.raises(ValueError, match="embedded Postgres"):
        check_results_dir(state, protected(checkout, state))
