"""The corpus_snapshot asset's preflight and the question_set asset: a file, a BEIR split, or
a generated set (an LLM's, or the inverse cloze task's without a model), checked against the
corpus before anything is embedded; and the second set a run may compare it with
(`compare_with`), built the same way and recorded in the first set's header, from which the report
reloads it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from eval_pipeline.common.state import StateDir
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.questions.cache import generate_question_set, write_generated_question_set
from eval_pipeline.questions.extra_golds import apply_extra_golds, extra_golds_fingerprint, load_extra_golds
from eval_pipeline.questions.generation import chunk_units, document_units
from eval_pipeline.questions.ict import generate_ict_question_set, ict_cache_path, ict_set_path
from eval_pipeline.questions.sets import QuestionSet, QuestionSetError, load_question_set, preflight_question_set
from eval_pipeline.store.ingest import ChunkingConfig, chunk_documents


def preflight_run(
    snapshot: CorpusSnapshot,
    *,
    questions: Any | None,
    variants: Iterable[Any],
    reranker_identity: Callable[[Any], Any],
    warn: Callable[[str], None],
) -> dict[str, Any]:
    """Everything that can be checked before embedding: the question set this run builds
    (`questions`: its settings, None when the run does not build it) and every variant's
    reranker (`reranker_identity(spec)` loads no model). Logs skipped records; returns the
    snapshot's metadata."""
    if questions is not None:
        if questions.source == "generate":
            generator_of(questions)
        preflight_question_set(questions.source, questions.path, corpus_signature=snapshot.signature,
                               beir_split=questions.beir_split, doc_ids=[d.doc_id for d in snapshot.documents],
                               corpus_source=snapshot.source, limit=questions.limit)
        if getattr(questions, "compare_with", None) is not None:
            preflight_compared_set(questions, snapshot)
        if getattr(questions, "extra_golds", None):  # a bad review file fails now, naming its line
            load_extra_golds(questions.extra_golds, doc_ids=[d.doc_id for d in snapshot.documents])
    for v in variants:  # a missing model or an unset LLM fails here, not after the embedding
        if v.reranker.kind != "none":
            reranker_identity(v.reranker)
    for skipped in snapshot.skipped:
        warn(f"skipped {skipped.location}: {skipped.reason}")
    for note in snapshot.notes:  # kept as they are, but keyword search may not match them
        warn(f"{note.location}: {note.reason}")
    return {"documents": snapshot.count, "skipped": len(snapshot.skipped), "notes": len(snapshot.notes),
            "signature": snapshot.signature,
            "source": snapshot.source, "characters": snapshot.characters}


def build_question_set(
    settings: Any,
    snapshot: CorpusSnapshot,
    *,
    llm_client: Callable[[], Any],
    state: StateDir,
    warn: Callable[[str], None],
) -> tuple[QuestionSet, dict[str, Any]]:
    """The question set `settings` names (source file | beir | generate, with the fields of
    the question_set asset's config), checked against the corpus; and its metadata.

    `generate` asks the LLM (`llm_client()` is called first, so an unconfigured model fails
    before any call), caches every unit's questions in the state dir's question cache and
    writes the set to `settings.path` or the state dir's `generated_questions_<signature>.jsonl`.
    With `settings.generator` "ict" it calls no model: the inverse cloze task
    (eval_pipeline.questions.ict), cached in `ict_question_cache.jsonl`, written to
    `generated_questions_ict_<signature>.jsonl` by default."""
    doc_ids = [d.doc_id for d in snapshot.documents]
    metadata: dict[str, Any] = {}
    if settings.source == "generate" and generator_of(settings) == "ict":  # no model: nothing to configure
        path, metadata = _generate_ict(settings, snapshot, state, warn)
        qs = load_question_set(path, corpus_signature=snapshot.signature, doc_ids=doc_ids)
    elif settings.source == "generate":
        path, metadata = _generate(settings, snapshot, llm_client(), state, warn)
        qs = load_question_set(path, corpus_signature=snapshot.signature, doc_ids=doc_ids)
    else:
        checked = preflight_question_set(settings.source, settings.path, corpus_signature=snapshot.signature,
                                         doc_ids=doc_ids, beir_split=settings.beir_split, corpus_source=snapshot.source)
        if checked is None:  # None only for source "generate", handled above
            raise ValueError(f"question set source {settings.source!r} gave no question set")
        qs = checked
    if getattr(settings, "extra_golds", None):  # on the whole set: an accepted gold may be past the limit
        qs, metadata = _with_extra_golds(qs, settings.extra_golds, doc_ids, metadata)
    qs = qs.limit(settings.limit) if settings.limit is not None else qs
    for warning in qs.warnings:  # e.g. invisible characters glued to words: kept, but named
        warn(warning)
    return qs, {**metadata, "warnings": len(qs.warnings), **qs.counts(), "fingerprint": qs.fingerprint,
                "path": str(qs.path),
                "limited_from": qs.limited_from}


