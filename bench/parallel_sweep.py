"""The sweep in-process (job retrieval_eval, one ranking step) against the multiprocess executor
(job retrieval_eval_parallel, one step per batch of variants), on the demo corpus.

A first run fills the state dir (ingest, query embeddings); the measured runs rank every variant
again (`reuse: false`) and alternate in-process / parallel, so both see the same machine. Prints,
per run: the ranking phase (from plan_ranking's start to collect_ranked_results' end, timed by
when Dagster's log lines arrive), each rank_variants step's duration, and the whole job.

The parallel job runs once per start method each round, on the same machine in one run: `default`
(the job's own: every step forked from one server per run that preloaded the installed packages a
step imports, resources/parallel_executor.py) and `spawn` (Dagster's default: a new interpreter per
step), set in the run config; `forkserver` is Dagster's forkserver with its own (empty) preload list.

    .venv/bin/python bench/parallel_sweep.py              # 2 rounds, workers = CPU count
    .venv/bin/python bench/parallel_sweep.py --rounds 3 --workers 3
    .venv/bin/python bench/parallel_sweep.py --start-methods default   # the job's default alone
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from common import DEFAULT_STATE_ROOT, REPO_ROOT, print_machine, print_table, results_beside
from warm_rerun import BIN, dagster_database_url, dagster_env, stop_database

STEP_DONE = re.compile(r' - (\S+) - STEP_SUCCESS - Finished execution of step "[^"]+" in ([\d.]+)(ms|s|m)')
PLAN_START = re.compile(r"ranked_results\.plan_ranking - STEP_START")
COLLECT_DONE = re.compile(r"ranked_results\.collect_ranked_results - STEP_SUCCESS")


def _seconds(value: str, unit: str) -> float:
    return float(value) / 1000 if unit == "ms" else float(value) * (60 if unit == "m" else 1)


def run_job(job: str, state_dir: Path, config: Path, log_path: Path) -> dict:
    env = dagster_env(state_dir)
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = dagster_database_url(state_dir, env)
    started = time.perf_counter()
    proc = subprocess.Popen([str(BIN / "dagster"), "job", "execute", "-m", "definitions", "-j", job, "-c", str(config)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    plan_start = collect_done = None
    steps: dict[str, float] = {}
    lines = []
    for line in proc.stdout:
        now = time.perf_counter() - started
        lines.append(line)
        if plan_start is None and PLAN_START.search(line):
            plan_start = now
        elif COLLECT_DONE.search(line):
            collect_done = now
        if (m := STEP_DONE.search(line)) and "rank_variants[" in m.group(1):
            steps[m.group(1).split("[", 1)[1].rstrip("]")] = _seconds(m.group(2), m.group(3))
    proc.wait()
    total = time.perf_counter() - started
    log_path.write_text("".join(lines))
    if proc.returncode != 0:
        raise SystemExit(f"{job} failed (exit {proc.returncode}); log {log_path}")
    return {"job": job, "total": total, "ranking": (collect_done or total) - (plan_start or 0.0), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "parallel_sweep"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=None, help="ranked_results workers (default: the CPU count)")
    parser.add_argument("--start-methods", default="default,spawn",
                        help="the parallel job's start methods, each run every round: default (the job's), spawn, "
                             "forkserver (default: default,spawn)")
    args = parser.parse_args()
    print_machine("sweep in-process against the multiprocess executor, demo corpus")
    state = Path(args.state_dir).resolve()
    if state.exists():
        stop_database(state)
        shutil.rmtree(state)
    state.mkdir(parents=True)
    workers = args.workers or os.cpu_count() or 1

    methods = [m.strip() for m in args.start_methods.split(",") if m.strip()]

    def config(name: str, reuse: bool, batches: int, start_method: str | None = None) -> Path:
        path = state / f"{name}.yaml"
        execution = (f"execution:\n  config:\n    start_method:\n      {start_method}: {{}}\n"
                     if start_method not in (None, "default") else "")
        path.write_text(f"{execution}ops:\n  report:\n    config:\n      results_dir: {results_beside(state)}\n"
                        f"      record_history: false\n"
                        f"  ranked_results:\n    config:\n      reuse: {str(reuse).lower()}\n"
                        f"      workers: {batches}\n")
        return path

    try:
        first = run_job("retrieval_eval", state, config("fill", True, 1), state / "fill.log")
        print(f"fill run (ingest, query embeddings, first ranking): {first['total']:.1f} s")
        runs = []
        arms = [("retrieval_eval", 1, None), *(("retrieval_eval_parallel", workers, m) for m in methods)]
        for round_ in range(args.rounds):
            for job, batches, method in arms:
                label = f"{job} ({method})" if method else job
                name = f"{job}-{method or 'inprocess'}-{round_}"
                r = run_job(job, state, config(name, False, batches, method), state / f"{name}.log")
                r["arm"] = label
                runs.append(r)
                print(f"round {round_ + 1} {label}: ranking {r['ranking']:.1f} s, job {r['total']:.1f} s; steps "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in r["steps"].items()))
    finally:
        stop_database(state)
    rows = []
    for job, _, method in arms:
        label = f"{job} ({method})" if method else job
        mine = [r for r in runs if r["arm"] == label]
        rows.append([label, statistics.median(r["ranking"] for r in mine), statistics.median(r["total"] for r in mine),
                     max(len(r["steps"]) for r in mine)])
    print()
    print_table(rows, ["job", "ranking s (median)", "whole job s (median)", "rank steps"], digits=2)
    for row in rows[1:]:
        print(f"{row[0]} / in-process: ranking {row[1] / rows[0][1]:.2f}, whole job {row[2] / rows[0][2]:.2f} "
              f"(workers {workers}, {os.cpu_count()} cores)")
    if len(rows) == 3:
        print(f"{rows[1][0]} / {rows[2][0]}: whole job {rows[1][2] / rows[2][2]:.2f}")


if __name__ == "__main__":
    main()
