"""Tests for eval_pipeline.questions.golden: the golden prompt file format, its strict loader
(every error names the file, line and field), assertion specs, the order-independent
fingerprint, writing and stamping, the question set used as a golden set, and the demo set
(every `contains` value and `regex` pattern is literally in the prompt's gold document, so an
extractive answer from the right chunk can pass it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eval_pipeline.common import atomic
from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
from eval_pipeline.questions.golden import (
    ABSTENTION_REFERENCE,
    ASSERTION_TYPES,
    FORMAT_VERSION,
    HEADER_KIND,
    Assertion,
    GoldenPrompt,
    GoldenPromptError,
    GoldenPromptSet,
    StaticOptions,
    golden_fingerprint,
    golden_from_question_set,
    load_golden_prompts,
    main,
    stamp_golden_file,
    write_golden_prompts,
)
from eval_pipeline.questions.sets import Question, QuestionSet, QuestionSetError

DEMO_SET = DEMO_DATA_DIR / "golden_prompts.jsonl"
SIG = "abcdef0123456789"
DOC_IDS = ("doc-a", "doc-b")


def header(**over) -> dict:
    return {"kind": HEADER_KIND, "version": FORMAT_VERSION, "set": "team.set", **over}


def pline(pid="p1", prompt="what is a?", assertions=None, **extra) -> dict:
    return {"id": pid, "prompt": prompt,
            "assertions": [{"type": "contains", "value": "a"}] if assertions is None else assertions, **extra}


def write_lines(path: Path, objs) -> Path:
    """One line per item: dicts as JSON, strings verbatim."""
    path.write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n", encoding="utf-8")
    return path


def load(path, **kw):
    """Hand-built files have no fingerprint (they test other rules)."""
    return load_golden_prompts(path, require_fingerprint=False, **kw)


def raises_at(path: Path, line: int | None, field: str | None, pattern: str = ""):
    """pytest.raises for a GoldenPromptError starting 'path:line: field 'name':'."""
    prefix = f"{path}:{line}:" if line is not None else f"{path}:"
    if field is not None:
        prefix += f" field {field!r}:"
    return pytest.raises(GoldenPromptError, match=rf"^{re.escape(prefix)}.*{pattern}")


PROMPTS = (
    GoldenPrompt("p1", "How long is the claim window?", (Assertion.contains("30 days"), Assertion.regex(r"\b30\b")),
                 reference="30 days.", gold=("doc-a",), form="MATCH", tags=("finance",)),
    GoldenPrompt("p2", "Answer as JSON with key days.",
                 (Assertion.json_schema({"type": "object", "required": ["days"],
                                         "properties": {"days": {"type": "integer"}}}),),
                 gold=("doc-b",), form="GAP"),
    GoldenPrompt("p3", "Is it allowed? Answer only yes or no.", (Assertion.exact("no"),), reference="No."),
    GoldenPrompt("p4", "Write f().", (Assertion.contains("def f", case_sensitive=True),), tags=("code",),
                 static=StaticOptions(allowed_imports=("math",), symbols=("f",))),
    GoldenPrompt("p5", "Wo ist die Straße? 東京", (), reference="ß"),
)


def golden_set(prompts=PROMPTS, **header_extra) -> GoldenPromptSet:
    return GoldenPromptSet(set_id="team.set", prompts=tuple(prompts), path="x", header=header_extra)


# --- the demo set -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    snap = load_corpus("demo")
    gs = load_golden_prompts(DEMO_SET, corpus_signature=snap.signature, doc_ids=[d.doc_id for d in snap.documents])
    return gs, snap.by_id()


def test_the_demo_set_loads_against_the_demo_corpus(demo):
    gs, docs = demo
    c = gs.counts()
    assert gs.set_id == "demo.handbook" and gs.corpus_signature is not None
    assert c["prompts"] >= 40
    assert c["assertions_json_schema"] >= 5 and c["assertions_regex"] >= 5
    assert all(c[f"assertions_{t}"] > 0 for t in ASSERTION_TYPES)
    assert c["assertions_contains"] >= 20 and c["assertions_exact"] >= 3
    assert c["with_static"] >= 1
    assert {d for p in gs.prompts for d in p.gold} == set(docs)  # every document has a prompt
    assert sum(p.reference is not None for p in gs.prompts) >= 0.9 * len(gs.prompts)


def test_demo_assertions_are_literal_in_the_gold_documents(demo):
    """An extractive answer (sentences of the retrieved chunks) can pass every contains and
    regex assertion when the right document is retrieved."""
    gs, docs = demo
    problems = []
    for p in gs.prompts:
        if not p.gold:
            assert p.reference, f"{p.id}: a prompt without gold needs a reference"
            continue
        texts = [docs[d].content for d in p.gold]
        for a in p.assertions:
            if a.type == "contains":
                hit = any(a.value in t if a.case_sensitive else a.value.lower() in t.lower() for t in texts)
            elif a.type == "regex":
                hit = any(a.compiled().search(t) for t in texts)
            else:
                continue
            if not hit:
                problems.append(f"{p.id}: {a.to_json()} not in {p.gold}")
    assert problems == []


def test_demo_references_agree_with_their_assertions(demo):
    """The reference answer (prose) passes the prompt's contains and regex assertions, and
    starts with an exact assertion's value: assertions and references say the same thing."""
    gs, _ = demo
    for p in gs.prompts:
        for a in p.assertions:
            if a.type == "contains":
                assert (a.value in p.reference) if a.case_sensitive else (a.value.lower() in p.reference.lower()), p.id
            elif a.type == "regex":
                assert a.compiled().search(p.reference), p.id
            elif a.type == "exact":
                assert p.reference.lower().startswith(a.value.lower()), p.id


