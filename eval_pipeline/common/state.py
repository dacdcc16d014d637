"""The state directory and everything kept under it, named in one place.

The pipeline keeps its embedded database, its caches and Dagster's step outputs in one
folder: `EVAL_PIPELINE_STATE_DIR`, else `.eval_state/` in the project checkout. Every cache
path comes from here, so two parts of the code can never disagree on where a cache lives,
and a user can see the whole list:

    pgdata/                    the embedded PostgreSQL's data directory
    query_embeddings/          question embeddings, by embedder identity and question texts
    ranked_results_cache/      a variant's ranked results, by everything that decides them
    statistics_cache/          bootstrap intervals and paired tests (the answer intervals too), by their inputs
    scored_partitions/         a partition's per-question scores and its numbers, by its ranked results,
                               questions, partition key and the scoring code
    plot_cache/                rendered plots, by their inputs
    question_cache.jsonl       generated questions, journaled per document
    answers/                   generated answers (with the context they saw), by prompt, context and generator
    answer_grades/             LLM judge and decision grades of answers, by their exact messages and grader
    generated_questions_<corpus signature>.jsonl   a generated question set
    assets/, variants/         Dagster's step outputs (the IO managers)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout holding eval_pipeline/
STATE_DIR_ENV = "EVAL_PIPELINE_STATE_DIR"


def default_state_dir() -> Path:
    """`EVAL_PIPELINE_STATE_DIR`, else `.eval_state/` in the checkout."""
    return Path(os.environ.get(STATE_DIR_ENV) or PROJECT_ROOT / ".eval_state")


@dataclass(frozen=True)
class StateDir:
    root: Path

    @classmethod
    def default(cls) -> "StateDir":
        return cls(default_state_dir())

    @property
    def pgdata(self) -> Path:
        return self.root / "pgdata"

    @property
    def query_embeddings(self) -> Path:
        return self.root / "query_embeddings"

    @property
    def ranked_results(self) -> Path:
        return self.root / "ranked_results_cache"

    @property
    def statistics(self) -> Path:
        return self.root / "statistics_cache"

    @property
    def scored_partitions(self) -> Path:
        return self.root / "scored_partitions"

    @property
    def audits(self) -> Path:
        return self.root / "audit_cache"

    @property
    def plots(self) -> Path:
        return self.root / "plot_cache"

    @property
    def question_cache(self) -> Path:
        return self.root / "question_cache.jsonl"

    def generated_questions(self, corpus_signature: str) -> Path:
        return self.root / f"generated_questions_{corpus_signature}.jsonl"

    @property
    def corpus_spools(self) -> Path:
        return self.root / "corpus"

    @property
    def hole_grades(self) -> Path:
        return self.root / "hole_grades"

    @property
    def answers(self) -> Path:
        return self.root / "answers"

    @property
    def answer_grades(self) -> Path:
        return self.root / "answer_grades"

    @property
    def asset_outputs(self) -> Path:
        return self.root / "assets"

    @property
    def variant_outputs(self) -> Path:
        return self.root / "variants"
