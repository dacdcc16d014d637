"""Peak RSS and wall time of the whole retrieval_eval job as the corpus grows: is the job's memory
flat in the number of documents (the corpus streamed to disk, signed and checked as it is read),
or does it grow with the corpus?

Each size is one child process that runs the whole job in-process (the retrieval_eval job's
`execute_in_process`, every asset and check, on a fresh state dir), so the child's peak RSS
(os.wait4 on it: the child and the processes it waited for) is the job's. The embedded Postgres
server is a daemon outside that tree and is not included; it is stopped after each size.

The job is the demo job reduced to what bench/scale_curve.py measures: one variant (pg-dense,
depth 100), the hashed bag-of-words embedder of bench/common.py (no model time: the figures
measure everything but the model), each document embedded whole (one chunk per document, as
bench/scifact.py does), no golden prompts (no answers). The corpus is a BEIR folder: SciFact
abstracts repeated with new ids past the 5,183 of the corpus (bench/common.py
replicate_documents: each copy its own text), and SciFact's train claims as the questions
(`--queries` of them, through the question set's `limit`), whose gold ids are the originals'.

`--tree` runs the job from another checkout of the project (a worktree of an older commit) with
the same script, so a change can be measured before and after on the same data:

    .venv/bin/python bench/bounded_memory.py                               # 20k, 50k, 100k, 200k
    .venv/bin/python bench/bounded_memory.py --docs 20000,40000 --tree /tmp/base --label before
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import (
    DEFAULT_STATE_ROOT,
    REPO_ROOT,
    SCIFACT_DEFAULT,
    HashEmbedder,
    current_rss_mb,
    load_note,
    print_machine,
    print_table,
)

VARIANTS = "variants:\n  - engine: pg-dense\n    depth: 100\n"


def write_collection(scifact: Path, target: Path, docs: int) -> Path:
    """A BEIR folder of `docs` documents (SciFact repeated with new ids, each copy its own text)
    with SciFact's train queries and qrels; written once per size and reused."""
    folder = target / f"corpus_{docs}"
    if (folder / "corpus.jsonl").exists():
        return folder
    tmp = target / f".corpus_{docs}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "qrels").mkdir(parents=True)
    source = scifact / "corpus.jsonl.gz"
    opener = gzip.open if source.exists() else open
    with opener(source if source.exists() else scifact / "corpus.jsonl", "rt", encoding="utf-8") as fh:
        base = [json.loads(line) for line in fh if line.strip()]
    with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as out:
        for i in range(docs):  # as bench/common.py replicate_documents, without building the documents
            record, k = base[i % len(base)], i // len(base)
            if k:
                record = {**record, "_id": f"{record['_id']}~r{k}", "text": f"{record['text']} (copy {k})"}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    shutil.copyfile(scifact / "queries.jsonl", tmp / "queries.jsonl")
    shutil.copyfile(scifact / "qrels" / "train.tsv", tmp / "qrels" / "train.tsv")
    tmp.rename(folder)
    return folder


def run_config(data: Path, results: Path, queries: int) -> dict:
    return {"ops": {
        "corpus_snapshot": {"config": {"source": "beir", "path": str(data)}},
        "question_set": {"config": {"source": "beir", "path": str(data), "beir_split": "train", "limit": queries}},
        "pgvector_store": {"config": {"split_length": 100000, "split_overlap": 0}},
        "golden_prompts": {"config": {"source": "none"}},
        "report": {"config": {"results_dir": str(results), "record_history": False}},
    }}


