"""Tests for eval_pipeline.questions.ict: the inverse cloze task generator (no model).

The corpus is a handful of invented documents whose sentences are written to hit one rule each;
expected counts are worked out by hand from the rules in the module docstring (6 documents, so
a word is distinctive when at most 2 documents hold it)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from eval_pipeline.corpus.sources import Document
from eval_pipeline.questions import ict
from eval_pipeline.questions.cache import write_generated_question_set
from eval_pipeline.questions.generation import Unit, abstention_count, document_units
from eval_pipeline.questions.ict import (
    MASK,
    generate_ict_question_set,
    generate_ict_questions,
    identifiers,
    split_sentences,
)
from eval_pipeline.questions.sets import load_question_set

FILLER = "Warehouse staff follow the usual company procedure for every shift and every site."


def doc(doc_id, title, content, **metadata):
    return Document(doc_id, title, "", f"docs/{doc_id}.md", content, metadata)


def corpus():
    return [
        doc("kestrel-rota", "Kestrel rota",
            "# Kestrel rota\n\n"
            "The Kestrel rota assigns marmalade duty to the night porters on alternate Thursdays.\n\n"
            "Porters swap marmalade shifts only through the Kestrel rota spreadsheet kept by Agnes.\n\n"
            "Short one here.\n\n"
            "- see the list below:\n"
            "- porters; cooks\n\n"
            f"{FILLER}"),
        doc("badger-fund", "Badger fund",
            "Claims against the badger fund need the form BDG-771 signed by a quartermaster within fortnight "
            "limits.\n\n"
            "| col | col |\n|---|---|\n\n"
            "```\ncode block line that is long enough to be a sentence of many words.\n```\n\n"
            f"{FILLER}"),
        doc("otter-lounge", "Otter lounge",
            "Visitors to the otter lounge sign the cardboard ledger beside the aquarium hatch.\n\n"
            "The cardboard ledger moves to the archive vault every equinox, e.g. the spring one.", body_only=True),
        doc("heron-notes", "Heron notes", " ".join(["Routine words here."] * 110)
            + " Herons inspect the pontoon gaskets with a calibrated periscope every dawn."),
        doc("plain-1", "Plain one", f"{FILLER} The warehouse shift staff follow procedure."),
        doc("plain-2", "Plain two", f"{FILLER} Every site has a company procedure for the shift."),
    ]


def units():
    return document_units(corpus())


def run(**kwargs):
    kwargs.setdefault("frac", 0.0)
    return generate_ict_questions(units(), documents=corpus(), **kwargs)


# --- sentences and identifiers ---------------------------------------------------------------


def test_split_sentences_marks_markup_and_keeps_abbreviations_and_initials():
    text = ("# Heading\n\nFirst sentence here, e.g. with an example. Second one by J. Smith et al. in 2020! "
            "Third?\n\n| a | b |\n\n```\ncode\n```\n\n- a list item.\n- **bold** item")
    got = [(s.text, s.markup) for s in split_sentences(text)]
    assert got == [
        ("# Heading", True),
        ("First sentence here, e.g. with an example.", False),
        ("Second one by J. Smith et al. in 2020!", False),
        ("Third?", False),
        ("| a | b |", True),
        ("```", True), ("code", True), ("```", True),
        ("a list item.", False),
        ("bold item", False),
    ]
    assert [s.index for s in split_sentences(text)] == list(range(10))


def test_identifiers_are_letter_digit_codes_or_inner_capitals():
    found = [i for _, _, i in identifiers("Form BDG-771, tool OpsBell, gene p53, year 2024, word Tally, v2.1")]
    assert found == ["bdg-771", "opsbell", "p53", "v2.1"]


# --- filters, masking, classes ---------------------------------------------------------------


def test_filters_masking_and_classes_by_hand():
    r = run(k=5)
    by_doc = {}
    for q in r.questions:
        by_doc.setdefault(q.gold[0], []).append(q)
    # kestrel-rota: heading markup; 2 prose sentences, both name the title "Kestrel rota" -> masked;
    # "Short one here." too short; "see the list below:" and "porters; cooks" fragments; FILLER generic.
    kestrel = [q.question for q in by_doc["kestrel-rota"]]
    assert kestrel == [
        f"The {MASK} assigns marmalade duty to the night porters on alternate Thursdays.",
        f"Porters swap marmalade shifts only through the {MASK} spreadsheet kept by Agnes.",
    ]
    # badger-fund: the unique identifier and the distinctive title word "badger" (with "fund") masked
    assert [q.question for q in by_doc["badger-fund"]] == [
        f"Claims against the {MASK} need the form {MASK} signed by a quartermaster within fortnight limits."]
    assert [q.hard_class for q in by_doc["otter-lounge"]] == ["body-only", "body-only"]
    assert [q.hard_class for q in by_doc["heron-notes"]] == ["deep-chunk"]
    assert "plain-1" not in by_doc and "plain-2" not in by_doc  # generic: nothing distinctive
    assert {q.form for q in r.questions} == {"MATCH"}
    d = r.dropped
    assert d["markup"] == 1 + 2 + 3  # heading; table's two rows; fence, code line, fence
    assert d["fragment"] == 2
    assert d["too_short"] == 1 + 110  # "Short one here."; heron-notes' introduction (3 content words)
    assert d["generic"] == 4 + 2  # FILLER in four documents; the plain ones' second sentences
    assert d["near_duplicate"] == d["not_drawn"] == d["too_long"] == d["leak"] == d["masked_to_generic"] == 0
    # names: both kestrel sentences, the badger and the first otter sentence; title word: "Herons"
    assert r.masked == {"names": 4, "title_words": 1, "identifiers": 1}
    assert r.questions_masked == 5
    assert by_doc["heron-notes"][0].question.startswith(f"{MASK} inspect the pontoon gaskets")


def test_masking_off_drops_sentences_naming_their_document_as_leaks():
    r = run(k=5, masking=False)
    assert r.dropped["leak"] == 4  # both kestrel sentences, the badger fund's, the otter lounge's first
    assert not any("Kestrel rota" in q.question for q in r.questions)
    assert r.masked == {"names": 0, "title_words": 0, "identifiers": 0}


def test_masking_that_leaves_nothing_distinctive_is_counted_apart():
    docs = [doc("zephyr-quince", "Zephyr quince", "The zephyr quince suits warehouse shift procedure."),
            *corpus()]
    r = generate_ict_questions(document_units(docs), documents=docs, frac=0.0)
    assert r.dropped["masked_to_generic"] == 1
    assert "zephyr-quince" not in {q.gold[0] for q in r.questions}


# --- determinism and the draw ----------------------------------------------------------------


def test_same_seed_same_set_other_seed_other_draw_ids_follow_the_sentence():
    a, b, c = run(k=1, seed=3), run(k=1, seed=3), run(k=1, seed=4)
    assert [q.to_json() for q in a.questions] == [q.to_json() for q in b.questions]
    assert a.dropped["not_drawn"] == 2  # kestrel, otter: 2 survivors for 1 place each; heron, badger: 1 for 1
    texts_c = {q.qid: q.question for q in c.questions}
    for q in a.questions:  # a sentence drawn by both seeds has one id
        assert texts_c.get(q.qid, q.question) == q.question


def test_the_draw_keeps_document_order_and_k():
    r = run(k=1)
    assert sum(q.gold == ("kestrel-rota",) for q in r.questions) == 1


# --- the abstention slice --------------------------------------------------------------------


def test_abstention_slice_size_guards_and_label(tmp_path):
    text = tmp_path / "off.txt"
    text.write_text("# comment line\n"
                    "Bees gather nectar from lime blossom during long summer evenings.\n"  # kept
                    "Sailors reef the mainsail early when squalls darken the estuary horizon.\n"  # kept
                    "The Otter lounge hosts chess evenings with antique boards and clocks.\n"  # names a title
                    "Porters swap marmalade shifts through the rota spreadsheet Agnes keeps.\n"  # overlaps kestrel
                    "Too short here.\n", encoding="utf-8")
    r = generate_ict_questions(units(), documents=corpus(), k=5, frac=0.5, offdomain_text=text)
    answerable = [q for q in r.questions if q.gold]
    wanted = abstention_count(len(answerable), 0.5)
    assert wanted == len(answerable) == 6
    slice_ = [q for q in r.questions if not q.gold]
    assert {q.question for q in slice_} == {
        "Bees gather nectar from lime blossom during long summer evenings.",
        "Sailors reef the mainsail early when squalls darken the estuary horizon."}
    assert {(q.form, q.hard_class) for q in slice_} == {(None, "abstention")}
    assert r.dropped["abstention_names_title"] == 1
    assert r.dropped["abstention_overlaps_document"] == 1
    assert r.dropped["abstention_too_short"] == 1
    assert any("abstention slice short: 2 of 6" in w for w in r.warnings)


def test_shipped_offdomain_text_is_read_and_large_enough_for_the_demo():
    sentences = ict.offdomain_sentences()
    assert len(sentences) >= 140
    assert not any(s.startswith("#") for s in sentences)
    licence = (ict.OFFDOMAIN_TEXT.parent / "README.md").read_text(encoding="utf-8")
    assert "CC0" in licence


# --- cache, file, settings -------------------------------------------------------------------


def test_cache_reuses_units_and_regenerates_only_a_changed_one(tmp_path):
    cache = tmp_path / "ict_question_cache.jsonl"
    first = generate_ict_question_set(units(), documents=corpus(), cache_path=cache, corpus_signature="sig", frac=0.0)
    assert (first.units_cached, first.units_generated) == (0, 6)
    again = generate_ict_question_set(units(), documents=corpus(), cache_path=cache, corpus_signature="sig", frac=0.0)
    assert (again.units_cached, again.units_generated) == (6, 0)
    assert [q.to_json() for q in again.questions] == [q.to_json() for q in first.questions]
    docs = corpus()
    docs[2] = doc("otter-lounge", "Otter lounge", docs[2].content + " Otters nap on the radiator shelf.",
                  body_only=True)
    changed = generate_ict_question_set(document_units(docs), documents=docs, cache_path=cache, corpus_signature="sig",
                                        frac=0.0)
    assert (changed.units_cached, changed.units_generated) == (5, 1)
    records = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(records) == 6  # compacted: the old otter record is gone


def test_seed_k_and_masking_are_part_of_the_key(tmp_path):
    cache = tmp_path / "c.jsonl"
    generate_ict_question_set(units(), documents=corpus(), cache_path=cache, corpus_signature="s", frac=0.0)
    for kwargs in ({"seed": 1}, {"k": 2}, {"masking": False}):
        r = generate_ict_question_set(units(), documents=corpus(), cache_path=cache, corpus_signature="s", frac=0.0,
                                      **kwargs)
        assert r.units_cached == 0, kwargs


def test_a_killed_run_resumes_from_the_journal(tmp_path):
    class Store(dict):
        def __init__(self, fail_after):
            super().__init__()
            self.fail_after = fail_after

        def get(self, key):
            return super().get(key)

        def put(self, record):
            if len(self) >= self.fail_after:
                raise KeyboardInterrupt  # the run dies here
            self[record["key"]] = dict(record)

    store = Store(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        generate_ict_questions(units(), documents=corpus(), frac=0.0, store=store)
    store.fail_after = 99
    resumed = generate_ict_questions(units(), documents=corpus(), frac=0.0, store=store)
    assert (resumed.units_cached, resumed.units_generated) == (3, 3)


def test_written_set_has_the_weak_generator_header_and_loads(tmp_path):
    r = run(k=5)
    r.corpus_signature = "sig"
    path = tmp_path / "ict.jsonl"
    fingerprint = write_generated_question_set(path, r)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["generator"] == "ict" and header["generator_strength"] == "weak"
    assert header["source"] == "generated" and header["prompt_version"] == ict.ICT_VERSION
    assert header["masked"] == r.masked and header["dropped"]["fragment"] == 2
    qs = load_question_set(path, corpus_signature="sig", doc_ids=[d.doc_id for d in corpus()])
    assert qs.fingerprint == fingerprint and len(qs.questions) == len(r.questions)


def test_bad_settings_fail_before_anything_is_read(tmp_path):
    with pytest.raises(ValueError, match="seed"):
        run(seed=-1)
    with pytest.raises(ValueError, match="k"):
        run(k=0)
    with pytest.raises(ValueError, match="frac"):
        run(frac=1.0)
    with pytest.raises(ValueError, match="corpus_signature"):
        generate_ict_question_set(units(), cache_path=tmp_path / "c", corpus_signature="")
    assert not (tmp_path / "c").exists()


def test_without_documents_the_units_stand_for_them():
    r = generate_ict_questions(units(), frac=0.0, k=5)
    assert {q.gold[0] for q in r.questions} == {"kestrel-rota", "badger-fund", "otter-lounge", "heron-notes"}
    assert not any(q.hard_class == "body-only" for q in r.questions)  # metadata unknown without the documents


def test_chunk_units_get_their_document_gold():
    u = Unit("otter-lounge:0", "otter-lounge", "Otter lounge", "docs/otter-lounge.md",
             "Visitors to the otter lounge sign the cardboard ledger beside the aquarium hatch.")
    r = generate_ict_questions([u], documents=corpus(), frac=0.0)
    assert [q.gold for q in r.questions] == [("otter-lounge",)]


def test_build_question_set_generates_ict_without_asking_for_a_model(tmp_path):
    from eval_pipeline.common.state import StateDir
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.questions.build import build_question_set, generator_of

    snapshot = load_corpus("demo", None)
    settings = SimpleNamespace(source="generate", generator="ict", seed=0, path=None, unit="document", k=None,
                               abstention_frac=0.15, masking=True, max_units=4, allow_partial=False,
                               beir_split="test", limit=None, extra_golds=None)

    def no_llm():
        raise AssertionError("the ICT generator asked for the LLM")

    qs, metadata = build_question_set(settings, snapshot, llm_client=no_llm, state=StateDir(tmp_path),
                                      warn=lambda m: None)
    assert qs.header["generator"] == "ict" and Path(qs.path).name.startswith("generated_questions_ict_")
    assert metadata["generation_units_generated"] == 4 and metadata["abstention"] > 0
    assert (tmp_path / "ict_question_cache.jsonl").exists()
    _, again = build_question_set(settings, snapshot, llm_client=no_llm, state=StateDir(tmp_path), warn=lambda m: None)
    assert again["generation_units_cached"] == 4 and again["fingerprint"] == metadata["fingerprint"]
    with pytest.raises(ValueError, match="question_set.generator 'gpt'"):
        generator_of(SimpleNamespace(generator="gpt"))
