"""Grounding on the demo: the demo job (`dagster job execute`, extractive generator) with the
deterministic, static and grounding graders, then the grounding of every answer recomputed with
the corpus probe through the keyword index of the run's own table (what the answers asset gives
the grader once `graded_answers` passes it a `KeywordCorpusProbe`). Prints per variant the
grounding grader's pass rate and mean score, grounded_rate, corpus_rate, citations per answer,
and the hallucination log's counts; writes hallucinations.md and .jsonl beside the results.

    .venv/bin/python bench/judge_grounding_demo.py [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DEFAULT_STATE_ROOT, REPO_ROOT, machine_info  # noqa: E402


def newest(folder: Path):
    import pandas as pd

    return pd.read_parquet(max(folder.glob("*.parquet"), key=lambda p: p.stat().st_mtime))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "judge_grounding_demo"))
    args = parser.parse_args()
    root = Path(args.state_dir)
    shutil.rmtree(root, ignore_errors=True)
    state, results = root / "state", root / "results"  # the results folder must not be inside the state dir
    state.mkdir(parents=True)
    config = state / "run.yaml"
    config.write_text(json.dumps({"ops": {
        "graded_answers": {"config": {"graders": ["deterministic", "static", "grounding"]}},
        "report": {"config": {"results_dir": str(results)}}}}))
    print(machine_info())
    env = dict(os.environ, DAGSTER_HOME=str(REPO_ROOT), EVAL_PIPELINE_STATE_DIR=str(state),
               EVAL_PIPELINE_ARTIFACTS_DIR=str(state / "dagster"),
               EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(state / "dagster" / "logs"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = subprocess.check_output(
        [sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir", str(state), "--database",
         "dagster", "--driver", "psycopg2"], env=env, text=True).strip()
    try:
        started = time.perf_counter()
        with (state / "job.log").open("w") as out:
            code = subprocess.call([str(REPO_ROOT / ".venv" / "bin" / "dagster"), "job", "execute", "-m",
                                    "definitions", "-j", "retrieval_eval", "-c", str(config)], cwd=REPO_ROOT,
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
        if code != 0:
            raise SystemExit(f"the job failed (exit {code}); see {state / 'job.log'}")
        print(f"demo job: {time.perf_counter() - started:.1f} s")
        url = subprocess.check_output([sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir",
                                       str(state), "--database", "eval"], env=env, text=True).strip()
        report(state, results, url)
    finally:
        subprocess.call([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)],
                        env=env)


def report(state: Path, results: Path, url: str) -> None:
    from eval_pipeline.answering.cache import AnswerCache
    from eval_pipeline.answering.run import context_from_record
    from eval_pipeline.grading.grounding import (
        KeywordCorpusProbe,
        ground_answer,
        grounding_rates,
        hallucinations_jsonl,
        hallucinations_markdown,
    )

    cache = AnswerCache(state / "answers")
    probe = KeywordCorpusProbe(url)
    log = []
    print("\nvariant | grounding pass rate (context only, the job) | grounded_rate | corpus_rate | "
          "citations/answer | items | not in context | not in corpus")
    started = time.perf_counter()
    for folder in sorted((state / "variants" / "answers").iterdir()):
        answers = newest(folder)
        graded = newest(state / "variants" / "graded_answers" / folder.name)
        g_rows = graded[graded["grader"] == "grounding"]
        details = []
        for a in answers.itertuples():
            if isinstance(a.error, str):
                continue
            record = cache.get(a.answer_key)
            g = ground_answer(record["text"], context_from_record(record), probe=probe, table=a.store_table)
            details.append(g.to_json())
            log += [{"variant": a.variant, "prompt_id": a.prompt_id, "answer_key": a.answer_key, **u, "answer": None}
                    for u in g.ungrounded()]
        r = grounding_rates(details)
        scored = g_rows[g_rows["status"].isin(["graded", "no_answer"])]
        rate = scored["passed"].astype(bool).mean()
        print(f"{folder.name} | {rate:.3f} (n {len(scored)}) | {r['grounded_rate']:.3f} | "
              f"{r['corpus_rate']:.3f} | {r['citations_per_answer']:.2f} | {r['n_items']} | {r['n_ungrounded']} | "
              f"{r['n_not_in_corpus']}")
    print(f"grounding with the corpus probe: {time.perf_counter() - started:.2f} s, {probe.queries} index queries")
    probe.close()
    results.mkdir(exist_ok=True)
    (results / "hallucinations.md").write_text(hallucinations_markdown(log), encoding="utf-8")
    (results / "hallucinations.jsonl").write_text(hallucinations_jsonl(log), encoding="utf-8")
    print(f"hallucination log: {len(log)} item(s) not in their context, "
          f"{sum(e['in_corpus'] is False for e in log)} not in the corpus either; {results / 'hallucinations.md'}")


if __name__ == "__main__":
    main()
