"""Abstention on BEIR SciFact train (issue #26): the claims plus an out-of-scope slice, each
variant's refusal threshold chosen on a tuning part, its refusals, risk-coverage area and the
microscope's triage counts measured on the held-out rest.

The out-of-scope slice is honest about what it is: the question texts of the project's demo set
(an employee handbook: laptops, expenses, warehouses), which no SciFact abstract answers. They
are added as abstention questions (no gold), 15% of the final set by default, as a generated set's
abstention_frac. They differ from the claims in style as much as in topic, so a refusal here is
easier than refusing an in-domain claim with no evidence: the figures are an upper bound.

    .venv/bin/python bench/abstention_scifact.py                      # train split, all 809 claims
    .venv/bin/python bench/abstention_scifact.py --limit-queries 200  # quicker

Embedding the 5,183 abstracts takes ~5.5 minutes on 2 cores; the table is kept in the bench
state dir (shared with bench/scifact.py when given the same --state-dir) and reused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SCIFACT_DEFAULT, BenchDB, add_common_args, print_machine, print_table  # noqa: E402

VARIANTS = [
    {"engine": "pg-dense", "abstain": {"policy": "auto"}, "name": "pg-dense-refuses"},
    {"engine": "hybrid", "legs": ["bm25", "dense"], "fields": "title+body", "abstain": {"policy": "auto"},
     "name": "hybrid-bm25-refuses"},
    {"engine": "bm25", "fields": "title+body", "abstain": {"policy": "auto"}, "name": "bm25-refuses"},
    {"engine": "bm25", "fields": "title+body", "abstain": {"policy": "auto", "score": "margin"},
     "name": "bm25-margin-refuses"},
    {"engine": "pg-dense", "abstain": {"policy": "auto", "objective": "f1"}, "name": "pg-dense-f1"},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT))
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--abstention-frac", type=float, default=0.15)
    parser.add_argument("--fraction", type=float, default=0.3, help="the tuning part's share")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    add_common_args(parser, "scifact")
    args = parser.parse_args()
    print_machine("abstention on SciFact train")

    from eval_pipeline.config.sweep import parse_sweep
    from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
    from eval_pipeline.metrics.selective import choose_threshold
    from eval_pipeline.questions.sets import Question, load_beir_questions
    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.ranking.fusion_tuning import split_questions
    from eval_pipeline.ranking.sweep import Sweep
    from eval_pipeline.scoring.variant import score_variant, summarize
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest

    started = time.perf_counter()
    snapshot = load_corpus("beir", args.path)
    qs = load_beir_questions(args.path, split="train", doc_ids=[d.doc_id for d in snapshot.documents])
    claims = list(qs.questions[: args.limit_queries] if args.limit_queries else qs.questions)
    demo = [json.loads(line) for line in (DEMO_DATA_DIR / "questions.jsonl").read_text().splitlines()[1:]]
    n_out = round(args.abstention_frac * len(claims) / (1 - args.abstention_frac))
    out_of_scope = [Question(f"oos-{d['qid']}", d["question"], ()) for d in demo[:n_out]]
    questions = claims + out_of_scope
    tuning_ids, _ = split_questions([q.qid for q in questions], fraction=args.fraction, seed=args.seed)
    tuning_set = set(tuning_ids)
    tuning = [q for q in questions if q.qid in tuning_set]
    held_out = [q for q in questions if q.qid not in tuning_set]
    print(f"{len(claims)} claims + {len(out_of_scope)} out-of-scope questions (demo handbook texts); tuning "
          f"{len(tuning)} ({sum(not q.answerable for q in tuning)} out of scope), held out {len(held_out)} "
          f"({sum(not q.answerable for q in held_out)} out of scope)")

    db = BenchDB(args.state_dir, keep=args.keep_db)
    embedder = LocalEmbedder(batch_size=args.batch_size)
    embedder.warm_up()
    chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)  # one chunk per document
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking,
                  log=lambda m: print("  " + m))
    with tempfile.TemporaryDirectory() as tmp:
        embeddings, _, _ = QueryEmbeddingCache(tmp).get_or_compute(embedder, questions)
    variants = parse_sweep({"variants": VARIANTS}).variants
    sweep = Sweep(snapshot=snapshot, connection_string=db.uri, table=info.table, query_embeddings=embeddings,
                  embed_ms_per_query=0.0)
    chosen, provenance = [], {}
    for v in variants:  # the threshold from the tuning part only, as steps.tune_abstention does
        probe = dataclasses.replace(v, abstain=dataclasses.replace(v.abstain, policy="none", below=None))
        frame = sweep.run_variant(probe, tuning)
        conf = dict(zip(frame["qid"], frame["confidence"]))
        choice = choose_threshold([conf[q.qid] for q in tuning], [q.answerable for q in tuning],
                                  objective=v.abstain.objective, max_false_refusal=v.abstain.max_false_refusal,
                                  where=f"variant {v.key!r}")
        provenance[v.key] = choice
        chosen.append(dataclasses.replace(v, abstain=dataclasses.replace(v.abstain, below=choice.threshold)))
    results = sweep.run(chosen, held_out)
    scored = {k: score_variant(f, held_out) for k, f in results.items()}
    summary = summarize(scored).set_index("variant")

    print(f"\n== Held-out part: {len(held_out)} questions; thresholds chosen on the {len(tuning)} tuning questions")
    rows = []
    for v in chosen:
        s, c = summary.loc[v.key], provenance[v.key]
        threshold = "none" if c.threshold is None else f"{c.threshold:.4f}"
        rows.append([v.key, v.abstain.score, v.abstain.objective, threshold, c.false_refusal_rate,
                     c.correct_refusal_rate, s["abstention_correct"], s["correct_refusal_rate"],
                     s["false_refusal_rate"], s["aurc"], s["rc_nauc"], s["ndcg@10"], s["ndcg@10 without refusal"]])
    print_table(rows, ["variant", "score", "objective", "threshold", "tuning FRR", "tuning CRR", "correct refusals",
                       "CRR", "FRR", "AURC", "nAUC", "nDCG@10", "nDCG@10 w/o refusal"])
    print("\n== Microscope on the held-out part: misses per triage label")
    labels = ("never_candidate", "outranked_in_pool", "lost_in_fusion", "demoted_by_reranker", "dropped_by_threshold",
              "errored")
    trows = []
    for key, frame in results.items():
        counts = Counter(frame["triage"].dropna())
        causes = Counter(frame["dense_cause"].dropna())
        trows.append([key, *[counts.get(label, 0) for label in labels], causes.get("crowding", 0),
                      causes.get("embedding", 0)])
    print_table(trows, ["variant", *labels, "crowding", "embedding"])
    print(f"\nwhole run {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
