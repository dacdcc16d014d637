"""What the verdict's paired comparison costs: the whole retrieval_eval job, run as `make demo`
runs it, four times on one fresh state dir:

1. cold: the first run of the project (every variant `first_run`);
2. warm, nothing changed (every variant `comparable`): the reference point;
3. the benchmark changed (every question reworded), the variants unchanged: every variant
   `paired` with its own configuration, which needs no ranking (today's results are its results);
4. reworded again and one variant changed (`hybrid` at `depth: 3`): that variant's reference
   configuration is ranked on today's questions inside the verdict step.

Prints, for each run, the job's wall time, the ranked_results and verdict steps' durations and
each variant's gate state; then the verdict step's time in runs 3 and 4 against run 2's, which
is what the paired comparison adds. Exit codes are printed, not acted on (run 4 may fail its
gate: that is the point).

    .venv/bin/python bench/paired_verdict.py                       # the demo corpus
    .venv/bin/python bench/paired_verdict.py --beir ../shared/datasets/scifact --split train [--keep-store]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from common import DEFAULT_STATE_ROOT, REPO_ROOT, print_machine, print_table, results_beside
from warm_rerun import BIN, STEP_DONE, _seconds, dagster_database_url, dagster_env, stop_database

GATE_LINE = re.compile(r"^- `(?P<variant>[^`]+)`: \*\*(?P<verdict>passed|FAILED)\*\* \((?P<state>\w+)\)", re.M)
STEPS = {"ranked_results": "ranked_results.rank_variants", "verdict": "verdict", "report": "report"}


def write_question_sets(folder: Path, beir: str | None, split: str) -> tuple[Path, Path, Path]:
    """The question set as the job reads it, and two rewordings of it (every text prefixed), each
    a stamped question file for the same corpus."""
    from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
    from eval_pipeline.questions.sets import load_beir_questions, load_question_set, write_question_set

    if beir:
        snapshot = load_corpus("beir", beir)
        ids = [d.doc_id for d in snapshot.documents]
        questions = load_beir_questions(beir, split=split, doc_ids=ids, corpus_signature=snapshot.signature).questions
    else:
        snapshot = load_corpus("demo")
        ids = [d.doc_id for d in snapshot.documents]
        questions = load_question_set(DEMO_DATA_DIR / "questions.jsonl", corpus_signature=snapshot.signature,
                                      doc_ids=ids).questions
    paths = []
    for name, prefix in (("original", ""), ("reworded", "please tell me: "), ("reworded-again", "tell me please: ")):
        path = folder / f"{name}.jsonl"
        write_question_set(path, [replace(q, question=prefix + q.question) for q in questions],
                           corpus_signature=snapshot.signature)
        paths.append(path)
    return paths[0], paths[1], paths[2]


def run_config(state_dir: Path, questions: Path, beir: str | None) -> Path:
    text = (f"ops:\n  report:\n    config:\n      results_dir: {results_beside(state_dir)}\n"
            f"  question_set:\n    config:\n      path: {questions}\n")
    if beir:
        folder = Path(beir).resolve()
        text += (f"  corpus_snapshot:\n    config:\n      source: beir\n      path: {folder}\n"
                 "  pgvector_store:\n    config:\n      split_length: 100000\n      split_overlap: 0\n"
                 "  golden_prompts:\n    config:\n      source: none\n")
    path = state_dir / f"run-{questions.stem}.yaml"
    path.write_text(text)
    return path


def run(state_dir: Path, config: Path, variants: Path, label: str) -> dict:
    env = {**dagster_env(state_dir), "EVAL_PIPELINE_VARIANTS": str(variants)}
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = dagster_database_url(state_dir, env)
    started = time.perf_counter()
    proc = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "definitions", "-j", "retrieval_eval",
                           "-c", str(config)], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    (state_dir / f"{label}.log").write_text(log)
    steps: dict[str, float] = {}
    for line in log.splitlines():
        if m := STEP_DONE.match(line):
            for name, step in STEPS.items():
                if m.group(3) == step or m.group(3).startswith(step + "["):
                    steps[name] = steps.get(name, 0.0) + _seconds(m.group(4), m.group(5))
    paired = [float(m.group(1)) for m in re.finditer(r"paired comparison: \S+ ranked and scored on \d+ questions in "
                                                      r"([\d.]+) s", log)]
    steps["paired ranking"] = sum(paired)
    report = results_beside(state_dir) / "results.md"
    states = {}
    if report.exists():
        states = {m["variant"]: f"{m['state']} {m['verdict']}" for m in GATE_LINE.finditer(report.read_text())}
    return {"label": label, "exit": proc.returncode, "seconds": seconds, **steps, "states": states}


def forget_history(state_dir: Path) -> None:
    """Drop the history tables (retrieval and answers) of the state dir's `eval` database."""
    import psycopg

    from eval_pipeline.store.database import EmbeddedPostgres

    with psycopg.connect(EmbeddedPostgres(state_dir).uri("eval"), autocommit=True) as conn:
        for table in ("eval_references", "eval_variant_metrics", "eval_measurements", "eval_question_results",
                      "eval_runs", "eval_answer_runs"):
            conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "paired_verdict"),
                        help="bench state dir, deleted first (the first run must be the project's first)")
    parser.add_argument("--beir", help="a BEIR collection (corpus and judged queries) instead of the demo")
    parser.add_argument("--split", default="test", help="the BEIR qrels split (default test)")
    parser.add_argument("--keep-db", action="store_true", help="leave the embedded Postgres running at exit")
    parser.add_argument("--keep-store", action="store_true",
                        help="keep the state dir's vector tables and caches (a SciFact ingest takes minutes) and "
                        "start from an empty history only: run 1 is then the project's first run, not a cold one")
    args = parser.parse_args()
    state_dir = Path(args.state_dir).resolve()
    if args.keep_store and state_dir.exists():
        forget_history(state_dir)
    else:
        if state_dir.exists():
            stop_database(state_dir)
            shutil.rmtree(state_dir)
        state_dir.mkdir(parents=True)
    print_machine(f"bench/paired_verdict.py ({'BEIR ' + args.beir if args.beir else 'demo'}), "
                  f"load average {os.getloadavg()[0]:.2f}")
    original, reworded, again = write_question_sets(state_dir, args.beir and str(Path(args.beir).resolve()),
                                                    args.split)
    good = REPO_ROOT / "variants.yaml"
    changed = state_dir / "variants-changed.yaml"
    changed.write_text(good.read_text().replace("  - engine: hybrid\n  - engine: hybrid\n",
                                                "  - engine: hybrid\n    depth: 3\n  - engine: hybrid\n", 1))
    runs = []
    try:
        for label, questions, variants in (("1 cold", original, good), ("2 warm, unchanged", original, good),
                                           ("3 reworded", reworded, good),
                                           ("4 reworded again, hybrid changed", again, changed)):
            runs.append(run(state_dir, run_config(state_dir, questions, args.beir), variants, label))
            print(f"{label}: exit {runs[-1]['exit']}, {runs[-1]['seconds']:.1f} s; "
                  + ", ".join(f"{v} {s}" for v, s in runs[-1]["states"].items()), flush=True)
    finally:
        if not args.keep_db:
            stop_database(state_dir)
    print_table([[r["label"], r["exit"], r["seconds"], r.get("ranked_results", float("nan")),
                  r.get("verdict", float("nan")), r.get("paired ranking", float("nan")), r.get("report", float("nan"))]
                 for r in runs],
                ["run", "exit", "job s", "ranked_results s", "verdict s", "paired ranking s", "report s"], digits=2)
    base = runs[1].get("verdict", float("nan"))
    for r in runs[2:]:
        print(f"{r['label']}: the verdict step {r.get('verdict', float('nan')):.2f} s (unchanged: {base:.2f} s; the "
              f"rest is the statistics of new scores), of which ranking reference configurations "
              f"{r.get('paired ranking', 0.0):.2f} s = {r.get('paired ranking', 0.0) / r['seconds']:.1%} of the job, "
              f"{r.get('paired ranking', 0.0) / max(r.get('ranked_results', float('nan')), 1e-9):.2f}x the "
              "ranked_results step")


if __name__ == "__main__":
    main()
