"""Repair and grounding of an LLM generator's answers on the demo, against the OpenAI-compatible
test server through the real `openai` client (no model, no network).

Needs the state dir `bench/judge_grounding_demo.py` left (its answers give each variant's
contexts of the 89 demo golden prompts, its Postgres the keyword index). The server's "model" is
scripted and honest about it: it answers with the first sentence of document [1], cited; for a
prompt that asks for code it writes a block importing an off-family package without naming the
required symbol (a static-check failure), and in one prompt of three it names an invented API
(`brackenfield.sync_ledger()`, in no document). Asked to repair, it writes the block with an
allowed import and names the symbol. Prints per variant the static pass rate before and after
repair, the repairs asked and kept, their tokens and cost (illustrative price), and the
grounding numbers with the corpus probe, then the hallucination log's counts.

    .venv/bin/python bench/judge_repair_demo.py [--state-dir DIR] [--variants bm25,hybrid,pg-dense]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DEFAULT_STATE_ROOT, machine_info  # noqa: E402
from tests.openai_stub import OpenAIStub  # noqa: E402

PRICE = {"prompt_per_1k": 0.00015, "completion_per_1k": 0.0006}  # illustrative, per 1,000 tokens


def chat(body: dict) -> str:
    user = body["messages"][-1]["content"]
    question = user.split("\nQuestion: ", 1)[1].split("\n\nYour previous answer", 1)[0] if "\nQuestion: " in user \
        else ""
    first = re.search(r"\[1\] (.+?[.!?])(\s|$)", user, re.S)
    text = f"{first.group(1).strip()} [1]" if first else "I cannot answer this from the documents."
    if int(hashlib.sha256(question.encode()).hexdigest(), 16) % 3 == 0:
        text += " Then call `brackenfield.sync_ledger()` to finish."
    if re.search(r"\b(function|python|code|script)\b", question, re.I):
        if "It failed these checks:" in user:
            wanted = re.findall(r"'([A-Za-z_][\w.]*)' is not mentioned", user)
            allowed = "math"
            text += " " + " ".join(f"`{w}`" for w in wanted) + f"\n```python\nimport {allowed}\n```"
        else:
            text += "\n```python\nimport requests_toolbelt\n```"
    return text


def newest(folder: Path):
    import pandas as pd

    return pd.read_parquet(max(folder.glob("*.parquet"), key=lambda p: p.stat().st_mtime))


def main() -> None:
    from eval_pipeline.answering.cache import AnswerCache
    from eval_pipeline.answering.llm import LLMGenerator
    from eval_pipeline.answering.prompts import DEMO_GOLDEN, resolve_golden
    from eval_pipeline.answering.repair import repair_answers, repair_summary
    from eval_pipeline.answering.run import answer_variants, context_from_record
    from eval_pipeline.common.llm import LLMClient
    from eval_pipeline.grading.grounding import KeywordCorpusProbe, ground_answer, grounding_rates
    from eval_pipeline.grading.run import static_failures

    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "judge_grounding_demo" / "state"))
    parser.add_argument("--variants", default="bm25,hybrid,pg-dense")
    args = parser.parse_args()
    state = Path(args.state_dir)
    print(machine_info())
    url = subprocess.check_output([sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir",
                                   str(state), "--database", "eval"], text=True).strip()
    extractive_cache = AnswerCache(state / "answers")
    frames, texts, tables = {}, {}, {}
    for variant in args.variants.split(","):
        answers = newest(state / "variants" / "answers" / variant)
        tables[variant] = answers["store_table"].iloc[0]
        signature = answers["corpus_signature"].iloc[0]
        for a in answers.itertuples():
            record = extractive_cache.get(a.answer_key) if not isinstance(a.error, str) else None
            for e in context_from_record(record) if record else ():
                texts[e.chunk_id] = e.text
        frames[variant] = answers.rename(columns={"prompt_id": "qid", "context_chunk_ids": "chunk_ids",
                                                  "context_doc_ids": "doc_ids", "retrieval_ms": "latency_ms"})
    doc_ids = sorted({d for f in frames.values() for ids in f["doc_ids"] for d in ids})
    golden = resolve_golden("file", str(DEMO_GOLDEN), corpus_signature=signature, doc_ids=doc_ids)
    cache = AnswerCache(state / "bench_llm_answers")
    probe = KeywordCorpusProbe(url)
    try:
        with OpenAIStub(chat=chat) as stub:
            llm = LLMClient(model="bench-model", base_url=stub.base_url, api_key="sk-bench", max_retries=0)
            generator = LLMGenerator(llm=llm)
            started = time.perf_counter()
            answers = answer_variants(frames, golden, texts=texts, generator=generator, cache=cache, k=5)
            repaired = repair_answers(answers, golden, generator=generator, cache=cache, check=static_failures,
                                      log=print)
            print(f"answers and repairs: {time.perf_counter() - started:.1f} s, {len(stub.chat_requests())} requests")
        print("\nvariant | static pass before -> after (n) | repairs asked / kept | repair tokens | repair cost | "
              "grounded_rate | corpus_rate | citations/answer | not in context | not in corpus")
        total_log = 0
        total_absent = 0
        items: dict[tuple[str, str, bool], int] = {}
        for variant, frame in repaired.items():
            s = repair_summary(frame, price=PRICE)
            details = []
            for a in frame.itertuples():
                if isinstance(a.error, str):
                    continue
                record = cache.get(a.answer_key)
                g = ground_answer(record["text"], context_from_record(record), probe=probe, table=tables[variant])
                details.append(g.to_json())
                for u in g.ungrounded():
                    key = (u["kind"], u["item"], u["in_corpus"])
                    items[key] = items.get(key, 0) + 1
            r = grounding_rates(details)
            total_log += r["n_ungrounded"]
            total_absent += r["n_not_in_corpus"]
            print(f"{variant} | {s['pass_rate_before']:.3f} -> {s['pass_rate_after']:.3f} ({s['n_checked']}) | "
                  f"{s['n_repairs_asked']} / {s['n_kept']} | "
                  f"{s['repair_prompt_tokens'] + s['repair_completion_tokens']} | {s['repair_cost']:.6f} | "
                  f"{r['grounded_rate']:.3f} | {r['corpus_rate']:.3f} | "
                  f"{r['citations_per_answer']:.2f} | {r['n_ungrounded']} | {r['n_not_in_corpus']}")
        print(f"hallucination log: {total_log} item(s) not in their context, {total_absent} not in the corpus either; "
              f"{probe.queries} index queries")
        for (kind, item, in_corpus), n in sorted(items.items(), key=lambda kv: -kv[1]):
            print(f"  {n:>3} x {kind} {item!r} ({'in corpus' if in_corpus else 'not in corpus'})")
    finally:
        probe.close()
        subprocess.call([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(state)])


if __name__ == "__main__":
    main()
