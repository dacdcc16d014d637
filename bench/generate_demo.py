"""Question generation on the demo corpus against the local OpenAI-compatible test server.

Prints units, questions, drops by reason and seconds, then runs again to show the cache
answers every unit (0 calls).  The server answers with tests/fake_llm.py (deterministic
back-translation from the document's sentences), through the real `openai` client, with a
few injected faults (429, 500, garbage) that must be retried without losing a unit.

    .venv/bin/python bench/generate_demo.py
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval_pipeline.common.llm import LLMClient  # noqa: E402
from eval_pipeline.corpus.sources import load_corpus  # noqa: E402
from eval_pipeline.questions.cache import generate_question_set  # noqa: E402
from eval_pipeline.questions.generation import document_units  # noqa: E402
from tests.fake_llm import backtranslation_chat  # noqa: E402
from tests.openai_stub import OpenAIStub  # noqa: E402


def main() -> None:
    snapshot = load_corpus("demo")
    units = document_units(snapshot.documents)
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub(chat=backtranslation_chat) as stub:
        stub.faults = ["429", "500", "garbage", "429"]
        client = LLMClient(model="fake-model", base_url=stub.base_url, api_key="sk-bench", max_concurrency=4,
                           backoff_base=0.05, timeout=5.0)
        for attempt in ("cold", "cached"):
            started = time.perf_counter()
            result = generate_question_set(
                units, ask=client.complete, map_fn=client.map, model="fake-model", cache_path=Path(tmp) / "cache.jsonl",
                corpus_signature=snapshot.signature, theme_titles=[d.title for d in snapshot.documents],
            )
            seconds = time.perf_counter() - started
            c = result.counts()
            print(f"{attempt}: units {c['units']} (generated {c['units_generated']}, cached {c['units_cached']}, "
                  f"failed {c['units_failed']}), questions {c['questions']} "
                  f"(MATCH {c.get('form_MATCH', 0)}, GAP {c.get('form_GAP', 0)}, abstention {c.get('form_abstention', 0)}), "
                  f"calls {c['calls']}, seconds {seconds:.2f}")
            print("  dropped: " + ", ".join(f"{k.removeprefix('dropped_')} {v}" for k, v in c.items() if k.startswith("dropped_")))
        print(f"server requests {len(stub.chat_requests())}, llm usage {client.usage}")


if __name__ == "__main__":
    main()
