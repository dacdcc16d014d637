"""Build eval_pipeline/calibration_data/scifact_relevance.jsonl: people's relevance grades from
SciFact's train judgements, for calibrating the grader of the holes in the labels
(`findings: {config: {grade_holes: true, relevance_calibration: <file>}}`).

Rows (id, question, text, human): `question` a SciFact claim, `text` a candidate abstract
("title\\ntext", as the holes' grader reads a document), `human` true when SciFact's annotators
judged that abstract to hold evidence for the claim (BEIR's train qrels), false for a hard
negative: the top BM25 abstract for the claim that the qrels do not list. SciFact's annotators
read the abstracts each claim's citing sentence cited, so an unlisted abstract was not judged
relevant but may not have been read: a grader that calls one relevant may be right. The README
beside the file says so.

    .venv/bin/python bench/build_scifact_calibration.py [--scifact ../shared/datasets/scifact] [--claims 60]

Deterministic: the claims are the first `--claims` train claims in id order (natural sort) that
have one judged abstract; bm25s (the project's own BM25) ranks the negatives."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "eval_pipeline" / "calibration_data" / "scifact_relevance.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scifact", default=str((REPO / ".." / "shared" / "datasets" / "scifact").resolve()))
    parser.add_argument("--claims", type=int, default=60)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    root = Path(args.scifact)
    corpus = {}
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            corpus[str(d["_id"])] = f"{d.get('title') or ''}\n{d['text']}".strip()
    claims = {}
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            claims[str(q["_id"])] = q["text"]
    judged: dict[str, list[str]] = {}
    with open(root / "qrels" / "train.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, doc, score = line.strip().split("\t")
            if int(score) > 0:
                judged.setdefault(qid, []).append(doc)
    chosen = sorted((q for q, docs in judged.items() if len(docs) == 1 and docs[0] in corpus),
                    key=lambda q: (len(q), q))[: args.claims]

    import bm25s
    import Stemmer

    ids = sorted(corpus)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([corpus[i] for i in ids], stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    rows = []
    for qid in chosen:
        gold = judged[qid][0]
        found, _ = retriever.retrieve(bm25s.tokenize([claims[qid]], stopwords="en", stemmer=stemmer,
                                                     show_progress=False), k=20, show_progress=False)
        negative = next(ids[int(i)] for i in found[0] if ids[int(i)] not in judged[qid])
        source = "SciFact train (BEIR qrels), CC BY 4.0; abstracts S2ORC, ODC-By 1.0"
        rows.append({"id": f"scifact-{qid}-{gold}", "question": claims[qid], "text": corpus[gold], "human": True,
                     "claim_id": qid, "doc_id": gold, "judged": "SciFact annotators: evidence for the claim",
                     "source": source})
        rows.append({"id": f"scifact-{qid}-{negative}", "question": claims[qid], "text": corpus[negative],
                     "human": False, "claim_id": qid, "doc_id": negative,
                     "judged": "not listed in the qrels: the top BM25 abstract for the claim that annotators did not "
                               "mark as evidence (a hard negative, not read by them for certain)",
                     "source": source})
    out = Path(args.out)
    out.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    print(f"{out}: {len(rows)} rows ({sum(r['human'] for r in rows)} relevant) from {len(chosen)} claims")


if __name__ == "__main__":
    main()
