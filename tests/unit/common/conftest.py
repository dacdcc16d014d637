"""The tests here write a file and hash it at once. A model's or a source file's last change is
normally older than the digest cache's racy window (`weights.RACY_WINDOW_NS`: a digest is cached
only once the file's last change is that much older than the read), so these tests pretend their
files are: the window is 0 unless a test of the rule sets it back (`racy_window`)."""

from __future__ import annotations

import pytest

from eval_pipeline.common import weights

RACY_WINDOW_NS = weights.RACY_WINDOW_NS  # the shipped window, for the tests of the rule


@pytest.fixture(autouse=True)
def files_written_long_ago(monkeypatch):
    monkeypatch.setattr(weights, "RACY_WINDOW_NS", 0)


@pytest.fixture
def racy_window(monkeypatch) -> int:
    """The shipped racy window, in force for this test."""
    monkeypatch.setattr(weights, "RACY_WINDOW_NS", RACY_WINDOW_NS)
    return RACY_WINDOW_NS
