"""The extractive generator: an answer made of the context's sentences closest to the question.

A real, weak, deterministic baseline that needs no language model, so answer quality can be
measured offline (the demo) and an LLM generator has a floor to beat. It writes nothing of its
own: it picks the `sentences` sentences of the numbered context whose embeddings (the
pipeline's embedder) are closest to the question's, and gives them in reading order (context
number, then position), each followed by its citation `[n]`.

Rules: sentences are split after `.`, `!` or `?` followed by whitespace, and at blank lines;
fragments of fewer than `MIN_WORDS` words are not candidates. Similarity is the cosine of the
L2-normalized embeddings. Ties go to the earlier context entry, then the earlier sentence. An
empty context gives an empty answer (nothing was retrieved: the graders score it as such).
All questions and sentences of a call are embedded together, each distinct text once, in
batches of `EMBED_BATCH`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eval_pipeline.answering.context import ContextEntry
from eval_pipeline.common import versions

EXTRACTIVE_VERSION = 1


def ANSWERING_CODE() -> str:  # noqa: N802 - reads as the constant it stands for
    """The bytes of the answering code: a generator changed without a bumped version is another
    generator (its cached answers are not replayed)."""
    return versions.source_digest("eval_pipeline/answering")
MIN_WORDS = 3
EMBED_BATCH = 1024
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def sentences(text: str) -> list[str]:
    """The candidate sentences of a context entry, in order."""
    parts = (p.strip() for p in _SPLIT.split(text or ""))
    return [" ".join(p.split()) for p in parts if len(p.split()) >= MIN_WORDS]


@dataclass(frozen=True)
class ExtractiveAnswer:
    text: str
    picked: tuple[tuple[int, int], ...]  # (context number, sentence index) of each sentence used


class ExtractiveGenerator:
    """Answers from the retrieved sentences closest to the question (see the module docstring).

    Like a Haystack component: cheap to build, the embedder is warmed up on first use."""

    def __init__(self, *, embedder, sentences: int = 3):
        if not isinstance(sentences, int) or isinstance(sentences, bool) or sentences < 1:
            raise ValueError(f"sentences must be an integer >= 1, got {sentences!r}")
        self.embedder = embedder
        self.sentences = sentences

    def identity(self) -> dict:
        """What decides its answers: the method's version, the embedder (weights by content)
        and how many sentences it keeps. Part of every answer's cache key."""
        return {"kind": "extractive", "version": EXTRACTIVE_VERSION, "code": ANSWERING_CODE(),
                "embedder": self.embedder.identity, "sentences": self.sentences}

    def answer_all(self, questions: Sequence[str],
                   contexts: Sequence[Sequence[ContextEntry]]) -> list[ExtractiveAnswer]:
        """One answer per question, from its own context; the embedder is called in batches."""
        if len(questions) != len(contexts):
            raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
        candidates = [[(e.number, i, s) for e in ctx for i, s in enumerate(sentences(e.text))] for ctx in contexts]
        texts = list(questions) + [s for cands in candidates for _, _, s in cands]
        vectors = self._embed(texts)
        q_vectors, s_vectors = vectors[: len(questions)], vectors[len(questions):]
        answers, offset = [], 0
        for q, cands in zip(q_vectors, candidates):
            block = s_vectors[offset : offset + len(cands)]
            offset += len(cands)
            scores = block @ q if len(cands) else np.zeros(0)
            order = sorted(range(len(cands)), key=lambda j: (-round(float(scores[j]), 9), cands[j][0], cands[j][1]))
            chosen = sorted(order[: self.sentences], key=lambda j: (cands[j][0], cands[j][1]))
            answers.append(ExtractiveAnswer(
                text=" ".join(f"{cands[j][2]} [{cands[j][0]}]" for j in chosen),
                picked=tuple((cands[j][0], cands[j][1]) for j in chosen)))
        return answers

    def _embed(self, texts: list[str]):
        """One normalized row per text; each distinct text is embedded once (the contexts of a
        sweep's variants share most of their sentences)."""
        self.embedder.warm_up()
        distinct = list(dict.fromkeys(texts))
        rows = []
        for start in range(0, len(distinct), EMBED_BATCH):
            rows.extend(self.embedder.embed(distinct[start : start + EMBED_BATCH]))
        if not rows:
            return np.zeros((len(texts), 1), np.float32)
        matrix = np.asarray(rows, dtype=np.float32).reshape(len(distinct), -1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        row_of = {t: i for i, t in enumerate(distinct)}
        return (matrix / norms)[[row_of[t] for t in texts]]
