"""What a gate nothing comparable judged costs as the history grows: it is compared with every full
run recorded of the variant's name (or its configuration under a retired name), with no window, so
that lookup reads more rows every night.

Records a synthetic nightly history (``--variants`` variants, ``--questions`` questions, one run a
night, each judged and recorded by ``judge_run`` as the verdict asset does) in a fresh embedded
Postgres, and at each size of ``--sizes`` times, alternated ``--rounds`` times:

* a normal nightly verdict (every variant ``comparable`` against its previous run);
* a verdict whose every gate is left ``not_compared`` (the questions and every configuration
  changed, and no ranking of the earlier configurations is possible here: ``rank_reference`` None),
  so each variant reads its whole recorded history (``recorded_measurements``) before finding none
  of it on today's benchmark;
* that lookup alone, per variant, and the size of what it returns.

Prints a table and the ratio of the two verdicts at each size.

    .venv/bin/python bench/recorded_lookup.py [--sizes 10 100 365] [--variants 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from common import load_note, print_machine, print_table

from eval_pipeline.history.runs import recorded_measurements
from eval_pipeline.store.database import EmbeddedPostgres
from eval_pipeline.verdict.retrieval import judge_run
from tests.verdict_frames import bench_provenance, scored_frame

TOLERANCES = {"hit@1": 0.05, "mrr": 0.05}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 365])
    parser.add_argument("--variants", type=int, default=10)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print_machine("a gate left not compared, against the history's size")
    variants = [f"v{i}" for i in range(args.variants)]
    frames = {v: scored_frame(v, args.questions * 8 // 10, args.questions) for v in variants}  # 80 % found
    with tempfile.TemporaryDirectory(prefix="recorded_lookup_") as folder:
        pg = EmbeddedPostgres(Path(folder) / "state")
        uri = pg.uri("bench")
        statistics_cache = Path(folder) / "statistics"
        try:
            recorded, rows, record_times = 0, [], []

            def judge(run_id: str, bench: str, record: bool):
                provenance = bench_provenance(bench, {v: f"{v}-{bench}" for v in variants})  # every setting per bench
                return judge_run(frames, baseline=variants[0], provenance=provenance, tolerances=TOLERANCES,
                                 strict=False, run_id=run_id, limited=False, connection_string=uri,
                                 sweep_keys=variants, record=record, statistics_cache=statistics_cache)

            for size in sorted(args.sizes):
                while recorded < size:
                    started = time.perf_counter()
                    judge(f"night-{recorded:04d}", "A", True)
                    record_times.append(time.perf_counter() - started)
                    recorded += 1
                normal, unjudged, lookup = [], [], []
                for round_ in range(args.rounds):
                    started = time.perf_counter()
                    verdict = judge(f"probe-{size}-{round_}", "A", False)
                    normal.append(time.perf_counter() - started)
                    assert all(g.state == "comparable" for g in verdict.gates.values()), verdict.gates
                    started = time.perf_counter()
                    verdict = judge(f"probe-{size}-{round_}", "B", False)
                    unjudged.append(time.perf_counter() - started)
                    assert all(g.state == "not_compared" for g in verdict.gates.values()), verdict.gates
                    started = time.perf_counter()
                    found = [recorded_measurements(uri, variant=v, configuration=None) for v in variants]
                    lookup.append((time.perf_counter() - started) / len(variants))
                returned = found[0]
                size_kb = len(json.dumps(returned)) / 1024
                rows.append([size, len(returned), f"{size_kb:.0f}", f"{statistics.median(record_times[-10:]):.2f}",
                             f"{statistics.median(normal):.2f}", f"{statistics.median(unjudged):.2f}",
                             f"{statistics.median(unjudged) / statistics.median(normal):.2f}",
                             f"{statistics.median(lookup) * 1000:.0f}"])
                print(f"   {size} runs recorded ({load_note()})", flush=True)
        finally:
            pg.stop()
    print_table(rows, ["runs recorded", "rows read per variant", "KiB read per variant", "record a night s",
                       "verdict, comparable s", "verdict, not compared s", "ratio", "lookup ms per variant"])


if __name__ == "__main__":
    main()