def _with_extra_golds(qs: QuestionSet, path: str, doc_ids: list[str], metadata: dict[str, Any]):
    """The set with the accepted golds of a review file (eval_pipeline.validity.holes) added:
    the labels change, and so do the set's and the labels' fingerprints, so runs before and
    after the import are never compared as if on the same labels. Who judged them is kept in
    the header and the metadata."""
    extra = load_extra_golds(path, questions=qs.questions, doc_ids=doc_ids)
    provenance = {"path": str(path), "count": len(extra), "fingerprint": extra_golds_fingerprint(extra),
                  "judged_by": sorted({g.judged_by for g in extra})}
    qs = replace(qs, questions=apply_extra_golds(qs.questions, extra), header={**qs.header, "extra_golds": provenance})
    return qs, {**metadata, "extra_golds": len(extra), "extra_golds_fingerprint": provenance["fingerprint"]}


def _generate(settings: Any, snapshot: CorpusSnapshot, client: Any, state: StateDir,
              warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    path = Path(settings.path or state.generated_questions(snapshot.signature))
    if settings.unit == "chunk":
        chunks = chunk_documents(snapshot, ChunkingConfig())
        units = chunk_units([(c.id, c.meta["doc_id"], c.content) for c in chunks], snapshot.documents)
    else:
        units = document_units(snapshot.documents)
    result = generate_question_set(
        units, ask=client.complete, map_fn=client.map, model=f"{client.model}@{client.base_url or 'default'}",
        k=settings.k, frac=settings.abstention_frac, masking=settings.masking, max_units=settings.max_units,
        cache_path=state.question_cache, corpus_signature=snapshot.signature,
        theme_titles=[d.title for d in snapshot.documents], log=warn,
    )
    for warning in result.warnings:
        warn(warning)
    write_generated_question_set(path, result, allow_partial=settings.allow_partial)
    return path, {**{f"generation_{k}": v for k, v in result.counts().items()}, "llm_usage": dict(client.usage)}


GENERATORS = ("llm", "ict")


def generator_of(settings: Any, setting: str = "question_set.generator") -> str:
    """The generator a `generate` source names (`settings.generator`, "llm" when the settings have
    none); a ValueError naming the setting for any other value."""
    generator = getattr(settings, "generator", None) or "llm"
    if generator not in GENERATORS:
        raise ValueError(f"{setting} {generator!r} is not valid; valid: {', '.join(GENERATORS)}")
    return generator


def _generate_ict(settings: Any, snapshot: CorpusSnapshot, state: StateDir,
                  warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """The ICT set for the corpus: per document (or per chunk of the default chunking), `seed`
    from the settings (0 without one), the same k, abstention share, masking and cap settings as
    the LLM path; every unit cached as it is done."""
    path = Path(settings.path or ict_set_path(state.generated_questions(snapshot.signature)))
    if settings.unit == "chunk":
        chunks = chunk_documents(snapshot, ChunkingConfig())
        units = chunk_units([(c.id, c.meta["doc_id"], c.content) for c in chunks], snapshot.documents)
    else:
        units = document_units(snapshot.documents)
    result = generate_ict_question_set(
        units, documents=snapshot.documents, k=settings.k, frac=settings.abstention_frac, masking=settings.masking,
        max_units=settings.max_units, seed=getattr(settings, "seed", 0) or 0,
        cache_path=ict_cache_path(state.question_cache), corpus_signature=snapshot.signature, log=warn,
    )
    for warning in result.warnings:
        warn(warning)
    write_generated_question_set(path, result, allow_partial=settings.allow_partial)
    return path, {f"generation_{k}": v for k, v in result.counts().items()}


# The second question set of a run (`question_set.compare_with`): built and cached by the
# question_set asset like the first, recorded in the first set's header under this key (name, path,
# fingerprint), and reloaded from there by the report, which ranks it with every variant.
COMPARED_SETS = "compared_sets"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _compared_settings(settings: Any, snapshot: CorpusSnapshot, state: StateDir | None) -> SimpleNamespace:
    """`settings.compare_with` as the settings build_question_set reads (the first set's own fields
    that a compared set has no say in: no extra golds, no limit, nothing partial)."""
    other = settings.compare_with
    path = other.path
    if other.source == "generate" and not path and state is not None:  # never the first set's file
        path = str(state.root / f"compared_questions_{other.name}_{snapshot.signature}.jsonl")
    return SimpleNamespace(source=other.source, path=path, beir_split=other.beir_split, generator=other.generator,
                           seed=other.seed, k=other.k, abstention_frac=other.abstention_frac, masking=other.masking,
                           unit=other.unit, max_units=other.max_units, allow_partial=False, limit=None,
                           extra_golds=None)


def preflight_compared_set(settings: Any, snapshot: CorpusSnapshot) -> None:
    """`question_set.compare_with` checked before anything is embedded: its name, its generator,
    and a file or BEIR set loaded against the corpus. Every error names the setting."""
    other = settings.compare_with
    if not _NAME.match(str(other.name)):
        raise ValueError(f"question_set.compare_with.name {other.name!r} is not valid: letters, digits, '.', '_' "
                         "and '-' (it names a file and the report's metadata)")
    if other.source == "generate":
        generator_of(other, "question_set.compare_with.generator")
        return
    if other.source == settings.source and other.path and other.path == settings.path:
        raise ValueError(f"question_set.compare_with names the run's own question set ({other.path}): compare with "
                         "another set")
    if other.source == "file" and not other.path:
        raise ValueError("question_set.compare_with.path must name the JSONL set when its source is 'file'")
    try:
        preflight_question_set(other.source, other.path, corpus_signature=snapshot.signature,
                               beir_split=other.beir_split, doc_ids=[d.doc_id for d in snapshot.documents],
                               corpus_source=snapshot.source)
    except QuestionSetError as exc:
        raise QuestionSetError(f"question_set.compare_with: {exc}") from None


def build_compared_set(settings: Any, snapshot: CorpusSnapshot, *, llm_client: Callable[[], Any], state: StateDir,
                       warn: Callable[[str], None]) -> tuple[QuestionSet, dict[str, Any]]:
    """The second set `settings.compare_with` names, built (and cached, when generated) as the
    first is, and its metadata; `record_compared_set` puts it in the first set's header."""
    preflight_compared_set(settings, snapshot)
    return build_question_set(_compared_settings(settings, snapshot, state), snapshot, llm_client=llm_client,
                              state=state, warn=warn)


def record_compared_set(qs: QuestionSet, name: str, other: QuestionSet) -> QuestionSet:
    """`qs` with `other` recorded in its header (name, path, fingerprint, size): the report
    reloads it from there. The header is no part of the set's fingerprint: its results and
    history are those of the same questions."""
    record = {"name": name, "path": str(other.path), "fingerprint": other.fingerprint,
              "questions": len(other.questions), "source": (other.header or {}).get("source"),
              "generator": (other.header or {}).get("generator")}
    kept = [r for r in (qs.header or {}).get(COMPARED_SETS, ()) if r.get("name") != name]
    return replace(qs, header={**qs.header, COMPARED_SETS: [*kept, record]})


def load_compared_sets(qs: QuestionSet, snapshot: CorpusSnapshot) -> list[tuple[str, QuestionSet]]:
    """The second sets recorded in `qs`'s header, reloaded and checked: the same corpus and the
    questions the question_set asset built (a file changed since fails, naming it)."""
    out = []
    for record in (qs.header or {}).get(COMPARED_SETS, ()):
        other = load_question_set(record["path"], corpus_signature=snapshot.signature,
                                  doc_ids=[d.doc_id for d in snapshot.documents])
        if other.fingerprint != record["fingerprint"]:
            raise ValueError(f"question_set.compare_with {record['name']!r}: {record['path']} changed since the "
                             f"question set was built (fingerprint {record['fingerprint']}, now {other.fingerprint}): "
                             "materialize question_set again")
        out.append((str(record["name"]), other))
    return out
