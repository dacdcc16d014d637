"""Abstention and the microscope on a finished run's results folder (issue #26): per variant its
refusal policy and chosen threshold, correct and false refusals, the risk-coverage curve's area
(AURC) and nAUC, nDCG@10 with and without its refusals, and the microscope's triage counts.

    .venv/bin/python bench/abstention_demo.py results/        # after `make demo`
    .venv/bin/python bench/abstention_demo.py --run            # runs the demo job first, on a state
                                                               # dir and results folder of its own

The "before" column is what each variant would refuse with no policy (only its empty lists): the
refusal table of the demo before issue #26.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_ROOT, print_machine, print_table  # noqa: E402


def run_demo(folder: Path) -> Path:
    """The demo job (`make demo`'s) on a state dir and results folder under `folder`."""
    state, results = folder / "state", folder / "results"
    env = dict(os.environ, DAGSTER_HOME=str(REPO_ROOT), EVAL_PIPELINE_STATE_DIR=str(state),
               EVAL_PIPELINE_ARTIFACTS_DIR=str(state / "dagster"),
               EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(state / "dagster" / "logs"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    python = str(Path(sys.executable))
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = subprocess.check_output(
        [python, "-m", "eval_pipeline.store.database", "url", "--state-dir", str(state), "--database", "dagster",
         "--driver", "psycopg2"], env=env, cwd=REPO_ROOT, text=True).strip()
    config = folder / "config.yaml"
    config.write_text(f"ops:\n  report:\n    config:\n      results_dir: {results}\n")
    started = time.perf_counter()
    code = subprocess.call([str(Path(python).parent / "dagster"), "job", "execute", "-m", "definitions", "-j",
                            "retrieval_eval", "-c", str(config)], env=env, cwd=REPO_ROOT,
                           stdout=open(folder / "job.log", "w"), stderr=subprocess.STDOUT)
    print(f"demo job exited {code} in {time.perf_counter() - started:.0f} s (log {folder / 'job.log'})")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="?", help="a results folder (per_query.jsonl, misses.jsonl)")
    parser.add_argument("--run", action="store_true", help="run the demo job first (its own state dir)")
    args = parser.parse_args()
    print_machine("abstention and the microscope on the demo")
    if args.run:
        results = run_demo(Path(tempfile.mkdtemp(prefix="abstention_demo_")))
    elif args.results:
        results = Path(args.results)
    else:
        parser.error("give a results folder or --run")

    from eval_pipeline.metrics.selective import aurc, correct_refusal_rate, false_refusal_rate, rc_nauc, refused
    from eval_pipeline.reporting.report import _thresholds

    per_query = pd.DataFrame([json.loads(line) for line in (results / "per_query.jsonl").read_text().splitlines()])
    policies = _thresholds(per_query)
    rows = []
    for variant, frame in per_query.groupby("variant", sort=False):
        answerable = frame["answerable"].astype(bool)
        out = refused(frame)
        before = (frame["returned"] == 0) & ~frame["abstained"].fillna(False).astype(bool) & \
            ~frame["errored"].astype(bool)
        rows.append([variant, policies.get(variant, "none"), int(answerable.sum()), int((~answerable).sum()),
                     int((before & ~answerable).sum()), int((out & ~answerable).sum()),
                     int((out & answerable).sum()), correct_refusal_rate(frame), false_refusal_rate(frame),
                     aurc(frame), rc_nauc(frame), float(frame.loc[answerable, "ndcg@10"].mean()),
                     float(frame.loc[answerable, "ndcg@10 without refusal"].mean())])
    print(f"\n== Refusals per variant ({results})")
    print_table(rows, ["variant", "policy", "answerable", "abstention", "correct refusals before",
                       "correct refusals", "false refusals", "correct rate", "false rate", "AURC", "nAUC",
                       "nDCG@10", "nDCG@10 w/o refusal"])

    misses = [json.loads(line) for line in (results / "misses.jsonl").read_text().splitlines()]
    labels = ("never_candidate", "outranked_in_pool", "lost_in_fusion", "demoted_by_reranker", "dropped_by_threshold",
              "errored")
    counts: dict[str, Counter] = {}
    for m in misses:
        counts.setdefault(m["variant"], Counter())[m["triage"]] += 1
        if m.get("dense_cause"):
            counts[m["variant"]]["dense: " + m["dense_cause"]] += 1
    print("\n== Microscope: misses per triage label (and dense cause)")
    print_table([[v, *[c.get(label, 0) for label in labels], c.get("dense: crowding", 0), c.get("dense: embedding", 0)]
                 for v, c in counts.items()], ["variant", *labels, "crowding", "embedding"])


if __name__ == "__main__":
    main()
