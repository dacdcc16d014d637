"""The whole retrieval_eval job, cold on a fresh state dir, then again with nothing changed.

Each run is what `make demo` does: `python -m eval_pipeline.store.database url ...` (start or attach to
the embedded Postgres, export its URL), then `dagster job execute -m definitions -j retrieval_eval`
in a subprocess, with the environment of the Makefile's DAGSTER_ENV pointed at the bench state
dir.  The only difference from `make demo` is a run config that sends the report to
<state-dir>-results instead of the repo's results/ (so the bench never overwrites it).

Prints both wall times, the ratio warm/cold (goal <= 0.10) and, for each run, where the time went
(and how many connections Dagster's storage opened, with what one costs on this machine):
process start + imports + Dagster setup before the first step, each step's duration (parsed from
Dagster's STEP_SUCCESS log lines), and the tail after the last step.

    .venv/bin/python bench/warm_rerun.py            # fresh /tmp/eval-pipeline-bench/warm_rerun
    .venv/bin/python bench/warm_rerun.py --runs 3   # cold + 2 warm
    .venv/bin/python bench/warm_rerun.py --beir ../shared/datasets/scifact --split train
                                                    # the same on a BEIR collection, each document
                                                    # embedded whole (as bench/scifact.py does)
    .venv/bin/python bench/warm_rerun.py --runs 3 --cprofile /tmp/warm.prof
                                                    # the last warm run under cProfile (slower: its
                                                    # seconds are not the warm figure), then the
                                                    # slowest of our functions in it and the run
                                                    # split into ours and Dagster's

Run it from a clean checkout at a commit (a clone of its own, when others edit this one): with
uncommitted changes the code version is `-dirty` (outside a checkout `unknown`) and no ranked
result is cached, so every "warm" run ranks again (it says so before the first run); an edit
landing in the checkout during a run also makes that run's identities its own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from common import (
    DEFAULT_STATE_ROOT,
    REPO_ROOT,
    load_note,
    peak_rss_children_mb,
    print_machine,
    print_table,
    results_beside,
)

BIN = REPO_ROOT / ".venv" / "bin"
STEP_DONE = re.compile(r'^(\S+ \S+ [+-]\d{4}) - dagster - \w+ - \S+ - \S+ - \d+ - (\S+) - STEP_SUCCESS - '
                       r'Finished execution of step "([^"]+)" in ([\d.]+)(ms|s|m)')
STEP_START = re.compile(r'^(\S+ \S+ [+-]\d{4}) - dagster - \w+ - \S+ - \S+ - \d+ - (\S+) - STEP_START')
RUN_START = re.compile(r'^(\S+ \S+ [+-]\d{4}) - dagster - \w+ - \S+ - \S+ - \d+ - RUN_START')


def dagster_env(state_dir: Path) -> dict[str, str]:
    """The Makefile's DAGSTER_ENV, for `state_dir`."""
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(REPO_ROOT),
        EVAL_PIPELINE_STATE_DIR=str(state_dir),
        EVAL_PIPELINE_ARTIFACTS_DIR=str(state_dir / "dagster"),
        EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(state_dir / "dagster" / "logs"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return env


def _ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S %z").timestamp()


def _seconds(value: str, unit: str) -> float:
    return float(value) / 1000 if unit == "ms" else float(value) * (60 if unit == "m" else 1)


def dagster_database_url(state_dir: Path, env: dict[str, str]) -> str:
    """What `make demo` does first: start (or attach to) the state dir's Postgres, in a subprocess,
    and return the URL of Dagster's run storage database."""
    return subprocess.run(
        [str(BIN / "python"), "-m", "eval_pipeline.store.database", "url", "--state-dir", str(state_dir),
         "--database", "dagster", "--driver", "psycopg2", "--pooled"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()


def stop_database(state_dir: Path) -> None:
    subprocess.run([str(BIN / "python"), "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state_dir)],
                   cwd=REPO_ROOT, check=False)


def cacheable_checkout() -> str | None:
    """Why this checkout's ranked results are not cached (a `-dirty` or `unknown` code version:
    eval_pipeline.verdict.retrieval.checkout_version), else None."""
    from eval_pipeline.verdict.retrieval import checkout_version

    version = checkout_version(REPO_ROOT)
    if version == "unknown":
        return "not a git checkout"
    return "uncommitted changes under the code paths" if version.endswith("-dirty") else None


def _without_plugin(url: str) -> str:
    """Dagster's URL as `make demo` makes it, without the pool plugin it names (libpq does not know
    the parameter, and connect_cost_ms measures NullPool itself): SQLAlchemy's own way to drop it."""
    from sqlalchemy.engine import make_url

    return make_url(url).difference_update_query(["plugin"]).render_as_string(hide_password=False)


def dagster_sessions(url: str) -> int:
    """How many connections Postgres has accepted into Dagster's database so far
    (pg_stat_database.sessions): read before and after a run, the run's count."""
    import psycopg

    libpq_url = _without_plugin(url).replace("postgresql+psycopg2://", "postgresql://")
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def connect_cost_ms(url: str, n: int = 200) -> tuple[float, float]:
    """Milliseconds per `connect, SELECT 1, close` as Dagster's Postgres storage does it (a new
    connection each time: its engines use SQLAlchemy's NullPool outside the webserver), and
    per the same from a pool of one connection."""
    import sqlalchemy as sa
    from sqlalchemy import pool

    out = []
    for poolclass, extra in ((pool.NullPool, {}), (pool.QueuePool, {"pool_size": 1})):
        engine = sa.create_engine(_without_plugin(url), isolation_level="AUTOCOMMIT", poolclass=poolclass, **extra)
        started = time.perf_counter()
        for _ in range(n):
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        out.append((time.perf_counter() - started) / n * 1000)
        engine.dispose()
    return out[0], out[1]


def script_interpreter(script: Path) -> str:
    """The interpreter a console script's shebang names: the profiled run must be that one, not
    `.venv/bin/python` by another path. A clone whose `.venv` links to another checkout's venv runs
    `dagster` under the venv's own path, and Python names its installed files (`sys.prefix`) by the
    path it was started from: profiled from the clone's path, every installed file was new to the
    digest cache (keyed by path) and was hashed again, about 6 profiled seconds no unprofiled run
    spends."""
    first = script.read_text(errors="replace").split("\n", 1)[0]
    return first[2:].strip() if first.startswith("#!") and " " not in first[2:].strip() else str(BIN / "python")


def run_once(state_dir: Path, config_path: Path, log_path: Path, cprofile: str | None = None) -> dict:
    env = dagster_env(state_dir)
    started = time.perf_counter()
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = dagster_database_url(state_dir, env)
    url_seconds = time.perf_counter() - started
    sessions_before = dagster_sessions(env["EVAL_PIPELINE_DAGSTER_PG_URL"])
    wall_start = time.time()
    job_started = time.perf_counter()
    profiled = [script_interpreter(BIN / "dagster"), "-m", "cProfile", "-o", cprofile] if cprofile else []
    proc = subprocess.run(
        [*profiled, str(BIN / "dagster"), "job", "execute", "-m", "definitions", "-j", "retrieval_eval",
         "-c", str(config_path)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True,
    )
    job_seconds = time.perf_counter() - job_started
    wall_end = time.time()
    connections = dagster_sessions(env["EVAL_PIPELINE_DAGSTER_PG_URL"]) - sessions_before - 1  # less our own read
    log = proc.stdout + proc.stderr
    log_path.write_text(log)
    if proc.returncode != 0:
        raise SystemExit(f"dagster job failed (exit {proc.returncode}); log: {log_path}\n{log[-3000:]}")
    steps, first_start, last_end, run_start = [], None, None, None
    for line in log.splitlines():
        if m := STEP_DONE.match(line):
            seconds = _seconds(m.group(4), m.group(5))
            steps.append((m.group(3), seconds))
            last_end = _ts(m.group(1))
        elif m := STEP_START.match(line):
            first_start = first_start or _ts(m.group(1))
        elif m := RUN_START.match(line):
            run_start = _ts(m.group(1))
    # Dagster's log timestamps have 1 s resolution: the split around the steps is approximate.
    step_total = sum(s for _, s in steps)
    before = (first_start - wall_start) if first_start else float("nan")
    return {
        "url_seconds": url_seconds, "job_seconds": job_seconds, "total_seconds": url_seconds + job_seconds,
        "steps": steps, "step_total": step_total, "before_first_step": before,
        "run_start_offset": (run_start - wall_start) if run_start else float("nan"),
        "after_last_step": (wall_end - last_end) if last_end else float("nan"),
        "log": str(log_path), "dagster_connections": connections, "dagster_url": env["EVAL_PIPELINE_DAGSTER_PG_URL"],
    }


def profile_sweep(state_dir: Path) -> None:
    """What the warm ranked_results step does, in this process, timed by part: the same demo
    corpus, question set, table (reused), cached query embeddings, variants and rerankers."""
    import sys

    sys.path.insert(0, str(REPO_ROOT))
    os.environ.update(dagster_env(state_dir))
    from assets import DEMO_QUESTIONS
    from eval_pipeline.config.sweep import load_sweep
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.questions.sets import load_question_set
    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.ranking.sweep import Sweep
    from eval_pipeline.store.database import EmbeddedPostgres
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest
    from resources import LLMResource, RerankerResource

    timings: list[tuple[str, float]] = []

    def step(label, fn):
        started = time.perf_counter()
        value = fn()
        timings.append((label, time.perf_counter() - started))
        return value

    uri = step("attach Postgres", lambda: EmbeddedPostgres(state_dir).uri("eval"))
    snapshot = step("load demo corpus", lambda: load_corpus("demo"))
    qs = step("load question set", lambda: load_question_set(
        DEMO_QUESTIONS, corpus_signature=snapshot.signature, doc_ids=[d.doc_id for d in snapshot.documents]))
    embedder = LocalEmbedder()
    info = step("ingest (reused: manifest check)", lambda: ingest(
        snapshot, connection_string=uri, embedder=embedder, chunking=ChunkingConfig(), log=lambda m: None))
    config = load_sweep(REPO_ROOT / "variants.yaml")
    rerankers = RerankerResource(llm=LLMResource())
    built = step("build rerankers", lambda: {v.key: rerankers.build(v.reranker, embedder=embedder)
                                             for v in config.variants if v.reranker.kind != "none"})
    embeddings, _, cached = step("query embeddings (cache)", lambda: QueryEmbeddingCache(
        state_dir / "query_embeddings").get_or_compute(embedder, qs.questions))
    sweep = Sweep(snapshot=snapshot, connection_string=uri, table=info.table, query_embeddings=embeddings,
                  embed_ms_per_query=0.0, rerankers=built)
    for v in config.variants:
        step(f"sweep variant {v.key}", lambda v=v: sweep.run_variant(v, qs.questions))
    print(f"\n== in-process replay of the warm ranked_results ({len(qs.questions)} questions, "
          f"{info.chunk_count} chunks, query embeddings {'cached' if cached else 'computed'}):")
    print_table([[label, seconds] for label, seconds in timings], ["part", "seconds"], digits=2)
    leg_ms: dict[str, float] = {}
    for (leg, *_), value in sweep._leg_cache.items():  # (leg, top_k, settings, qid)
        leg_ms[leg] = leg_ms.get(leg, 0.0) + value.ms
    print("legs (each queried once per question, shared by the variants): "
          + ", ".join(f"{leg} {ms / 1000:.2f} s" for leg, ms in leg_ms.items())
          + f"; queries by stage {sweep.queries_by_stage}")


def print_profile(path: str, top: int = 25) -> None:
    """The slowest functions of the project's own code in a cProfile of a run (cumulative
    seconds: a step's asset function includes what it calls), then Dagster's event storage and
    IO managers, for where a warm run's step time goes."""
    import pstats

    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    ours = [(v[3], f"{Path(k[0]).relative_to(REPO_ROOT)}:{k[1]}({k[2]})") for k, v in stats.items()
            if k[0].startswith(str(REPO_ROOT)) and "/.venv/" not in k[0] and not k[2].startswith("<")]
    print(f"\n== cProfile of the last run ({path}): our slowest functions, cumulative seconds (profiled: ~2x slower)")
    rows = [[name, seconds] for seconds, name in sorted(ours, reverse=True)[:top]]
    print_table(rows, ["function", "seconds"], digits=2)
    dagster = [(v[3], k[2]) for k, v in stats.items() if "/dagster" in k[0]
               and k[2] in ("store_event", "_store_output", "_load_input_with_input_manager")]
    print("Dagster: " + ", ".join(f"{name} {seconds:.2f} s" for seconds, name in sorted(dagster, reverse=True)))
    print_split(stats)


def print_split(stats: dict) -> None:
    """The run's profiled seconds split into what is ours and what is not: the steps' bodies
    (Dagster's `invoke_compute_fn`: the asset and op functions, everything they call), our IO
    managers' reads and writes, importing `definitions` (Dagster's and pandas' own imports
    included), and the rest: Dagster's events and step machinery, the run's start and end,
    Python's. If every line of ours took no time, the run would keep the rest."""
    total = max(v[3] for v in stats.values())

    def cumulative(name: str, where: str) -> float:
        return sum(v[3] for k, v in stats.items() if k[2] == name and where in k[0])

    parts = [("our steps' bodies (invoke_compute_fn)", cumulative("invoke_compute_fn", "/dagster/")),
             ("our IO managers (resources/io.py)",
              cumulative("handle_output", "resources/io.py") + cumulative("load_input", "resources/io.py")),
             ("importing definitions (Dagster's and pandas' imports too)", cumulative("<module>", "definitions.py"))]
    rest = total - sum(seconds for _, seconds in parts)
    parts.append(("the rest: Dagster's events and machinery, the run's start and end", rest))
    print(f"\n== where the profiled run's {total:.1f} s went")
    print_table([[name, seconds, f"{100 * seconds / total:.0f} %"] for name, seconds in parts],
                ["part", "seconds", "share"], digits=2)


def run_config(state_dir: Path, beir: str | None, split: str) -> str:
    """The job's run config: the report goes beside the state dir; with `beir`, the collection's corpus
    and judged queries, each document embedded whole (one chunk per document)."""
    text = f"ops:\n  report:\n    config:\n      results_dir: {results_beside(state_dir)}\n"
    if beir:
        folder = Path(beir).resolve()
        text += (f"  corpus_snapshot:\n    config:\n      source: beir\n      path: {folder}\n"
                 f"  question_set:\n    config:\n      source: beir\n      path: {folder}\n      beir_split: {split}\n"
                 "  pgvector_store:\n    config:\n      split_length: 100000\n      split_overlap: 0\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "warm_rerun"),
                        help="bench state dir; deleted first (a cold run needs a fresh one) unless --reuse")
    parser.add_argument("--reuse", action="store_true", help="do not delete the state dir first (no cold run)")
    parser.add_argument("--runs", type=int, default=2, help="1 cold + (runs - 1) warm (default 2)")
    parser.add_argument("--beir", help="run on this BEIR collection (corpus and judged queries) instead of the demo")
    parser.add_argument("--split", default="test", help="the BEIR qrels split (default test)")
    parser.add_argument("--keep-db", action="store_true", help="leave the embedded Postgres running at exit")
    parser.add_argument("--profile", action="store_true",
                        help="after the runs, replay the warm ranked_results step in-process, timed by part")
    parser.add_argument("--profile-only", action="store_true", help="only the replay, on an existing state dir")
    parser.add_argument("--cprofile", metavar="FILE",
                        help="run the last run under cProfile into FILE and print our slowest functions in it")
    args = parser.parse_args()
    if args.profile_only:
        try:
            profile_sweep(Path(args.state_dir).resolve())
        finally:
            if not args.keep_db:
                stop_database(Path(args.state_dir).resolve())
        return

    print_machine("retrieval_eval job: cold, then warm (nothing changed)"
                  + (f" on {args.beir} ({args.split})" if args.beir else " on the demo corpus"))
    uncached = cacheable_checkout()
    if uncached:
        print(f"WARNING: {uncached}: the code version is not clean, no ranked result is cached and every run "
              "ranks again (run from a clean checkout at a commit)")
    state_dir = Path(args.state_dir).resolve()
    if state_dir.exists() and not args.reuse:
        stop_database(state_dir)
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    config_path = state_dir / "run_config.yaml"
    config_path.write_text(run_config(state_dir, args.beir, args.split))
    results, connect_ms = [], None
    try:
        for i in range(args.runs):
            label = "cold" if i == 0 and not args.reuse else f"warm{'' if args.runs <= 2 else ' ' + str(i)}"
            profiled = args.cprofile if args.cprofile and i == args.runs - 1 else None
            r = run_once(state_dir, config_path, state_dir / f"run{i}.log", cprofile=profiled)
            r["label"] = label
            results.append(r)
            print(f"{label}{' (under cProfile)' if profiled else ''}: url {r['url_seconds']:.1f} s + job "
                  f"{r['job_seconds']:.1f} s = {r['total_seconds']:.1f} s (log {r['log']}; {load_note()})")
        # what one of Dagster's connections costs, on the server the runs used (before it stops)
        connect_ms = connect_cost_ms(results[-1]["dagster_url"]) if results else None
        if args.profile:
            profile_sweep(state_dir)
    finally:
        if not args.keep_db:
            stop_database(state_dir)

    print()
    step_names = [name for name, _ in results[0]["steps"]]
    rows = [["database url (start/attach Postgres)", *[r["url_seconds"] for r in results]],
            ["job: process start, imports, Dagster setup (to first step)", *[r["before_first_step"] for r in results]]]
    for name in step_names:
        rows.append([f"  step {name}", *[dict(r["steps"]).get(name, float("nan")) for r in results]])
    rows.append(["job: after last step (run end, exit)", *[r["after_last_step"] for r in results]])
    rows.append(["TOTAL wall", *[r["total_seconds"] for r in results]])
    rows.append(["connections to Dagster's database (count)", *[r["dagster_connections"] for r in results]])
    print_table(rows, ["seconds", *[r["label"] for r in results]], digits=2)
    cold, warm = results[0], results[-1]
    if len(results) > 1 and not args.reuse:
        ratio = warm["total_seconds"] / cold["total_seconds"]
        print(f"\nwarm / cold = {warm['total_seconds']:.1f} / {cold['total_seconds']:.1f} = {ratio:.3f} "
              f"(goal <= 0.10: {'met' if ratio <= 0.10 else 'missed'})")
        fixed = warm["url_seconds"] + warm["before_first_step"] + warm["after_last_step"]
        print(f"warm run: {fixed:.1f} s outside the steps (process start, imports, Dagster), "
              f"{warm['step_total']:.1f} s in steps; slowest warm steps: "
              + ", ".join(f"{n} {s:.1f} s" for n, s in sorted(warm["steps"], key=lambda x: -x[1])[:3]))
    if connect_ms:
        new_ms, pooled_ms = connect_ms
        print(f"Dagster's storage opened {warm['dagster_connections']} connections in the last run; one costs "
              f"{new_ms:.2f} ms here ({pooled_ms:.2f} ms from a pool): about "
              f"{warm['dagster_connections'] * (new_ms - pooled_ms) / 1000:.1f} s of that run")
    if args.cprofile:
        print_profile(args.cprofile)
    print(f"peak RSS of the largest child (dagster job) {peak_rss_children_mb():.0f} MiB")
    print("Dagster log timestamps have 1 s resolution: the 'to first step' and 'after last step' rows are +-1 s.")


if __name__ == "__main__":
    main()