def test_demo_json_and_code_prompts_ask_for_their_format(demo):
    gs, _ = demo
    for p in gs.prompts:
        types = {a.type for a in p.assertions}
        if "json_schema" in types:
            assert "JSON" in p.prompt and "exact" not in types and "contains" not in types, p.id
        if "exact" in types:
            assert re.search(r"Answer only", p.prompt), p.id
        if p.static is not None:
            assert "Python" in p.prompt and all(s in p.prompt for s in p.static.symbols), p.id


def test_the_demo_file_is_as_written():
    """The committed file is what write_golden_prompts writes for its prompts (stamped, canonical)."""
    gs = load_golden_prompts(DEMO_SET)
    assert gs.header["fingerprint"] == gs.fingerprint
    assert [json.loads(line) for line in DEMO_SET.read_text(encoding="utf-8").splitlines()[1:]] == [
        p.to_json() for p in gs.prompts]


# --- write + load -----------------------------------------------------------------------------


def test_round_trip(tmp_path):
    p = tmp_path / "g.jsonl"
    fp = write_golden_prompts(p, golden_set(corpus_signature=SIG, description="unit", source="test"))
    gs = load_golden_prompts(p, corpus_signature=SIG, doc_ids=DOC_IDS)
    assert gs.prompts == PROMPTS and gs.set_id == "team.set" and gs.path == str(p)
    assert [a.params for q in gs.prompts for a in q.assertions] == [a.params for q in PROMPTS for a in q.assertions]
    assert gs.fingerprint == fp == golden_fingerprint(PROMPTS)
    assert dict(gs.header) == {"kind": HEADER_KIND, "version": 1, "set": "team.set", "corpus_signature": SIG,
                               "fingerprint": fp, "description": "unit", "source": "test"}
    assert "Straße" in p.read_text(encoding="utf-8")  # UTF-8, not \u escapes


