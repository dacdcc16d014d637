"""TREC run and qrels files, so trec_eval, ranx or pytrec_eval can score the same runs.

Run lines are `qid Q0 doc_id rank score tag`.  trec_eval orders documents by score and breaks
ties by doc id *descending*, while this project breaks ties by doc id ascending.  So that any
tool reads exactly the ranking we scored, the score column is written as a strictly
decreasing function of our rank (depth - rank + 1); the engines' raw scores are in
per_query.jsonl.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.questions.sets import Question


def run_lines(tag: str, rankings: Mapping[str, Sequence[str]]) -> list[str]:
    lines = []
    for qid, doc_ids in rankings.items():
        depth = len(doc_ids)
        for rank, doc_id in enumerate(doc_ids, start=1):
            lines.append(f"{qid} Q0 {doc_id} {rank} {depth - rank + 1} {tag}")
    return lines


def qrels_lines(questions: Iterable[Question]) -> list[str]:
    return [f"{q.qid} 0 {doc_id} {grade}" for q in questions for doc_id, grade in sorted(q.qrels().items())]


_WHITESPACE = re.compile(r"\s")


def write_trec_files(folder: str | Path, runs: Mapping[str, Mapping[str, Sequence[str]]],
                     questions: Sequence[Question]) -> dict[str, str]:
    """One `<engine>.run` per engine plus `qrels.txt`; returns the paths by name."""
    folder = Path(folder)
    paths = {}
    for engine, rankings in runs.items():
        for ident in (engine, *rankings, *(d for ids in rankings.values() for d in ids)):
            if _WHITESPACE.search(ident):
                raise ValueError(f"TREC files cannot hold ids with whitespace: {ident!r}")
        path = folder / f"{engine}.run"
        atomic_write_text(path, "\n".join(run_lines(engine, rankings)) + "\n")
        paths[engine] = str(path)
    qrels_path = folder / "qrels.txt"
    atomic_write_text(qrels_path, "\n".join(qrels_lines(questions)) + "\n")
    paths["qrels"] = str(qrels_path)
    return paths


def read_run(path: str | Path) -> dict[str, list[str]]:
    """Rankings from a run file, ordered by rank."""
    rows: dict[str, list[tuple[int, str]]] = {}
    for line in Path(path).read_text().splitlines():
        qid, _, doc_id, rank, _score, _tag = line.split()
        rows.setdefault(qid, []).append((int(rank), doc_id))
    return {qid: [d for _, d in sorted(pairs)] for qid, pairs in rows.items()}
