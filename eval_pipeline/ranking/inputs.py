"""Whether a step's inputs belong together. Any asset can be materialized alone from the UI,
so a step that reads several (the corpus snapshot, the vector table, the question set, the
embedder) checks that they were produced together before ranking or judging anything."""

from __future__ import annotations

from eval_pipeline.store.ingest import check_store_matches


class ConfigurationRefused(ValueError):
    """A configuration today's code will not rank on today's inputs, whatever is retried: an
    option it refuses, defaults that resolve otherwise, a tuning part the question set does not
    have. A paired comparison of a recorded configuration refused so cannot be made by design
    (eval_pipeline.verdict.paired); any other error from a ranking is a failure."""


class InconsistentInputs(ValueError):
    """The report's inputs were produced by different configurations (a partition ranked
    under another variants file, question set or store): judging them together would record
    numbers that were not measured as reported."""


def check_inputs_agree(*, corpus_signature: str, store, questions, embedder) -> None:
    """The corpus snapshot, the vector table, the question set and the embedder belong together:
    the table was built from this corpus with this embedder's weights, and the question set was
    written (and checked) for this corpus. Any asset can be materialized alone from the UI, so
    a step that reads several of them must not assume it: refuse, naming what to re-materialize."""
    problems = []
    if store.corpus_signature != corpus_signature:
        problems.append(f"the vector table {store.table} was built from corpus {store.corpus_signature!r}, "
                        f"corpus_snapshot is {corpus_signature!r} (materialize pgvector_store again)")
    written_for = questions.corpus_signature
    if written_for != corpus_signature:
        problems.append(f"the question set {questions.path} was checked against corpus {written_for!r}, "
                        f"corpus_snapshot is {corpus_signature!r} (materialize question_set again)")
    try:
        check_store_matches(store, embedder)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise InconsistentInputs("the inputs do not belong together: " + "; ".join(problems))