def test_written_lines_are_canonical(tmp_path):
    p = tmp_path / "g.jsonl"
    write_golden_prompts(p, golden_set())
    lines = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]
    assert "corpus_signature" not in lines[0]  # a set for any corpus
    assert lines[1] == {"id": "p1", "prompt": "How long is the claim window?",
                        "assertions": [{"type": "contains", "value": "30 days"},
                                       {"type": "regex", "pattern": r"\b30\b"}],
                        "reference": "30 days.", "gold": ["doc-a"], "form": "MATCH", "tags": ["finance"]}
    assert lines[4]["static"] == {"allowed_imports": ["math"], "symbols": ["f"]}
    assert lines[4]["assertions"] == [{"type": "contains", "value": "def f", "case_sensitive": True}]
    assert lines[5] == {"id": "p5", "prompt": "Wo ist die Straße? 東京", "assertions": [], "reference": "ß"}


def test_write_refuses_what_the_loader_would_refuse(tmp_path):
    p = tmp_path / "g.jsonl"
    with pytest.raises(GoldenPromptError, match="no assertion and no reference"):
        write_golden_prompts(p, golden_set([GoldenPrompt("p1", "t")]))
    with pytest.raises(GoldenPromptError, match="duplicate id 'p1'"):
        write_golden_prompts(p, golden_set([PROMPTS[0], PROMPTS[0]]))
    with pytest.raises(GoldenPromptError, match="no prompts"):
        write_golden_prompts(p, golden_set([]))
    with pytest.raises(GoldenPromptError, match="field 'set'"):
        write_golden_prompts(p, GoldenPromptSet(set_id="noteam", prompts=PROMPTS, path="x"))
    with pytest.raises(GoldenPromptError, match="NUL"):
        write_golden_prompts(p, golden_set([GoldenPrompt("p1", "a\x00b", reference="r")]))
    assert not p.exists()


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    p = tmp_path / "g.jsonl"
    write_golden_prompts(p, golden_set())
    before = p.read_bytes()
    monkeypatch.setattr(atomic.os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError("disk on fire")))
    with pytest.raises(OSError, match="disk on fire"):
        write_golden_prompts(p, golden_set(PROMPTS[:1]))
    assert p.read_bytes() == before and sorted(x.name for x in tmp_path.iterdir()) == ["g.jsonl"]


# --- fingerprint ------------------------------------------------------------------------------