def child(args) -> None:
    """The whole job in this process, from `args.tree`, with the hashed embedder."""
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))  # before anything of the project is imported: the tree's code runs
    os.chdir(tree)
    state = Path(args.state)
    os.environ["EVAL_PIPELINE_STATE_DIR"] = str(state)
    os.environ["EVAL_PIPELINE_VARIANTS"] = str(state.parent / "variants.yaml")
    started = time.perf_counter()
    from dagster import DagsterInstance

    import definitions
    import resources

    assert Path(definitions.__file__).resolve().parent == tree, definitions.__file__
    # What EmbedderResource.get() builds for the default local embedder, taken by the hashed one.
    resources._EMBEDDER_CACHE[("local", None, 64, None, hash(None))] = HashEmbedder()
    imported = time.perf_counter()
    samples: list[tuple[float, float]] = []  # (time, RSS MiB) every 0.2 s: which step the peak is in
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.2):
            samples.append((time.time(), current_rss_mb()))

    threading.Thread(target=sample, daemon=True).start()
    instance = DagsterInstance.ephemeral()
    result = definitions.defs.resolve_job_def("retrieval_eval").execute_in_process(
        run_config=run_config(Path(args.data), state.parent / "results", args.queries),
        instance=instance, raise_on_error=False)
    sampling.set()
    done = time.perf_counter()
    steps = {e.step_key: e.event_specific_data.duration_ms / 1000 if hasattr(e.event_specific_data, "duration_ms")
             else None for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
    logs = [entry for entry in instance.all_logs(result.run_id) if entry.dagster_event is not None]
    started_at = {e.step_key: e.timestamp for e in logs if e.dagster_event.event_type_value == "STEP_START"}
    ended_at = {e.step_key: e.timestamp for e in logs if e.dagster_event.event_type_value == "STEP_SUCCESS"}
    step_rss = {key: max((rss for t, rss in samples if started_at[key] <= t <= ended_at[key] + 0.2), default=None)
                for key in sorted(ended_at, key=lambda k: started_at.get(k, 0.0)) if key in started_at}
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    reports = sorted((state.parent / "results").glob("results*.md"))  # a limited run suffixes its name
    print("RESULT " + json.dumps({
        "imports_s": imported - started, "job_s": done - imported, "success": result.success,
        "failed_steps": failed, "report_written": bool(reports), "steps": steps, "step_rss_mb": step_rss,
        "rss_after_imports_mb": samples[0][1] if samples else None,
        "code": str(Path(definitions.__file__).resolve().parent)}), flush=True)


def measure(tree: Path, data: Path, state: Path, queries: int, log: Path) -> dict:
    """One size: the child's wall time and peak RSS (os.wait4), then its Postgres stopped."""
    started = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", "--tree", str(tree),
                                 "--data", str(data), "--state", str(state), "--queries", str(queries)],
                                cwd=REPO_ROOT / "bench", stdout=subprocess.PIPE, stderr=err, text=True)
        out = proc.stdout.read() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    subprocess.run([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)],
                   cwd=REPO_ROOT, capture_output=True)
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the job child failed (exit {os.waitstatus_to_exitcode(status)}); log {log}:\n"
                         + log.read_text()[-3000:])
    return {**json.loads(line[7:]), "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024.0,
            "load_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", default="20000,50000,100000,200000", help="comma-separated corpus sizes")
    parser.add_argument("--queries", type=int, default=200, help="SciFact train claims asked (question_set limit)")
    parser.add_argument("--tree", default=str(REPO_ROOT), help="the checkout whose job runs (default: this one)")
    parser.add_argument("--label", default="this checkout", help="what the table calls --tree")
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="SciFact's BEIR folder")
    parser.add_argument("--root", default=str(DEFAULT_STATE_ROOT / "bounded_memory"),
                        help="corpora (kept) and one fresh state dir per size (deleted first)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    print_machine(f"the whole job's peak RSS by corpus size ({args.label}: {args.tree}; hashed embedder)")
    root = Path(args.root).resolve()
    tree = Path(args.tree).resolve()
    rows = []
    for docs in [int(s) for s in args.docs.split(",") if s.strip()]:
        data = write_collection(Path(args.path), root / "data", docs)
        run_dir = root / "runs" / f"{tree.name}-{docs}"
        if run_dir.exists():
            subprocess.run([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir",
                            str(run_dir / "state")], cwd=REPO_ROOT, capture_output=True)
            shutil.rmtree(run_dir)
        (run_dir / "state").mkdir(parents=True)
        (run_dir / "variants.yaml").write_text(VARIANTS)
        load_before = os.getloadavg()[0]
        row = {"docs": docs, "label": args.label, "load_before": load_before,
               **measure(tree, data, run_dir / "state", args.queries, run_dir / "job.log")}
        rows.append(row)
        print(f"{docs:,} docs: peak RSS {row['peak_rss_mb']:.0f} MiB, wall {row['wall_s']:.1f} s (job "
              f"{row['job_s']:.1f} s), report written {row['report_written']}, failed steps {row['failed_steps']}; "
              f"load {load_before:.2f} -> {row['load_after']:.2f}; RSS after imports "
              f"{row.get('rss_after_imports_mb') or float('nan'):.0f} MiB; RSS by step, in order: "
              + ", ".join(f"{key} {rss:.0f}" for key, rss in row["step_rss_mb"].items() if rss is not None),
              flush=True)
    print()
    print_table([[r["docs"], r["peak_rss_mb"], r["wall_s"], r["job_s"], r["steps"].get("corpus_snapshot"),
                  r["load_before"], r["load_after"]] for r in rows],
                ["docs", "peak RSS MiB", "wall s", "job s", "corpus_snapshot s", "load before", "load after"], digits=1)
    if len(rows) > 1:
        print(f"\npeak RSS {rows[-1]['docs']:,} / {rows[0]['docs']:,} docs: "
              f"{rows[-1]['peak_rss_mb'] / rows[0]['peak_rss_mb']:.3f}")
    print(load_note())
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
