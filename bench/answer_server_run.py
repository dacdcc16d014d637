"""Answer quality with an LLM, end to end: the demo job (`dagster job execute`) with the `llm`
generator and all four graders, against the local OpenAI-compatible test server, through the
real `openai` client. Prints the wall time of a cold run and of a warm re-run (every answer
and grade cached: no request), the steps' times, the requests by kind, and per variant the
pass rates, tokens and cost (from an illustrative price table in a variants file of its own).

The server's "model" is deterministic and honest about what it does: it answers with the
first sentence of document [1] and cites it; the judge scores 4/4/4 when the answer cites a
document it was given (citations 2 otherwise); the decision is level 4 for a non-empty
answer. So the figures measure the pipeline's cost and time, not a model's quality.

    .venv/bin/python bench/answer_server_run.py [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DEFAULT_STATE_ROOT, REPO_ROOT, machine_info, results_beside  # noqa: E402
from tests.openai_stub import OpenAIStub  # noqa: E402

PRICES = {"prompt_per_1k": 0.00015, "completion_per_1k": 0.0006}  # illustrative, per 1,000 tokens
MODEL = "bench-model"


def chat(body: dict) -> str:
    messages = body.get("messages") or []
    system = messages[0]["content"] if messages else ""
    user = messages[-1]["content"] if messages else ""
    if system.startswith("You answer a question from numbered documents"):
        first = re.search(r"\[1\] (.+?[.!?])(\s|$)", user, re.S)
        return f"{first.group(1).strip()} [1]" if first else "I cannot answer this from the documents."
    if system.startswith("You grade an answer"):
        cites = bool(re.search(r"<answer>.*\[\d+\].*</answer>", user, re.S))
        return json.dumps({"faithfulness": 4, "relevance": 4, "citations": 4 if cites else 2, "reason": "scripted"})
    if system.startswith("You judge how well an answer fulfils its task"):
        empty = re.search(r"<answer>\s*</answer>", user) is not None
        return json.dumps({"level": 1 if empty else 4, "reason": "scripted"})
    return "unexpected request"


def kind_of(request: dict) -> str:
    system = ((request.get("body") or {}).get("messages") or [{}])[0].get("content", "")
    return {"You answer": "answer", "You grade": "judge", "You judge": "decision"}.get(system[:10].strip(), "other")


def run_job(env: dict, config: Path, log: Path) -> float:
    started = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.call([str(REPO_ROOT / ".venv" / "bin" / "dagster"), "job", "execute", "-m", "definitions",
                                "-j", "retrieval_eval", "-c", str(config)], cwd=REPO_ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the job failed (exit {code}); see {log}")
    return seconds


def step_seconds(log: Path) -> dict[str, str]:
    found = re.findall(r'Finished execution of step "(answers|graded_answers|report)" in ([0-9.]+m?s?[0-9.]*s?)',
                       log.read_text())
    return dict(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "answer_server_run"))
    args = parser.parse_args()
    state = Path(args.state_dir)
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    variants = state / "variants.yaml"
    text = (REPO_ROOT / "variants.yaml").read_text()
    variants.write_text(text.replace("answers:\n", f"answers:\n  prices: {{{MODEL}: {json.dumps(PRICES)}}}\n", 1))
    config = state / "run.yaml"
    config.write_text(json.dumps({"ops": {
        "answers": {"config": {"generator": "llm"}},
        # one stub model writes and judges: allowed and labelled self-judged (the bench times and
        # prices the calls; it measures no judge's independence)
        "graded_answers": {"config": {"graders": ["deterministic", "static", "judge", "decision"],
                                      "allow_self_judging": True}},
        "report": {"config": {"results_dir": str(results_beside(state))}}}}))
    print(machine_info())
    with OpenAIStub(chat=chat) as stub:
        env = dict(os.environ, DAGSTER_HOME=str(REPO_ROOT), EVAL_PIPELINE_STATE_DIR=str(state),
                   EVAL_PIPELINE_ARTIFACTS_DIR=str(state / "dagster"),
                   EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(state / "dagster" / "logs"), EVAL_PIPELINE_VARIANTS=str(variants),
                   OPENAI_BASE_URL=stub.base_url, EVAL_PIPELINE_LLM_MODEL=MODEL, OPENAI_API_KEY="sk-bench",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        env["EVAL_PIPELINE_DAGSTER_PG_URL"] = subprocess.check_output(
            [sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir", str(state), "--database",
             "dagster", "--driver", "psycopg2"], env=env, text=True).strip()
        try:
            for attempt in ("cold", "warm"):
                before = len(stub.requests)
                seconds = run_job(env, config, state / f"{attempt}.log")
                kinds: dict[str, list[int]] = {}
                for r in stub.requests[before:]:
                    words = sum(len(str(m.get("content", "")).split()) for m in r["body"].get("messages") or [])
                    kinds.setdefault(kind_of(r), []).append(words)
                print(f"{attempt}: job {seconds:.1f} s, steps {step_seconds(state / f'{attempt}.log')}")
                for kind, prompts in kinds.items():
                    cost = sum(prompts) * PRICES["prompt_per_1k"] / 1000.0
                    print(f"  {kind}: {len(prompts)} requests, {sum(prompts)} prompt tokens (server's count), "
                          f"prompt cost {cost:.4f} at the illustrative price")
                if not kinds:
                    print("  no request")
        finally:
            subprocess.call([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)],
                            env=env)
    _print_metrics(state)


def _print_metrics(state: Path) -> None:
    import pandas as pd

    print("\nvariant | grader | n | pass rate | mean score | tokens | cost (illustrative prices)")
    for folder in sorted((state / "variants" / "answer_metrics").iterdir()):
        newest = max(folder.glob("*.parquet"), key=lambda p: p.stat().st_mtime)
        for row in pd.read_parquet(newest).itertuples():
            metrics = json.loads(row.metrics_json)
            print(f"{row.variant} | {row.grader} | {row.n_scored} | {row.pass_rate:.3f} | {row.mean_score:.3f} | "
                  f"{metrics['tokens']['tokens_total']} | {metrics['cost']['cost_total']:.5f}")


if __name__ == "__main__":
    main()
