"""Does a generated question set rank the variants as human questions do? Generates a set
(the ICT generator by default, eval_pipeline.questions.ict; or the LLM generator where a model is
reachable) and ranks the same variants on it and on a human set over the same corpus, then
prints, per headline metric, Kendall's tau between the two rankings with its bootstrap interval
over questions, and which variants swap (eval_pipeline.validity.sets).

Two corpora:
- SciFact (BEIR, ../shared/datasets/scifact): the human set is the 809 train claims; the generated
  set is made from the documents those claims are judged on (``--units judged``, the default: the
  same documents, other questions) or from a seeded sample of the corpus (``--units sample``).
  Documents are embedded whole (one chunk each), as bench/scifact.py does: the table is reused.
- the demo corpus (eval_pipeline/demo_data): the human set is the committed hand-written one.

Generation runs twice on a fresh cache (cold, then every unit from the cache) to show its time and
reuse; the set is written and read back through the question-set format (header, fingerprint).

    .venv/bin/python bench/ict_vs_human.py                      # both corpora, ICT
    .venv/bin/python bench/ict_vs_human.py --corpus demo
    .venv/bin/python bench/ict_vs_human.py --generator llm      # OPENAI_BASE_URL, EVAL_PIPELINE_LLM_MODEL
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from common import SCIFACT_DEFAULT, BenchDB, add_common_args, load_note, print_machine, print_table

# engines x fusion settings x depth; hybrid keyword legs match any word (natural-language questions)
VARIANTS = [
    {"name": "kw-all", "engine": "pg-keyword", "match": "all"},
    {"name": "kw-any", "engine": "pg-keyword", "match": "any"},
    {"name": "dense", "engine": "pg-dense"},
    {"name": "dense-depth5", "engine": "pg-dense", "depth": 5},
    {"name": "bm25", "engine": "bm25", "fields": "title+body"},
    {"name": "metadata", "engine": "metadata"},
    {"name": "hybrid-kw-rrf", "engine": "hybrid", "match": "any"},
    {"name": "hybrid-bm25-rrf", "engine": "hybrid", "legs": ["bm25", "dense"], "fields": "title+body"},
    {"name": "hybrid-bm25-merge", "engine": "hybrid", "legs": ["bm25", "dense"], "fields": "title+body",
     "fusion": "merge"},
    {"name": "hybrid-bm25-dbsf", "engine": "hybrid", "legs": ["bm25", "dense"], "fields": "title+body",
     "fusion": "dbsf"},
    {"name": "hybrid-bm25-rrf-top10", "engine": "hybrid", "legs": ["bm25", "dense"], "fields": "title+body",
     "chunk_top_k": 10},
]
REPORTED = ("ndcg@10", "mrr", "hit@1", "hit@10", "recall@10")


def generate(args, snapshot, units, workdir: Path):
    """(result, cold seconds, warm seconds, warm result): two runs on one fresh cache."""
    from eval_pipeline.questions.cache import generate_question_set
    from eval_pipeline.questions.ict import generate_ict_question_set

    cache = workdir / f"{args.generator}_cache.jsonl"
    if cache.exists():
        cache.unlink()
    runs = []
    for _ in ("cold", "warm"):
        started = time.perf_counter()
        if args.generator == "ict":
            result = generate_ict_question_set(units, documents=snapshot.documents, k=args.k, frac=args.frac,
                                               seed=args.seed, cache_path=cache, corpus_signature=snapshot.signature)
        else:
            from eval_pipeline.common.llm import LLMClient

            model = os.environ["EVAL_PIPELINE_LLM_MODEL"]
            client = LLMClient(model=model, base_url=os.environ.get("OPENAI_BASE_URL"),
                               api_key=os.environ.get("OPENAI_API_KEY"), seed=args.seed)
            result = generate_question_set(units, ask=client.complete, map_fn=client.map, model=model, k=args.k,
                                           frac=args.frac, cache_path=cache, corpus_signature=snapshot.signature,
                                           theme_titles=[d.title for d in snapshot.documents])
        runs.append((result, time.perf_counter() - started))
    return runs[0][0], runs[0][1], runs[1][1], runs[1][0]


def rank_and_score(db, snapshot, chunking, question_sets, state_dir: Path):
    """Per set name: {variant: per-question frame}, every set ranked by every variant."""
    from eval_pipeline.config.sweep import parse_sweep
    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.ranking.sweep import Sweep
    from eval_pipeline.scoring.variant import score_variant
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ingest

    embedder = LocalEmbedder(batch_size=64)
    embedder.warm_up()
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking,
                  log=lambda m: print("  " + m))
    print(f"  table {info.table}: {info.chunk_count} chunks "
          f"({'reused' if info.reused else f'built in {info.seconds:.0f} s'})")
    config = parse_sweep({"variants": VARIANTS})
    out = {}
    for name, questions in question_sets.items():
        started = time.perf_counter()
        embeddings, _, cached = QueryEmbeddingCache(state_dir / "query_embeddings").get_or_compute(embedder, questions)
        sweep = Sweep(snapshot=snapshot, connection_string=db.uri, table=info.table, query_embeddings=embeddings,
                      embed_ms_per_query=0.0)
        results = sweep.run(config.variants, questions)
        out[name] = {k: score_variant(frame, questions) for k, frame in results.items()}
        print(f"  ranked {len(questions)} {name} questions x {len(config.variants)} variants in "
              f"{time.perf_counter() - started:.0f} s (query embeddings {'cached' if cached else 'computed'})")
    return out


def report(corpus: str, human_name: str, scored, args, extra: dict) -> dict:
    from eval_pipeline.validity.sets import compare_sets

    started = time.perf_counter()
    comparison = compare_sets(scored[human_name], scored["generated"], n_resamples=args.resamples, seed=args.seed)
    print(f"\n== {corpus}: {human_name} (A) against the {args.generator} set (B); Kendall tau-b over "
          f"{len(comparison.variants)} variants, {args.resamples} bootstrap resamples (seed {args.seed}), "
          f"{time.perf_counter() - started:.1f} s")
    rows = []
    for m in comparison.metrics:
        rows.append([m.metric, m.questions_a, m.questions_b, m.tau, m.low, m.high, len(m.flips),
                     "; ".join(f"{a}>{b}" for a, b in m.flips[:4]) + (" ..." if len(m.flips) > 4 else "")])
    print_table(rows, ["metric", "n A", "n B", "tau", "low", "high", "flips", "A's order that B reverses (first 4)"],
                digits=3)
    for metric in ("ndcg@10",):
        m = comparison.get(metric)
        if m is None:
            continue
        print(f"\n   {metric} by variant (rank 1 = best):")
        t = m.table()
        print_table([[r["variant"], r["mean A"], r["rank A"], r["mean B"], r["rank B"], r["shift"]]
                     for _, r in t.iterrows()], ["variant", "mean A", "rank A", "mean B", "rank B", "shift"], digits=3)
    return {"corpus": corpus, "human": human_name, **extra, **comparison.to_json()}


def print_generation(result, cold, warm, warm_result) -> dict:
    c = result.counts()
    print(f"  generation: {c['questions']} questions ({c['form_abstention']} abstention) from {c['units']} units "
          f"in {cold:.1f} s cold; again in {warm:.1f} s with {warm_result.units_cached} of "
          f"{warm_result.units_cached + warm_result.units_generated} units from the cache")
    drops = {k[len('dropped_'):]: v for k, v in c.items() if k.startswith("dropped_") and v}
    masks = {k[len('masked_'):]: v for k, v in c.items() if k.startswith("masked_")}
    print(f"  dropped (sentences): {drops}")
    print(f"  masked in the kept questions: {masks}; questions with a mask: {c.get('questions_masked', '-')}")
    hard = {}
    for q in result.questions:
        hard[q.hard_class or "none"] = hard.get(q.hard_class or "none", 0) + 1
    print(f"  hard classes: {hard}")
    for w in result.warnings[:3]:
        print(f"  warning: {w}")
    return {"counts": c, "cold_seconds": cold, "warm_seconds": warm, "warm_cached_units": warm_result.units_cached,
            "hard_classes": hard}


def write_and_load(result, snapshot, path: Path):
    from eval_pipeline.questions.cache import write_generated_question_set
    from eval_pipeline.questions.sets import load_question_set

    write_generated_question_set(path, result)
    return load_question_set(path, corpus_signature=snapshot.signature, doc_ids=[d.doc_id for d in snapshot.documents])


def run_scifact(args, db, state_dir: Path) -> dict:
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.questions.generation import document_units
    from eval_pipeline.questions.sets import load_beir_questions
    from eval_pipeline.store.ingest import ChunkingConfig

    snapshot = load_corpus("beir", args.path)
    human = load_beir_questions(args.path, split="train", doc_ids=[d.doc_id for d in snapshot.documents])
    judged = sorted({d for q in human.questions for d in q.gold})
    if args.units == "judged":
        chosen = set(judged)
    else:
        ids = sorted(d.doc_id for d in snapshot.documents)
        chosen = set(random.Random(args.seed).sample(ids, min(args.sample, len(ids))))
    units = [u for u in document_units(snapshot.documents) if u.doc_id in chosen]
    print(f"\n== SciFact: {len(snapshot.documents)} documents; human: {len(human.questions)} train claims on "
          f"{len(judged)} documents; generated from {len(units)} documents ({args.units}), k {args.k or 1}")
    result, cold, warm, warm_result = generate(args, snapshot, units, state_dir)
    gen = print_generation(result, cold, warm, warm_result)
    generated = write_and_load(result, snapshot, state_dir / f"scifact_{args.generator}.jsonl")
    chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)  # one chunk per document
    scored = rank_and_score(db, snapshot, chunking, {"train claims": list(human.questions),
                                                     "generated": list(generated.questions)}, state_dir)
    return report("SciFact", "train claims", scored, args, {"generation": gen, "units": args.units})


def run_demo(args, db, state_dir: Path) -> dict:
    from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
    from eval_pipeline.questions.generation import document_units
    from eval_pipeline.questions.sets import load_question_set
    from eval_pipeline.store.ingest import ChunkingConfig

    snapshot = load_corpus("demo", None)
    doc_ids = [d.doc_id for d in snapshot.documents]
    human = load_question_set(DEMO_DATA_DIR / "questions.jsonl", corpus_signature=snapshot.signature, doc_ids=doc_ids)
    units = document_units(snapshot.documents)
    print(f"\n== demo: {len(snapshot.documents)} documents; human: {len(human.questions)} hand-written questions; "
          f"generated from every document, k {args.demo_k}")
    demo_args = argparse.Namespace(**{**vars(args), "k": args.demo_k})
    result, cold, warm, warm_result = generate(demo_args, snapshot, units, state_dir)
    gen = print_generation(result, cold, warm, warm_result)
    generated = write_and_load(result, snapshot, state_dir / f"demo_{args.generator}.jsonl")
    scored = rank_and_score(db, snapshot, ChunkingConfig(), {"hand-written": list(human.questions),
                                                             "generated": list(generated.questions)}, state_dir)
    return report("demo", "hand-written", scored, args, {"generation": gen})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", choices=("scifact", "demo", "both"), default="both")
    parser.add_argument("--generator", choices=("ict", "llm"), default="ict")
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="SciFact BEIR folder")
    parser.add_argument("--units", choices=("judged", "sample"), default="judged",
                        help="SciFact: generate from the judged documents, or from a seeded sample")
    parser.add_argument("--sample", type=int, default=1000, help="SciFact --units sample: documents drawn")
    parser.add_argument("--k", type=int, default=1, help="SciFact: questions per document")
    parser.add_argument("--demo-k", type=int, default=5, help="demo: questions per document")
    parser.add_argument("--frac", type=float, default=0.15, help="abstention share")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    add_common_args(parser, "ict_vs_human")
    args = parser.parse_args()

    machine = print_machine("generated questions against human questions")
    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    db = BenchDB(state_dir, keep=args.keep_db)
    out = {"machine": machine, "generator": args.generator, "runs": []}
    if args.corpus in ("demo", "both"):
        out["runs"].append(run_demo(args, db, state_dir))
    if args.corpus in ("scifact", "both"):
        out["runs"].append(run_scifact(args, db, state_dir))
    print(f"\n{load_note()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