def test_fingerprint_ignores_line_order_and_sees_every_change(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    fp = write_golden_prompts(a, golden_set())
    assert write_golden_prompts(b, golden_set(reversed(PROMPTS))) == fp
    assert load_golden_prompts(b).fingerprint == fp
    p1 = PROMPTS[0]
    changed = [
        GoldenPrompt(p1.id, p1.prompt + "?", p1.assertions, p1.reference, p1.gold, p1.form, p1.tags),
        GoldenPrompt(p1.id, p1.prompt, p1.assertions[:1], p1.reference, p1.gold, p1.form, p1.tags),
        GoldenPrompt(p1.id, p1.prompt, (Assertion.contains("30 days", case_sensitive=True), p1.assertions[1]),
                     p1.reference, p1.gold, p1.form, p1.tags),
        GoldenPrompt(p1.id, p1.prompt, p1.assertions, "thirty days", p1.gold, p1.form, p1.tags),
        GoldenPrompt(p1.id, p1.prompt, p1.assertions, p1.reference, ("doc-b",), p1.form, p1.tags),
    ]
    for q in changed:
        assert golden_fingerprint([q, *PROMPTS[1:]]) != fp


def test_a_hand_edit_is_caught_by_the_fingerprint(tmp_path):
    p = tmp_path / "g.jsonl"
    write_golden_prompts(p, golden_set())
    lines = p.read_text(encoding="utf-8").splitlines()
    lines[2], lines[1] = lines[1], lines[2].replace("key days", "key weeks")
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with raises_at(p, 1, "fingerprint", "mismatch"):
        load_golden_prompts(p)


def test_header_without_fingerprint_is_refused_by_default(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [header(), pline()])
    assert load(p).header.get("fingerprint") is None
    with raises_at(p, 1, "fingerprint", "stamp"):
        load_golden_prompts(p)


# --- stamping ---------------------------------------------------------------------------------


def test_stamp_a_file_without_header(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [pline("p1", gold=["doc-a"]), "", pline("p2")])
    with pytest.raises(GoldenPromptError, match="field 'set'"):
        stamp_golden_file(p)
    with raises_at(p, 1, "gold", "not in the corpus"):
        stamp_golden_file(p, set_id="team.set", doc_ids=["doc-b"])
    fp = stamp_golden_file(p, set_id="team.set", corpus_signature=SIG, doc_ids=DOC_IDS)
    gs = load_golden_prompts(p, corpus_signature=SIG)
    assert gs.fingerprint == fp and [q.id for q in gs.prompts] == ["p1", "p2"]
    assert gs.header["source"] == "hand-written" and gs.corpus_signature == SIG


def test_stamp_keeps_the_header_set_and_description(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [header(description="mine", fingerprint="stale"), pline()])
    stamp_golden_file(p)
    gs = load_golden_prompts(p)
    assert gs.set_id == "team.set" and gs.header["description"] == "mine" and gs.corpus_signature is None


def test_stamp_command_line(tmp_path, capsys):
    p = write_lines(tmp_path / "g.jsonl", [pline(gold=["expense-reimbursement-policy"])])
    assert main(["stamp", str(p), "--set", "demo.extra"]) == 0
    snap = load_corpus("demo")
    assert load_golden_prompts(p, corpus_signature=snap.signature).corpus_signature == snap.signature
    assert main(["stamp", str(p), "--corpus-kind", "none"]) == 0
    assert load_golden_prompts(p).corpus_signature is None
    assert "fingerprint" in capsys.readouterr().out


# --- load errors: file, line and field ---------------------------------------------------------


def test_empty_and_missing_files(tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text("", encoding="utf-8")
    with raises_at(p, None, None, "empty file"):
        load(p)
    with raises_at(tmp_path / "nope.jsonl", None, None, "cannot read"):
        load(tmp_path / "nope.jsonl")


@pytest.mark.parametrize("line_no", [1, 3])
def test_invalid_json(tmp_path, line_no):
    lines = [header(), pline("p1"), pline("p2")]
    lines[line_no - 1] = '{"id": "p1", oops'
    p = write_lines(tmp_path / "g.jsonl", lines)
    with raises_at(p, line_no, None, "invalid JSON"):
        load(p)


@pytest.mark.parametrize("bad, field, pattern", [
    ({"kind": "other", "version": 1, "set": "a.b"}, "kind", "missing header"),
    ({"kind": "eval-pipeline/question-set", "version": 1}, "kind", "golden_from_question_set"),
    (header(version=2), "version", "unsupported version 2"),
    (header(set="handbook"), "set", "not a namespaced set id"),
    (header(set="Team.Set"), "set", "not a namespaced set id"),
    (header(set="a.b.c"), "set", "not a namespaced set id"),
    (header(set=None), "set", "not a namespaced set id"),
    (header(owner="me"), "owner", r"unknown header field\(s\) \['owner'\]"),
    (header(corpus_signature=5), "corpus_signature", "must be a non-empty string"),
    (header(description="a\x00b"), "description", "NUL"),
])
def test_bad_headers(tmp_path, bad, field, pattern):
    p = write_lines(tmp_path / "g.jsonl", [bad, pline()])
    with raises_at(p, 1, field, pattern):
        load(p)


def test_corpus_signature_mismatch(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [header(corpus_signature="1111aaaa2222bbbb"), pline()])
    with raises_at(p, 1, "corpus_signature", "1111aaaa2222bbbb.*9999ffff8888eeee"):
        load(p, corpus_signature="9999ffff8888eeee")
    assert len(load(p, corpus_signature="1111aaaa2222bbbb").prompts) == 1
    p2 = write_lines(tmp_path / "any.jsonl", [header(), pline()])  # no signature: fits any corpus
    assert len(load(p2, corpus_signature="9999ffff8888eeee").prompts) == 1


def test_unknown_gold_and_duplicate_id(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [header(), pline("p1", gold=["doc-a"]), pline("p2", gold=["ghost"])])
    with raises_at(p, 3, "gold", r"not in the corpus: \['ghost'\]"):
        load(p, doc_ids=DOC_IDS)
    assert len(load(p).prompts) == 2  # without doc ids, gold is not checked
    p = write_lines(tmp_path / "g.jsonl", [header(), pline("p1"), "", pline("p2"), pline("p1")])
    with raises_at(p, 5, "id", r"duplicate id 'p1' \(first at line 2\)"):
        load(p)


def test_a_set_with_no_prompt(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [header(), "  "])
    with raises_at(p, None, None, "no prompts"):
        load(p)


SCHEMA = {"type": "object", "required": ["days"], "properties": {"days": {"type": "integer"}}}


@pytest.mark.parametrize("bad, field, pattern", [
    ('["p1"]', None, "expected a JSON object"),
    ({"prompt": "t", "assertions": []}, "id", "missing"),
    ({"id": "p1", "assertions": [], "reference": "r"}, "prompt", "missing"),
    ({"id": "p1", "prompt": "t"}, "assertions", "missing"),
    (pline(id=""), "id", "non-empty string"),
    (pline(prompt=3), "prompt", "non-empty string"),
    (pline(answer="x"), "answer", r"unknown field\(s\) \['answer'\]"),
    (pline(assertions=[]), "assertions", "no assertion and no reference"),
    (pline(assertions=[], reference=""), "reference", "non-empty string"),
    (pline(assertions={"type": "exact"}), "assertions", "must be a list"),
    (pline(prompt="a\x00b"), "prompt", "NUL"),
    (pline(reference="\ud800"), "reference", "lone surrogate"),
    (pline(assertions=[{"type": "contains", "value": "x\x00"}]), "assertions[0].value", "NUL"),
    (pline(form="match"), "form", "valid: MATCH, GAP"),
    (pline(gold="doc-a"), "gold", "list of document ids"),
    (pline(gold=["doc-a", "doc-a"]), "gold", "more than once"),
    (pline(tags=["x", 1]), "tags", "list of tags"),
    (pline(static={}), "static", "names nothing"),
    (pline(static={"imports": ["os"]}), "static.imports", "unknown field"),
    (pline(static={"symbols": "f"}), "static.symbols", "list of names"),
    (pline(static={"symbols": ["f()"]}), "static.symbols", "not a dotted Python name"),
    (pline(static={"symbols": []}), "static.symbols", "nothing would be checked"),
    # assertions
    (pline(assertions=["contains"]), "assertions[0]", "must be an object"),
    (pline(assertions=[{"value": "x"}]), "assertions[0].type", "missing"),
    (pline(assertions=[{"type": "similar", "value": "x"}]), "assertions[0].type", "unknown assertion type 'similar'"),
    (pline(assertions=[{"type": "contains", "value": "a"}, {"type": "exact"}]), "assertions[1].value", "missing"),
    (pline(assertions=[{"type": "exact", "value": " "}]), "assertions[0].value", "non-empty string"),
    (pline(assertions=[{"type": "exact", "value": "x", "case_sensitive": True}]), "assertions[0].case_sensitive",
     "unknown field"),
    (pline(assertions=[{"type": "contains", "value": "x", "case_sensitive": "no"}]),
     "assertions[0].case_sensitive", "true or false"),
    (pline(assertions=[{"type": "regex", "pattern": "(unclosed"}]), "assertions[0].pattern",
     "invalid regular expression"),
    (pline(assertions=[{"type": "regex", "pattern": "x", "flags": ["x"]}]), "assertions[0].flags", "unknown flag"),
    (pline(assertions=[{"type": "regex", "pattern": "x", "flags": "i"}]), "assertions[0].flags", "list of flag"),
    (pline(assertions=[{"type": "json_schema", "schema": []}]), "assertions[0].schema", "must be an object"),
    (pline(assertions=[{"type": "json_schema", "schema": {"required": ["a"]}}]), "assertions[0].schema.type",
     "needs a 'type'"),
    (pline(assertions=[{"type": "json_schema", "schema": {**SCHEMA, "additionalProperties": False}}]),
     "assertions[0].schema.additionalProperties", "unsupported schema keyword 'additionalProperties'"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "object", "properties": {
        "days": {"type": "integer", "minimum": 1}}}}]),
     "assertions[0].schema.properties.days.minimum", "unsupported schema keyword 'minimum'"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "array", "items": {"enum": [1]}}}]),
     "assertions[0].schema.items.enum", "unsupported schema keyword"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "dict"}}]), "assertions[0].schema.type",
     "unsupported type 'dict'"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": ["string", "nil"]}}]),
     "assertions[0].schema.type", "unsupported type 'nil'"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": []}}]),
     "assertions[0].schema.type", "non-empty list of distinct names"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": ["null", "null"]}}]),
     "assertions[0].schema.type", "non-empty list of distinct names"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": ["string", "null"], "items": {}}}]),
     "assertions[0].schema.items", "needs \"type\": \"array\""),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "object", "title": "x"}}]),
     "assertions[0].schema.title", "unsupported schema keyword 'title'"),
    (pline(assertions=[{"type": "regex", "pattern": "cafe\u0301"}]), "assertions[0].pattern", "not in Unicode NFC"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "string", "required": ["a"]}}]),
     "assertions[0].schema.required", "needs \"type\": \"object\""),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "object", "items": {}}}]),
     "assertions[0].schema.items", "needs \"type\": \"array\""),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "object", "required": ["a", "a"]}}]),
     "assertions[0].schema.required", "twice"),
    (pline(assertions=[{"type": "json_schema", "schema": {"type": "object", "properties": ["a"]}}]),
     "assertions[0].schema.properties", "must map property names"),
])
def test_bad_prompt_lines_name_file_line_and_field(tmp_path, bad, field, pattern):
    p = write_lines(tmp_path / "g.jsonl", [header(), pline("p0"), bad])
    with raises_at(p, 3, field, pattern):
        load(p)


