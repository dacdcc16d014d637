"""The verdict's history lookups, on a connection each against one shared connection.

A demo verdict asks the history about 180 questions: per variant its previous run (by name,
by benchmark, of any benchmark), pinned reference, recorded run and lineage; per (variant,
grader) its answer yardsticks, history and graders. This replays that pattern against a
state dir's real history, alternating plain calls and `measurements.session()`, and prints
the seconds of each and their ratio.

    .venv/bin/python bench/history_session.py --state-dir /tmp/demo_state [--rounds 5]

The state dir needs a recorded demo run (run `make demo` on it first); its embedded
Postgres is started if it is not running.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import (
    answer_graders_of,
    answer_history_exists,
    answer_history_of,
    answer_recorded_of,
    answer_tolerance_floor,
    read_answer_runs,
)
from eval_pipeline.history.runs import (
    earlier_names,
    previous_run,
    project_history,
    read_run,
    recent_runs,
    recorded_run_of,
    reference_run,
)
from eval_pipeline.store.database import EmbeddedPostgres


def verdict_lookups(uri: str, variants: list[str], graders: list[str]) -> int:
    """The lookups one verdict makes (the shape of verdict.retrieval.judge_run and
    verdict.answers.judge_answer_run), against no current run; returns how many."""
    asked = 1
    project_history(uri, before_run_id="bench")
    for v in variants:
        previous_run(uri, variant=v, before_run_id="bench")
        recorded_run_of(uri, variant=v, before_run_id="bench")
        previous_run(uri, variant=v, identity={"corpus_signature": "x", "benchmark_fingerprint": "y",
                                               "scoring_protocol": "z"}, before_run_id="bench")
        previous_run(uri, variant=v, before_run_id="bench")
        reference_run(uri, variant=v, identity=None, before_run_id="bench")
        earlier_names(uri, variant=v, before_run_id="bench")
        answer_graders_of(uri, variant=v, before_run_id="bench")
        asked += 7
    answer_history_exists(uri, before_run_id="bench")
    answer_tolerance_floor(uri, before_run_id="bench")
    asked += 2
    for v in variants:
        for g in graders:
            answer_history_of(uri, variant=v, grader=g, before_run_id="bench")
            answer_history_of(uri, variant=v, grader=g, before_run_id="bench")
            answer_recorded_of(uri, variant=v, grader=g, before_run_id="bench")
            asked += 3
    return asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    uri = EmbeddedPostgres(args.state_dir).uri("eval")
    runs = recent_runs(uri, limit=1)
    if not runs:
        raise SystemExit(f"{args.state_dir}: no recorded run; run `make demo` on it first")
    variants = sorted(set(read_run(uri, runs[0]["run_id"])["metrics"]["variant"]))
    graders = sorted({r["grader"] for r in read_answer_runs(uri, run_id=runs[0]["run_id"])})
    plain, shared = [], []
    asked = 0
    for _ in range(args.rounds):
        start = time.perf_counter()
        asked = verdict_lookups(uri, variants, graders)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        with measurements.session():
            verdict_lookups(uri, variants, graders)
        shared.append(time.perf_counter() - start)
    load = os.getloadavg()[0]
    print(f"{len(variants)} variants, {len(graders)} graders: {asked} lookups per verdict, {args.rounds} rounds "
          f"alternated, load {load:.1f}")
    print(f"a connection each: median {statistics.median(plain):.3f} s ({', '.join(f'{t:.3f}' for t in plain)})")
    print(f"one session:       median {statistics.median(shared):.3f} s ({', '.join(f'{t:.3f}' for t in shared)})")
    print(f"shared / plain = {statistics.median(shared) / statistics.median(plain):.2f}")


if __name__ == "__main__":
    main()
