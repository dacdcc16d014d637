"""What a verdict's history lookups cost against a database across a network.

A team's nightly run records into a hosted Postgres (a URL), where every statement the verdict
sends is a network round trip: a verdict's time there is about its statements times the round
trip. This records a synthetic nightly history (``--variants`` variants, ``--questions``
questions, one deterministic answer grader, ``--nights`` runs judged and recorded as the verdict
and report assets do) in a fresh embedded Postgres, then times one more verdict (retrieval and
answers, nothing recorded) directly on the server's socket and through a proxy on 127.0.0.1 that
delays every packet by half of each ``--rtt-ms`` (a network's round trip), alternated
``--rounds`` times, and counts the statements it sends.

    .venv/bin/python bench/history_latency.py [--rtt-ms 0 2 10] [--variants 10] [--nights 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import load_note, print_machine, print_table

from eval_pipeline.store.database import EmbeddedPostgres
from eval_pipeline.verdict.answers import record_answers
from eval_pipeline.verdict.retrieval import judge_run, record_verdict
from eval_pipeline.verdict.run import complete_verdict
from tests.db_wire import SocketProxy, sent_statements, unix_socket_of
from tests.verdict_frames import answer_frame_with, bench_provenance, scored_frame

TOLERANCES = {"hit@1": 0.05, "mrr": 0.05}
ANSWER_TOLERANCES = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 2.0, 10.0])
    parser.add_argument("--variants", type=int, default=10)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--nights", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print_machine("a verdict's history lookups across a network")
    variants = [f"v{i}" for i in range(args.variants)]
    frames = {v: scored_frame(v, args.questions * 8 // 10, args.questions) for v in variants}  # 80 % found
    answers = {v: answer_frame_with(v, 0.8, yardstick="deterministic:v1") for v in variants}
    with tempfile.TemporaryDirectory(prefix="history_latency_") as folder:
        pg = EmbeddedPostgres(Path(folder) / "state")
        local = pg.uri("bench")
        statistics_cache = Path(folder) / "statistics"
        proxies = {rtt: SocketProxy(unix_socket_of(local), one_way=rtt / 2000) for rtt in args.rtt_ms if rtt > 0}
        uris = {rtt: local if rtt <= 0 else proxies[rtt].uri(local) for rtt in args.rtt_ms}
        try:
            def verdict(uri: str, run_id: str, record: bool):
                provenance = bench_provenance("A", {v: f"{v}-A" for v in variants})
                judged = judge_run(frames, baseline=variants[0], provenance=provenance, tolerances=TOLERANCES,
                                   strict=False, run_id=run_id, limited=False, connection_string=uri,
                                   sweep_keys=variants, record=False, statistics_cache=statistics_cache)
                complete_verdict(judged, answers, run_id=run_id, record_history=True, order=variants,
                                 corpus_signature="corpus-1", answer_tolerances=ANSWER_TOLERANCES,
                                 connection_string=uri)
                if record:  # as the report asset does
                    record_verdict(judged, uri, run_id=run_id, per_variant=frames)
                    record_answers(judged.answers, uri, run_id, run_eligible=judged.eligible)
                return judged

            for night in range(args.nights):
                verdict(local, f"night-{night:03d}", True)
            seconds: dict[float, list[float]] = {rtt: [] for rtt in args.rtt_ms}
            sent: dict[float, int] = {}
            for round_ in range(args.rounds):
                for rtt in args.rtt_ms:
                    with sent_statements() as statements:
                        started = time.perf_counter()
                        judged = verdict(uris[rtt], f"probe-{round_}", False)
                        seconds[rtt].append(time.perf_counter() - started)
                    sent[rtt] = len(statements)
                    assert all(g.state == "comparable" and g.passed for g in judged.gates.values()), judged.gates
                print(f"   round {round_ + 1} ({load_note()})", flush=True)
        finally:
            for proxy in proxies.values():
                proxy.close()
            pg.stop()
    base = statistics.median(seconds[min(args.rtt_ms)])
    rows = [[f"{rtt:g}", sent[rtt], f"{statistics.median(seconds[rtt]):.2f}",
             f"{(statistics.median(seconds[rtt]) - base) / (rtt / 1000):.0f}" if rtt > min(args.rtt_ms) else "–"]
            for rtt in args.rtt_ms]
    # the last column: how many round trips the verdict waited for (its statements, each lookup's BEGIN
    # and COMMIT, the connections' handshakes), from the time the delay added
    print_table(rows, ["round trip ms", "statements per verdict", "verdict s (median)", "round trips waited"])

if __name__ == "__main__":
    main()
