"""A metric joins by registration from one new file (issue #24's leftover, #26): the toy metric of
tests/toys/toy_metric.py is scored, summarized, on the report's headline list and gateable, with
no other change; every list read at import time sees it."""

from __future__ import annotations

import importlib
import sys

import pandas as pd
import pytest

from eval_pipeline.metrics.retrieval import HEADLINE, MEASURES, aggregate, metric_names, score_queries


@pytest.fixture
def toy_metric():
    sys.modules.pop("tests.toys.toy_metric", None)
    importlib.import_module("tests.toys.toy_metric")
    yield "toy_found"
    MEASURES.unregister("toy_found")
    sys.modules.pop("tests.toys.toy_metric", None)


def test_a_registered_metric_reaches_every_list_read_at_import_time(toy_metric):
    from eval_pipeline.gates.retrieval import GATEABLE_METRICS, validate_tolerances
    from eval_pipeline.scoring.variant import HEADLINE_METRICS

    assert toy_metric in metric_names(HEADLINE)
    assert toy_metric in HEADLINE_METRICS  # a constant of scoring.variant, taken before the toy existed
    assert toy_metric in GATEABLE_METRICS
    assert validate_tolerances({toy_metric: "1e-2"}) == {toy_metric: 0.01}


def test_a_registered_metric_is_scored_and_averaged(toy_metric):
    frame = score_queries({"q1": ["x", "y", "a"], "q2": ["x"]}, {"q1": {"a": 1}, "q2": {"b": 1}}, ks=(1,))
    assert list(frame[toy_metric]) == [1.0, 0.0]
    assert aggregate(frame)[toy_metric] == 0.5


def test_unregistered_it_is_gone(toy_metric):
    MEASURES.unregister(toy_metric)
    assert toy_metric not in metric_names(HEADLINE)
    frame = score_queries({"q1": ["a"]}, {"q1": {"a": 1}})
    assert toy_metric not in frame.columns
    assert isinstance(frame, pd.DataFrame)
