"""Issue #24's proof: a toy engine (and leg), a toy reranker, a toy grader, a toy report section
and a toy metric, each one new file under tests/toys/ plus its registration (the one line below
that names the files in EVAL_PIPELINE_PLUGINS), run through the whole job (`dagster job execute
-j retrieval_eval`) on the tiny corpus with the tiny golden set, beside built-in ones. The toy
metric registers itself in the measure registry (eval_pipeline.metrics.retrieval.MEASURES): it is
scored for every question, shown in the report's variants table and gated by its tolerance (the
plugins are imported before the variants file is read, in every process of the run)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from eval_pipeline.ranking.diagnosis import MISS_CLASSES
from tests.integration.cli import FIXTURES, start_job, tiny_job_config

pytestmark = pytest.mark.integration

# The registration line of each toy: its file, imported by every process that reads a registry.
TOY_PLUGINS = ["tests.toys.toy_engine", "tests.toys.toy_reranker", "tests.toys.toy_grader", "tests.toys.toy_section",
               "tests.toys.toy_metric"]

VARIANTS = {
    "baseline": "hybrid-toy",
    "variants": [
        {"engine": "toy-overlap", "min_length": 3},  # the toy engine alone, with its option
        {"engine": "hybrid", "legs": ["keyword", "dense", "overlap"], "name": "hybrid-toy"},  # the toy as a leg
        {"engine": "pg-dense", "reranker": {"kind": "reverse", "keep_first": True}},  # the toy reranker
        {"engine": "bm25"},
    ],
    # the toy metric gated beside the built-in ones (in scientific notation, as PyYAML leaves it text)
    "gate": {"tolerances": {"hit@1": 0.05, "hit@5": 0.05, "mrr": 0.05, "ndcg@10": 0.05, "toy_found": "5e-2"}},
}


def test_the_whole_job_runs_with_a_toy_of_every_extension_point(tmp_path, job_env):
    variants = tmp_path / "toys.variants.yaml"
    variants.write_text(yaml.safe_dump(VARIANTS, sort_keys=False))
    env = job_env("toys", EVAL_PIPELINE_VARIANTS=str(variants), EVAL_PIPELINE_PLUGINS=",".join(TOY_PLUGINS))
    results = tmp_path / "results"
    config = tiny_job_config(results)
    config["ops"]["golden_prompts"] = {"config": {"source": "file", "path": str(FIXTURES / "tiny_golden.jsonl")}}
    config["ops"]["graded_answers"] = {"config": {"graders": ["deterministic", "toy_length"]}}
    code = start_job(tmp_path, "toys", env, config).wait(timeout=900)
    log = (tmp_path / "toys.log").read_text(errors="replace")
    assert code == 0, log[-4000:]

    report = (results / "results.md").read_text(encoding="utf-8")
    table = report[report.index("## Variants"):report.index("\n## ", report.index("## Variants") + 1)]
    for key in ("toy-overlap", "hybrid-toy (baseline variant)", "pg-dense+reverse", "bm25"):
        assert f"| {key} " in table, table
    assert " toy_found |" in table.splitlines()[2], table  # the toy metric's column in the headline table
    # the toy section, in its slot: before the provenance, after the retrieval sections
    assert report.index("## Toy section") < report.index("## Provenance")
    assert "4 variants on" in report and "- `toy-overlap`:" in report
    # the toy grader's row in the answer quality section, beside the built-in one
    answers = report[report.index("## Answer quality"):]
    assert "toy_length" in answers and "deterministic" in answers

    rows = [json.loads(line) for line in (results / "per_query.jsonl").read_text().splitlines()]
    by_variant = {r["variant"]: r for r in rows}
    assert set(by_variant) == {"toy-overlap", "hybrid-toy", "pg-dense+reverse", "bm25"}
    config_of = {v: json.loads(r["variant_config"]) for v, r in by_variant.items()}
    assert config_of["toy-overlap"]["leg_settings"] == {"overlap": {"min_length": 3}}
    assert config_of["hybrid-toy"]["legs"] == ["keyword", "dense", "overlap"]
    assert config_of["pg-dense+reverse"]["reranker_identity"]["kind"] == "reverse"
    for r in rows:  # every question ranked and diagnosed, none errored
        assert r["error"] is None and r["diagnosis_error"] is None, r
    answerable = [r for r in rows if r["answerable"]]
    assert answerable and all(r["toy_found"] in (0.0, 1.0) for r in answerable)  # the toy metric, per question
    assert (results / "misses.jsonl").exists()  # the microscope beside the report, whatever the legs
    for miss in map(json.loads, (results / "misses.jsonl").read_text().splitlines()):
        if miss["variant"] == "hybrid-toy":  # the toy leg is seen like the built-in ones
            assert set(miss["legs"]) == {"keyword", "dense", "overlap"}, miss
    partitions = (tmp_path / "toys" / "variants" / "ranked_results").rglob("*.parquet")
    ranked = pd.concat(pd.read_parquet(f) for f in partitions)
    reranked = ranked[ranked["variant"] == "pg-dense+reverse"]
    for pre, final in zip(reranked["pre_rerank"], reranked["doc_ids"]):  # keep_first: the rest of the top 20 reversed
        pre, final = list(pre), list(final)
        assert final == pre[:1] + pre[1:][::-1], (pre, final)
    assert any(len(final) > 2 for final in reranked["doc_ids"])
    assert set(ranked["miss_class"].dropna()) <= set(MISS_CLASSES)
