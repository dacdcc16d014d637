"""The numbered context, citations, and the extractive baseline generator."""

import pytest

from eval_pipeline.answering.context import (
    ContextEntry,
    cited_documents,
    numbered_context,
    render_context,
)
from eval_pipeline.answering.extractive import (
    ANSWERING_CODE,
    ExtractiveGenerator,
    sentences,
)

VOCAB = ["kettle", "vinegar", "boil", "hour", "bike", "rack", "badge", "leave", "weeks", "tea"]


class WordEmbedder:
    """One dimension per vocabulary word: cosine = shared vocabulary words."""

    identity = "test-words-v1"

    def __init__(self):
        self.calls: list[int] = []

    def warm_up(self):
        pass

    def embed(self, texts):
        self.calls.append(len(texts))
        return [[float(w in t.lower()) for w in VOCAB] for t in texts]


CHUNKS = [
    ("kettle:0", "kettle", "Fill the kettle with vinegar and water. Bring it to the boil and leave it for an hour. "
                           "Rinse three times before making tea."),
    ("kettle:1", "kettle", "A second chunk of the same document is never a second entry."),
    ("bikes:0", "bikes", "Bikes go in the rack by the south door. You need your badge to open it."),
]


def test_the_context_numbers_each_document_once_in_rank_order():
    context = numbered_context(CHUNKS, k=5)
    assert [(e.number, e.chunk_id) for e in context] == [(1, "kettle:0"), (2, "bikes:0")]
    assert numbered_context(CHUNKS, k=1) == context[:1]
    assert render_context(context).startswith("[1] Fill the kettle") and "\n\n[2] Bikes go" in render_context(context)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        numbered_context(CHUNKS, k=0)


def test_citations_map_back_to_documents_and_unknown_numbers_are_reported():
    context = numbered_context(CHUNKS, k=5)
    assert cited_documents("Use vinegar [1]. The rack [2] needs a badge [2] [7] [0].", context) == (
        ("kettle", "bikes"), (7, 0))
    assert cited_documents("", context) == ((), ())


def test_sentences_are_split_and_fragments_dropped():
    assert sentences("One two three. Four five!\n\nSix seven eight? Nine") == ["One two three.", "Six seven eight?"]
    assert sentences("") == []


def test_the_extractive_answer_is_the_closest_sentences_in_reading_order_with_citations():
    embedder = WordEmbedder()
    generator = ExtractiveGenerator(embedder=embedder, sentences=2)
    context = numbered_context(CHUNKS, k=5)
    (answer,) = generator.answer_all(["how long does the kettle sit with vinegar and boil"], [context])
    # "kettle vinegar" (2 words) and "boil ... leave ... hour" (3 words) beat the rest.
    assert answer.text == ("Fill the kettle with vinegar and water. [1] "
                           "Bring it to the boil and leave it for an hour. [1]")
    assert answer.picked == ((1, 0), (1, 1))
    assert cited_documents(answer.text, context) == (("kettle",), ())
    assert embedder.calls == [1 + 5]  # the question and every candidate sentence in one call


def test_ties_go_to_the_earlier_entry_and_an_empty_context_gives_an_empty_answer():
    generator = ExtractiveGenerator(embedder=WordEmbedder(), sentences=1)
    same = [ContextEntry(1, "a:0", "a", "The badge opens the rack."), ContextEntry(2, "b:0", "b", "The rack needs a badge.")]
    first, empty = generator.answer_all(["badge rack", "anything at all"], [same, ()])
    assert first.text == "The badge opens the rack. [1]" and empty.text == "" and empty.picked == ()


def test_identity_names_the_method_the_embedder_and_the_setting():
    generator = ExtractiveGenerator(embedder=WordEmbedder(), sentences=3)
    assert generator.identity() == {"kind": "extractive", "version": 1, "code": ANSWERING_CODE(),
                                    "embedder": "test-words-v1", "sentences": 3}
    assert len(ANSWERING_CODE()) == 12  # the answering code's bytes: a change is another generator
    with pytest.raises(ValueError, match="sentences must be an integer >= 1, got True"):
        ExtractiveGenerator(embedder=WordEmbedder(), sentences=True)
    with pytest.raises(ValueError, match="2 questions but 1 contexts"):
        generator.answer_all(["a", "b"], [()])