def test_errors_are_question_set_errors(tmp_path):
    """Callers that already stop a run on a bad question set stop on a bad golden set too."""
    p = write_lines(tmp_path / "g.jsonl", [header(set="bad"), pline()])
    with pytest.raises(QuestionSetError):
        load(p)


def test_valid_optional_fields_load(tmp_path):
    line = pline(assertions=[
        {"type": "regex", "pattern": "^yes$", "flags": ["m", "i", "m"]},
        {"type": "json_schema", "schema": {"type": "object", "properties": {
            "items": {"type": "array", "items": {"type": "object", "required": ["n"]}}, "any": {},
            "maybe": {"type": ["object", "null"], "required": ["m"]}}}},
        {"type": "contains", "value": "x", "case_sensitive": False},
    ], reference=None, gold=[], tags=["t"], form=None, static={"allowed_imports": []})
    prompt = load(write_lines(tmp_path / "g.jsonl", [header(), line])).prompts[0]
    regex, schema, contains = prompt.assertions
    assert regex.flags == ("i", "m") and regex.compiled().search("a\nYES\n")
    assert schema.schema["properties"]["any"] == {}
    assert contains.to_json() == {"type": "contains", "value": "x"} and not contains.case_sensitive
    assert prompt.static == StaticOptions(allowed_imports=(), symbols=())  # the standard library only
    assert prompt.gold == () and prompt.reference is None and prompt.tags == ("t",)


