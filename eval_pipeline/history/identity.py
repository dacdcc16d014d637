"""What a measurement is, by content: the benchmark a run measured, the configuration a
variant ran with, and the engine (code and packages) that ran it.

The gate compares two numbers only when they measured the same benchmark, and it looks a
variant's history up by what the variant *is*, not only by its name. Each identity is a
digest of content, never of a label a user can keep while changing what it stands for:

* :func:`benchmark_fingerprint`: every scored question's id, its text (Unicode NFC, runs of
  white space as one space), its golds and graded relevance, and the fusion-tuning part
  (the questions a tuned variant was tuned on, never scored). Rewording a question, editing
  a gold or changing the scored subset is another benchmark, never a treatment change.
* :func:`configuration_fingerprint`: a variant's recorded configuration (engine, knobs,
  reranker identity) and the index it ranked on (embedder, the hash of its weights,
  chunking), without its name, so a rename with the same configuration keeps its history.
* ``eval_pipeline.ranking.caches.engine_identity`` (recorded with every ranked result, so it
  lives with the ranking): the bytes of the code that ranks and scores (every ``.py`` file
  under the code paths), the versions of the packages that decide a ranking, and the
  database server's and vector extension's. A paired comparison re-ranks a reference
  configuration with today's engine, which only stands for the reference when the engine is
  the same.
* :func:`scoring_protocol`: the protocol's hand-kept version and the bytes of the scoring
  code, part of the benchmark: a metric computed another way is another benchmark.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from eval_pipeline.common.registry import plugin_code_digest
from eval_pipeline.common.versions import source_digest
from eval_pipeline.metrics.retrieval import BUILTIN_MEASURE_MODULES
from eval_pipeline.questions.sets import Question

__all__ = ["benchmark_fingerprint", "configuration_fingerprint", "normalized_text",
           "scoring_protocol"]

_SPACE = re.compile(r"\s+")


def normalized_text(text: str) -> str:
    """A question's text as the benchmark identity reads it: Unicode NFC, white space runs
    as one space, no leading or trailing space. Case and punctuation are kept: both reach
    the engines."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def benchmark_fingerprint(questions: Iterable[Question], *, tuning: Iterable[Question] = ()) -> str:
    """The scored questions' content (id, normalized text, sorted golds, graded relevance)
    and the tuning part's, order-independent; 16 hex characters."""

    def lines(part: str, items: Iterable[Question]) -> list[str]:
        out = []
        for q in items:
            if not isinstance(q, Question):
                raise ValueError(f"questions must contain Question objects, got {type(q).__name__}: {q!r}")
            out.append(json.dumps({"part": part, "qid": q.qid, "text": normalized_text(q.question),
                                   "gold": sorted(q.gold), "relevance": {k: int(v) for k, v in q.relevance.items()}},
                                  sort_keys=True, ensure_ascii=False))
        return out

    scored = lines("scored", questions)
    if not scored:
        raise ValueError("a benchmark needs at least one scored question")
    every = scored + lines("tuning", tuning)
    return hashlib.sha256("\n".join(sorted(every)).encode("utf-8")).hexdigest()[:16]


# What an index is: the embedder's readable name, its weights' digest, its full identity (the
# weights by content, the runtime that embeds, an endpoint's input types: everything that
# changes a vector) and the chunking.
INDEX_FIELDS = ("embedder", "embedder_revision", "embedder_identity", "chunking")

# Set by a run from its tuning questions (what fusion tuning chose, the refusal threshold an
# `abstain: auto` variant chose): a function of the configuration and the benchmark, not part
# of what the variant is.
RUN_OUTCOMES = ("tuned", "abstain_tuned")


def variant_configuration(provenance: Mapping[str, Any], variant: str) -> dict[str, Any] | None:
    """The configuration ``variant`` ran with in a run of ``provenance``: its recorded config
    (without what the run's tuning chose) and its index (:data:`INDEX_FIELDS`), the pair's own
    (``index``) or else the run's. None when the run does not record it."""
    configs = provenance.get("variants")
    if not isinstance(configs, Mapping) or not isinstance(configs.get(variant), Mapping):
        return None
    config = {k: v for k, v in configs[variant].items() if k not in RUN_OUTCOMES and k != "index"}
    own = configs[variant].get("index")
    source = own if isinstance(own, Mapping) else provenance
    index = {k: source.get(k) for k in INDEX_FIELDS}
    return {"variant": config, "index": index}


def configuration_fingerprint(provenance: Mapping[str, Any], variant: str) -> str | None:
    """A digest of :func:`variant_configuration` (None when the run does not record it):
    equal for two variants that rank alike whatever their names."""
    configuration = variant_configuration(provenance, variant)
    if configuration is None:
        return None
    payload = json.dumps(configuration, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


# The scoring code: a change to how a metric is computed makes every run before it measure
# something else (another benchmark), whether or not the protocol's version was bumped by hand;
# the question set's code decides which documents count and which questions are answerable.
SCORING_SOURCES = ("eval_pipeline/metrics/retrieval.py", "eval_pipeline/scoring/variant.py",
                   "eval_pipeline/questions/sets.py")


def scoring_protocol(version: str) -> str:
    """``version`` (the hand-kept protocol version), a digest of the scoring code's bytes (with
    every built-in measure module's) and,
    with plugin metrics, of their code (`eval_pipeline.common.registry.plugin_code_digest`)."""

    # the built-in measures beside metrics/retrieval.py (the selective ones: refusal rates, risk-coverage)
    measures = tuple(m.replace(".", "/") + ".py" for m in BUILTIN_MEASURE_MODULES)
    plugins = plugin_code_digest("measure")  # a metric registered from outside the package
    return f"{version}+{source_digest(*SCORING_SOURCES, *measures)}" + (f"+plugins-{plugins}" if plugins else "")
