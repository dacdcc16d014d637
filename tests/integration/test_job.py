"""The Dagster layer: materialize in a test instance, and `dagster job execute` as CI runs it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterInvalidConfigError, materialize

from resources import DatabaseResource, EmbedderResource

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def _defs_assets():
    import definitions

    return [*definitions.ALL_ASSETS, definitions.assets.no_errored_questions]


def _tiny_config(results_dir, **retrieval):
    config = {
        "corpus_snapshot": {"config": {"source": "jsonl", "path": str(FIXTURES / "tiny_corpus.jsonl")}},
        "question_set": {"config": {"path": str(FIXTURES / "tiny_questions.jsonl")}},
        "pgvector_store": {"config": {"split_length": 30, "split_overlap": 5}},
        "report": {"config": {"results_dir": str(results_dir)}},
    }
    if retrieval:
        config["ranked_results"] = {"config": retrieval}
    return {"ops": config}


@pytest.fixture(scope="module")
def resources(pg_state_dir, embedded_pg):
    return {"database": DatabaseResource(kind="embedded", state_dir=str(pg_state_dir)), "embedder": EmbedderResource()}


def test_materialize_tiny_corpus(tmp_path, resources):
    result = materialize(_defs_assets(), resources=resources, run_config=_tiny_config(tmp_path),
                         instance=DagsterInstance.ephemeral())
    assert result.success
    metrics = result.output_for_node("retrieval_metrics")
    summary = metrics["summary"].set_index("engine")
    assert list(summary.index) == ["pg-keyword", "pg-dense", "hybrid", "bm25", "metadata"]
    assert summary.loc["pg-dense", "hit@1"] == 1.0
    assert (summary["n_answerable"] == 5).all() and (summary["n_abstention"] == 1).all()
    report = (tmp_path / "results.md").read_text()
    assert "Best engine" in report and "| pg-dense |" in report
    lines = (tmp_path / "per_query.jsonl").read_text().splitlines()
    assert len(lines) == 5 * 6  # every engine x every question, abstention included
    checks = result.get_asset_check_evaluations()
    assert [c.passed for c in checks] == [True]
    _assert_trec_parity(tmp_path / "trec", metrics["per_query"])


def _assert_trec_parity(trec_dir, per_query):
    """The TREC files we wrote, scored by pytrec_eval, give our per-question numbers."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from eval_pipeline.trec import read_run

    qrels = {}
    for line in (trec_dir / "qrels.txt").read_text().splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    measures = {"ndcg_cut_10": "ndcg@10", "recip_rank": "mrr", "map": "map", "recall_10": "recall@10"}
    for engine, group in per_query[per_query["answerable"]].groupby("engine"):
        run = {q: {d: float(100 - i) for i, d in enumerate(ids)} for q, ids in read_run(trec_dir / f"{engine}.run").items()}
        theirs = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)
        for _, row in group.iterrows():
            for measure, column in measures.items():
                expected = theirs.get(row["qid"], {}).get(measure, 0.0)  # no run line: a miss
                assert row[column] == pytest.approx(expected, abs=1e-9), (engine, row["qid"], measure)


def test_unknown_engine_is_rejected_at_launch(tmp_path, resources):
    config = _tiny_config(tmp_path, engines=["pg-dense", "elastic"])
    with pytest.raises(DagsterInvalidConfigError, match="elastic"):
        materialize(_defs_assets(), resources=resources, run_config=config, instance=DagsterInstance.ephemeral())


def test_demo_job_body_only_questions(tmp_path, resources):
    """On the demo corpus, engines that read the body must beat the metadata-only scorer on
    questions whose answer lives only in the body; if not, the harness has a bug."""
    config = {"ops": {"report": {"config": {"results_dir": str(tmp_path)}}}}
    result = materialize(_defs_assets(), resources=resources, run_config=config, instance=DagsterInstance.ephemeral())
    assert result.success
    per_query = result.output_for_node("retrieval_metrics")["per_query"]
    body_only = per_query[per_query["hard_class"] == "body-only"]
    assert body_only["qid"].nunique() >= 30
    by_engine = body_only.groupby("engine")[["hit@5", "mrr"]].mean()
    for engine in ("hybrid", "pg-dense"):
        assert by_engine.loc[engine, "hit@5"] > by_engine.loc["metadata", "hit@5"] + 0.2, by_engine
        assert by_engine.loc[engine, "mrr"] > by_engine.loc["metadata", "mrr"], by_engine
    summary = result.output_for_node("retrieval_metrics")["summary"]
    assert (summary["n_questions"] >= 200).all()
    assert (summary["n_errored"] == 0).all()


def _cli_env(pg_state_dir, dagster_url):
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(REPO),
        EVAL_PIPELINE_STATE_DIR=str(pg_state_dir),
        EVAL_PIPELINE_ARTIFACTS_DIR=str(pg_state_dir / "dagster"),
        EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(pg_state_dir / "dagster" / "logs"),
        EVAL_PIPELINE_DAGSTER_PG_URL=dagster_url,
    )
    return env


def test_dagster_job_execute_cli(tmp_path, pg_state_dir, embedded_pg):
    """The command CI and the README use, with run storage in the embedded Postgres."""
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(_tiny_config(tmp_path / "results")))
    env = _cli_env(pg_state_dir, embedded_pg.uri("dagster", driver="psycopg2"))
    cmd = [str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m", "definitions", "-j", "retrieval_eval"]
    ok = subprocess.run([*cmd, "-c", str(config_file)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert (tmp_path / "results" / "results.md").exists()

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_tiny_config(tmp_path / "bad_results", engines=["nope"])))
    failed = subprocess.run([*cmd, "-c", str(bad)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0
    assert "nope" in failed.stdout + failed.stderr
    assert not (tmp_path / "bad_results").exists()
