"""One registry per extension point (issue #24): the toys of tests/toys/ (an engine and leg, a
reranker, a grader, a report section), each one file that registers itself, are read by the
variants file's checks, the sweep, the reranker builder, the graders and the report like the
built-in kinds; their options are checked when the file loads, with its file:line.

The toys are imported here in-process and removed afterwards (other tests hold the built-in
lists); the whole job with them is tests/integration/test_toy_extensions.py."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.common.registry import Registry, load_plugins, plugin_modules
from eval_pipeline.config.sweep import load_sweep, parse_sweep
from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.grading.judges import GRADERS, TOKEN_SPENDING, check_graders
from eval_pipeline.grading.registry import GRADER_KINDS
from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking.engines import ENGINE_NAMES, ENGINES, LEGS
from eval_pipeline.ranking.rerankers import RERANKER_KINDS, RERANKERS, ResourceServices, build_reranker
from eval_pipeline.ranking.steps import index_independent
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.ranking.variants import VariantConfigError
from eval_pipeline.reporting.report import SECTIONS

REPO = Path(__file__).resolve().parents[3]
TOYS = {"tests.toys.toy_engine": (ENGINES, "toy-overlap"), "tests.toys.toy_reranker": (RERANKERS, "reverse"),
        "tests.toys.toy_grader": (GRADER_KINDS, "toy_length"), "tests.toys.toy_section": (SECTIONS, "toy")}


@pytest.fixture
def toys():
    for module in TOYS:  # registered at import; imported again after a test removed them
        importlib.reload(sys.modules[module]) if module in sys.modules else importlib.import_module(module)
    yield
    for registry, name in TOYS.values():
        registry.unregister(name)


def test_the_built_in_kinds_in_their_order():
    assert ENGINE_NAMES == ("pg-keyword", "pg-dense", "hybrid", "bm25", "metadata")
    assert LEGS == ("keyword", "dense", "bm25")
    assert RERANKER_KINDS == ("none", "cross-encoder", "bi-encoder", "llm", "mmr")
    assert GRADERS == ("deterministic", "static", "grounding", "judge", "decision") and set(TOKEN_SPENDING) == {"judge", "decision"}
    assert SECTIONS.names() == ("validity", "indexes", "answers", "set_validity")


def test_a_registered_toy_is_in_every_list_and_leaves_no_trace(toys):
    assert "toy-overlap" in ENGINE_NAMES and "overlap" in LEGS and "reverse" in RERANKER_KINDS
    assert "toy_length" in GRADERS and "toy_length" not in TOKEN_SPENDING and SECTIONS.names()[-1] == "toy"
    assert check_graders(["deterministic", "toy_length"]) == ("deterministic", "toy_length")


def test_the_toys_are_gone_after_the_test():
    assert "toy-overlap" not in ENGINE_NAMES and "toy_length" not in GRADERS and "toy" not in SECTIONS


def test_a_name_is_registered_once():
    registry: Registry = Registry("thing")

    class Kind:
        def __init__(self, name):
            self.name = name

    registry.register(Kind("a"))
    with pytest.raises(ValueError, match="thing 'a' is registered already"):
        registry.register(Kind("a"))
    assert registry.unknown("b") == "thing 'b' is not valid; valid things: a"


def test_the_toys_options_are_checked_at_load_with_the_files_line(toys, tmp_path):
    path = tmp_path / "variants.yaml"
    path.write_text("variants:\n  - engine: pg-dense\n  - engine: toy-overlap\n    min_length: 0\n")
    with pytest.raises(VariantConfigError, match=re.escape(f"{path}:4: variant 2: min_length must be an integer "
                                                           "in [1, 20], got 0")):
        load_sweep(path)
    path.write_text("variants:\n  - engine: hybrid\n    legs: [keyword, overlap]\n    stemmer: none\n")
    with pytest.raises(VariantConfigError, match=re.escape(f"{path}:4: variant 1 (hybrid): unknown setting(s) "
                                                           "['stemmer']; valid: ")):
        load_sweep(path)
    path.write_text("variants:\n  - engine: pg-dense\n    reranker: {kind: reverse, keep_first: 1}\n")
    message = f"{path}:3: variant 1 ('pg-dense+reverse'): reranker 'reverse' option 'keep_first' must be true or false"
    with pytest.raises(VariantConfigError, match=re.escape(message + ", got 1")):
        load_sweep(path)
    path.write_text("variants:\n  - engine: pg-dense\n    reranker: {kind: reverse, depth: 3}\n")
    with pytest.raises(VariantConfigError, match=re.escape("reranker 'reverse' has no option(s) 'depth'; "
                                                           "valid options: keep_first")):
        load_sweep(path)
    sweep = parse_sweep({"variants": [{"engine": "toy-overlap", "min_length": 5},
                                      {"engine": "hybrid", "legs": ["keyword", "overlap"], "min_length": 3,
                                       "match": "any"},
                                      {"engine": "pg-dense", "reranker": {"kind": "reverse", "keep_first": True}}]})
    toy, hybrid, reranked = sweep.variants
    assert toy.used_legs == ("overlap",) and toy.leg_settings("overlap") == {"min_length": 5}
    assert hybrid.used_legs == ("keyword", "overlap") and hybrid.leg_settings("keyword") == {"match": "any"}
    assert reranked.key == "pg-dense+reverse" and not index_independent(toy)
    assert build_reranker("reverse", reranked.reranker.options, ResourceServices(lambda: None, lambda m: None)) \
        .identity()["version"] == "1;keep_first=True"


QUESTIONS = [Question("q1", "office kettle vinegar", ("kettle",)), Question("q2", "bicycle basement cage", ("bike",))]
SNAPSHOT = CorpusSnapshot(documents=(Document("kettle", "Kettle", "", "k.md", "descale the office kettle with vinegar"),
                                     Document("bike", "Bikes", "", "b.md", "lock the bicycle in the cage")),
                          source="test")


def test_the_sweep_ranks_and_diagnoses_with_the_toy_leg_and_reranker(toys):
    variants = parse_sweep({"variants": [{"engine": "toy-overlap", "depth": 2},
                                         {"engine": "toy-overlap", "depth": 2, "reranker": "reverse"}]}).variants
    s = Sweep(snapshot=SNAPSHOT, connection_string="postgresql://u@h/db", table="t", query_embeddings={},
              embed_ms_per_query=0.0, rerankers={"toy-overlap+reverse": build_reranker("reverse", {}, None)}, miss_k=1)
    s._chunks = [("kettle:0", "kettle", "descale the office kettle with vinegar"),
                 ("bike:0", "bike", "lock the bicycle in the cage")]
    real = s.leg_hits

    def no_dense(name, top_k, q, settings=None):  # the dense leg the diagnosis compares with: nothing
        from eval_pipeline.ranking.sweep import _Timed

        return _Timed([], 0.0, None) if name == "dense" else real(name, top_k, q, settings)

    s.leg_hits = no_dense  # type: ignore[method-assign]
    frames = s.run(variants, QUESTIONS)
    plain, reranked = frames["toy-overlap"], frames["toy-overlap+reverse"]
    assert list(plain["doc_ids"]) == [["kettle"], ["bike"]] and plain["miss_class"].isna().all()
    assert [d[0] for d in reranked["doc_ids"]] == ["kettle", "bike"]  # one candidate each: nothing to reverse
    assert s.queries_by_stage["overlap"] == 2 and pd.isna(plain["diagnosis_error"]).all()
    assert list(plain["keyword_docs"].iloc[0]) == ["kettle"]  # the toy leg is the keyword side of the diagnosis


def test_plugins_are_imported_from_the_environment_in_a_fresh_process(tmp_path):
    """EVAL_PIPELINE_PLUGINS names the files: any process that reads a registry imports them."""
    code = ("from eval_pipeline.ranking.engines import ENGINE_NAMES; from eval_pipeline.grading.judges import GRADERS; "
            "from eval_pipeline.reporting.report import SECTIONS; "
            "print(list(ENGINE_NAMES)[-1], list(GRADERS)[-1], SECTIONS.names()[-1])")
    env = {"PATH": "/usr/bin:/bin", "EVAL_PIPELINE_PLUGINS": ",".join(TOYS), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["toy-overlap", "toy_length", "toy"]


def test_a_plugin_that_cannot_be_imported_names_the_variable(monkeypatch):
    monkeypatch.setenv("EVAL_PIPELINE_PLUGINS", "tests.toys.no_such_toy")
    assert plugin_modules() == ("tests.toys.no_such_toy",)
    with pytest.raises(ImportError, match="EVAL_PIPELINE_PLUGINS: cannot import 'tests.toys.no_such_toy'"):
        load_plugins()


def test_the_built_in_order_does_not_depend_on_which_module_is_imported_first():
    """A registry's built-in kinds keep the order of its modules: importing the second module
    first (it registers, which imports the first from inside) gives the same list."""
    script = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
              "from eval_pipeline.reporting.report import SECTIONS; print(','.join(SECTIONS.names()))")
    orders = {subprocess.run([sys.executable, "-c", script, module], capture_output=True, text=True, cwd=REPO,
                             check=True).stdout.strip()
              for module in ("eval_pipeline.reporting.sections", "eval_pipeline.reporting.set_validity",
                             "eval_pipeline.reporting.report")}
    assert orders == {"validity,indexes,answers,set_validity"}