# --- Assertion objects --------------------------------------------------------------------------


def test_assertions_are_validated_on_construction():
    with pytest.raises(GoldenPromptError, match="invalid regular expression"):
        Assertion.regex("[")
    with pytest.raises(GoldenPromptError, match="unknown assertion type"):
        Assertion("fuzzy", {"value": "x"})
    with pytest.raises(GoldenPromptError, match="unsupported schema keyword 'enum'"):
        Assertion.json_schema({"type": "string", "enum": ["a"]})
    with pytest.raises(ValueError, match="no pattern"):
        Assertion.exact("x").compiled()


def test_assertions_are_immutable_and_hashable():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    a = Assertion.json_schema(schema)
    schema["properties"]["a"]["type"] = "number"
    a.schema["properties"]["a"]["type"] = "null"
    assert a.to_json()["schema"]["properties"]["a"] == {"type": "string"}
    assert Assertion.contains("x") == Assertion.from_json({"type": "contains", "value": "x", "case_sensitive": False})
    assert len({Assertion.exact("x"), Assertion.exact("x"), PROMPTS[0]}) == 2


# --- the question set used as a golden set -------------------------------------------------------


QUESTIONS = QuestionSet(questions=(
    Question("q1", "where is a?", ("doc-a",), form="MATCH", gist="in a"),
    Question("q2", "nothing answers this", (), form="GAP", hard_class="abstention"),
    Question("q3", "b and a?", ("doc-a", "doc-b"), form="GAP", hard_class="multi-gold", gist="both"),
    Question("q4", "no gist here", ("doc-b",)),
), header={"kind": "eval-pipeline/question-set", "version": 1, "corpus_signature": SIG}, path="qs.jsonl")


def test_golden_from_question_set_skips_abstentions_by_default(tmp_path):
    gs = golden_from_question_set(QUESTIONS, set_id="demo.retrieval")
    assert [p.id for p in gs.prompts] == ["q1", "q3"]  # q2 abstains, q4 has no gist
    assert gs.prompts[1] == GoldenPrompt("q3", "b and a?", (), reference="both", gold=("doc-a", "doc-b"),
                                         form="GAP", tags=("multi-gold",))
    assert gs.corpus_signature == SIG and gs.header["fingerprint"] == gs.fingerprint
    p = tmp_path / "g.jsonl"
    write_golden_prompts(p, gs)
    assert load_golden_prompts(p, corpus_signature=SIG, doc_ids=DOC_IDS).prompts == gs.prompts


def test_golden_from_question_set_can_keep_abstentions():
    gs = golden_from_question_set(QUESTIONS, set_id="demo.retrieval", include_abstentions=True)
    q2 = gs.by_id()["q2"]
    assert q2.reference == ABSTENTION_REFERENCE and q2.gold == () and q2.tags == ("abstention",)
    assert [p.id for p in gs.prompts] == ["q1", "q2", "q3"]


def test_golden_from_question_set_errors():
    with pytest.raises(GoldenPromptError, match="field 'set'"):
        golden_from_question_set(QUESTIONS, set_id="retrieval")
    with pytest.raises(GoldenPromptError, match="no question has a gist"):
        golden_from_question_set([Question("q1", "t", ("doc-a",))], set_id="a.b")


def test_the_demo_question_set_as_a_golden_set():
    from eval_pipeline.questions.sets import load_question_set

    snap = load_corpus("demo")
    qs = load_question_set(DEMO_DATA_DIR / "questions.jsonl", corpus_signature=snap.signature,
                           doc_ids=[d.doc_id for d in snap.documents])
    gs = golden_from_question_set(qs, set_id="demo.retrieval")
    assert len(gs.prompts) == qs.counts()["answerable"]
    assert all(p.reference and not p.assertions and p.gold for p in gs.prompts)
