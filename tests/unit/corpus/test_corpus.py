"""Tests for eval_pipeline.corpus.sources: every source kind, strict and lenient error handling,
and the order-independent corpus signature."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest

from eval_pipeline.corpus.sources import (
    DEMO_DATA_DIR,
    CorpusError,
    CorpusSnapshot,
    Document,
    SkippedRecord,
    corpus_signature,
    load_corpus,
)

# --- helpers ---------------------------------------------------------------------------


def rec(doc_id, content="some content", **extra) -> dict:
    return {"doc_id": doc_id, "content": content, **extra}


def write_jsonl(path: Path, records) -> Path:
    """Write records; a str record is written verbatim as one line (for malformed lines)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = [
    rec("alpha", "Alpha body text.", title="Alpha", description="first", filename="a/alpha.md"),
    rec("beta", "Beta body text.", title="Beta", description="second", filename="b/beta.md"),
    rec("gamma", "Gamma body text.", title="Gamma"),
]


# --- jsonl -----------------------------------------------------------------------------


def test_jsonl_loads_all_fields_in_file_order(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", GOOD + [rec("delta", "D", metadata={"lang": "en"})])
    snap = load_corpus("jsonl", str(p))
    assert isinstance(snap, CorpusSnapshot)
    assert [d.doc_id for d in snap.documents] == ["alpha", "beta", "gamma", "delta"]
    a = snap.documents[0]
    assert (a.title, a.description, a.filename, a.content) == ("Alpha", "first", "a/alpha.md", "Alpha body text.")
    # optional fields default to empty strings
    g = snap.by_id()["gamma"]
    assert (g.description, g.filename) == ("", "")
    # user metadata kept, the internal location key is not leaked
    assert snap.by_id()["delta"].metadata == {"lang": "en"}
    assert all("_location" not in d.metadata for d in snap.documents)
    assert snap.source == f"jsonl:{p}"
    assert snap.skipped == ()


def test_jsonl_blank_lines_are_ignored_and_null_optional_fields_become_empty(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(
        "\n" + json.dumps(rec("a", title=None, metadata=None)) + "\n   \n" + json.dumps(rec("b")) + "\n\n",
        encoding="utf-8",
    )
    snap = load_corpus("jsonl", str(p))
    assert [d.doc_id for d in snap.documents] == ["a", "b"]
    assert snap.documents[0].title == ""
    assert snap.documents[0].metadata == {}


def test_numeric_doc_id_becomes_string_but_bool_is_rejected(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", [rec(17)])
    assert load_corpus("jsonl", str(p)).documents[0].doc_id == "17"
    p = write_jsonl(tmp_path / "d.jsonl", [rec(True)])
    with pytest.raises(CorpusError, match=r"d\.jsonl:1: field 'doc_id' must be a string, got bool"):
        load_corpus("jsonl", str(p))


@pytest.mark.parametrize(
    "doc_id",
    [
        "x'; DROP TABLE t;--",
        'say "hi"',
        "a/b/c",
        "back\\slash",
        "50% off_%",
        "ünïcødé-東京",
        "$$dollar$$",
    ],
)
def test_awkward_ids_load_unchanged(tmp_path, doc_id):
    p = write_jsonl(tmp_path / "c.jsonl", [rec(doc_id, "body")])
    snap = load_corpus("jsonl", str(p))
    assert [d.doc_id for d in snap.documents] == [doc_id]
    assert doc_id in snap.by_id()


# --- signature -------------------------------------------------------------------------

HEX16 = re.compile(r"[0-9a-f]{16}")
HEX64 = re.compile(r"[0-9a-f]{64}")

# Pinned by hand from the documented recipe, not by calling the code under test:
#   content_hash = sha256(title \0 description \0 filename \0 content \0), 64 lowercase hex
#   signature    = sha256("\n".join(sorted(f"{doc_id}\t{content_hash}")))[:16]
# computed once with `python -c "import hashlib; ..."`.  The signature is persisted (question
# sets and vector tables name the corpus by it), so a change to either value is a deliberate,
# cache-invalidating format change and this test must be updated on purpose.
GOOD_ALPHA_CONTENT_HASH = "80e5b7ceb68f4d6f1fef4c3a49d11fdd960757759f4903b9679f6362c31ca53f"
GOOD_SIGNATURE = "3ed3a68622a6fcf1"
SINGLE_X_SIGNATURE = "19bb19b563e083e7"  # one document: doc_id "x", content "x", other fields empty


def test_signature_matches_the_hand_computed_values(tmp_path):
    snap = load_corpus("jsonl", str(write_jsonl(tmp_path / "a.jsonl", GOOD)))
    assert snap.by_id()["alpha"].content_hash == GOOD_ALPHA_CONTENT_HASH
    assert snap.signature == GOOD_SIGNATURE
    assert corpus_signature([Document("x", "", "", "", "x")]) == SINGLE_X_SIGNATURE


def test_signature_and_content_hash_format():
    docs = [Document(f"d{i}", f"T{i}", "", "", f"body {i}") for i in range(5)]
    for d in docs:
        assert HEX64.fullmatch(d.content_hash), d.content_hash
    sig = corpus_signature(docs)
    # exactly 16 lowercase hex digits: no prefix, no upper case, no padding
    assert HEX16.fullmatch(sig), sig
    # an empty corpus still has a well-formed signature (the hash of nothing), distinct from any real one
    assert HEX16.fullmatch(corpus_signature([])) and corpus_signature([]) != sig


def test_signature_is_order_independent(tmp_path):
    records = [rec(f"d{i:02d}", f"content number {i}", title=f"T{i}") for i in range(20)]
    base_snap = load_corpus("jsonl", str(write_jsonl(tmp_path / "a.jsonl", records)))
    base = base_snap.signature
    rng = random.Random(7)
    for n in range(3):
        shuffled = records[:]
        rng.shuffle(shuffled)
        assert shuffled != records
        snap = load_corpus("jsonl", str(write_jsonl(tmp_path / f"s{n}.jsonl", shuffled)))
        # the loader keeps file order, so equal signatures come from the signature, not the loader
        assert [d.doc_id for d in snap.documents] == [r["doc_id"] for r in shuffled]
        assert snap.signature == base
    docs = list(base_snap.documents)
    assert corpus_signature(reversed(docs)) == base
    assert corpus_signature(iter(docs)) == base  # any iterable, consumed once
    assert HEX16.fullmatch(base), base


@pytest.mark.parametrize(
    "field_name, new_value",
    [("content", "changed body"), ("title", "Changed"), ("description", "changed"), ("filename", "x.md"), ("doc_id", "other")],
)
def test_signature_changes_when_any_engine_visible_field_changes(tmp_path, field_name, new_value):
    base = load_corpus("jsonl", str(write_jsonl(tmp_path / "a.jsonl", GOOD))).signature
    edited = [dict(r) for r in GOOD]
    assert edited[1][field_name] != new_value
    edited[1][field_name] = new_value
    snap = load_corpus("jsonl", str(write_jsonl(tmp_path / "b.jsonl", edited)))
    assert HEX16.fullmatch(snap.signature)
    assert snap.signature != base
    if field_name != "doc_id":  # the id is not part of the content hash, only of the signature
        assert snap.documents[1].content_hash != Document(**{k: GOOD[1].get(k, "") for k in
                                                             ("doc_id", "title", "description", "filename",
                                                              "content")}).content_hash
    # and only that document's entry changed: reverting it restores the signature exactly
    reverted = load_corpus("jsonl", str(write_jsonl(tmp_path / "c.jsonl", GOOD))).signature
    assert reverted == base


def test_each_field_changes_the_signature_differently():
    base = Document("d", "title", "desc", "file.md", "body")
    variants = {
        "base": base,
        "title": Document("d", "title2", "desc", "file.md", "body"),
        "description": Document("d", "title", "desc2", "file.md", "body"),
        "filename": Document("d", "title", "desc", "file2.md", "body"),
        "content": Document("d", "title", "desc", "file.md", "body2"),
        "doc_id": Document("d2", "title", "desc", "file.md", "body"),
    }
    signatures = {name: corpus_signature([doc]) for name, doc in variants.items()}
    assert len(set(signatures.values())) == len(variants), signatures
    hashes = {name: doc.content_hash for name, doc in variants.items()}
    assert hashes["doc_id"] == hashes["base"]  # the id is paired with the hash, not hashed into it
    assert len({h for n, h in hashes.items() if n != "doc_id"}) == 5


def test_signature_ignores_metadata_and_has_field_boundaries():
    d1 = Document("x", "ab", "", "", "body", {"k": 1})
    d2 = Document("x", "ab", "", "", "body", {"k": 2})
    assert d1.content_hash == d2.content_hash
    assert corpus_signature([d1]) == corpus_signature([d2])
    # moving text across a field boundary must change the hash
    d3 = Document("x", "a", "b", "", "body")
    assert d1.content_hash != d3.content_hash
    assert corpus_signature([d1]) != corpus_signature([d3])
    # a second document with the same content is still a second document
    assert corpus_signature([d1, Document("y", "", "", "", "body")]) != corpus_signature([d1])


def test_signature_changes_when_a_document_is_added_or_removed(tmp_path):
    base = load_corpus("jsonl", str(write_jsonl(tmp_path / "a.jsonl", GOOD))).signature
    fewer = load_corpus("jsonl", str(write_jsonl(tmp_path / "b.jsonl", GOOD[:2]))).signature
    more = load_corpus("jsonl", str(write_jsonl(tmp_path / "c.jsonl", GOOD + [rec("zeta")]))).signature
    assert len({base, fewer, more}) == 3
    assert all(HEX16.fullmatch(s) for s in (base, fewer, more))


# --- strict mode errors (jsonl) --------------------------------------------------------


@pytest.mark.parametrize(
    "bad_line, reason_pattern",
    [
        ("{not json", r"invalid JSON"),
        ('["a", "list"]', r"expected a JSON object, got list"),
        ('"just a string"', r"expected a JSON object, got str"),
        (json.dumps({"doc_id": "m"}), r"field 'content' is empty"),
        (json.dumps(rec("m", "   ")), r"field 'content' is empty"),
        (json.dumps({"content": "x"}), r"field 'doc_id' is empty"),
        (json.dumps(rec("", "x")), r"field 'doc_id' is empty"),
        (json.dumps(rec("m", title=5)), r"field 'title' must be a string, got int"),
        (json.dumps(rec("m", content=["x"])), r"field 'content' must be a string, got list"),
        (json.dumps(rec("m", description={"a": 1})), r"field 'description' must be a string, got dict"),
        (json.dumps(rec("m", metadata=["x"])), r"field 'metadata' must be an object"),
        (json.dumps(rec("line\nbreak")), r"contains a control character"),
        (json.dumps(rec("carriage\rreturn")), r"contains a control character"),
        (json.dumps(rec("tab\there")), r"contains a control character"),
    ],
)
def test_strict_error_names_file_and_line(tmp_path, bad_line, reason_pattern):
    p = write_jsonl(tmp_path / "corpus.jsonl", [GOOD[0], GOOD[1], bad_line, GOOD[2]])
    with pytest.raises(CorpusError) as info:
        load_corpus("jsonl", str(p))
    msg = str(info.value)
    assert msg.startswith(f"{p}:3: "), msg
    assert re.search(reason_pattern, msg), msg


def test_strict_duplicate_doc_id_names_both_locations(tmp_path):
    p = write_jsonl(tmp_path / "corpus.jsonl", [GOOD[0], GOOD[1], rec("alpha", "again")])
    with pytest.raises(CorpusError) as info:
        load_corpus("jsonl", str(p))
    msg = str(info.value)
    assert msg.startswith(f"{p}:3: duplicate doc_id 'alpha'")
    assert f"first seen at {p}:1" in msg


def test_line_numbers_count_blank_lines(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps(GOOD[0]) + "\n\n\n{broken\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(p))}:4: invalid JSON"):
        load_corpus("jsonl", str(p))


def test_missing_path_nonexistent_path_and_unknown_kind(tmp_path):
    with pytest.raises(CorpusError, match="needs a path"):
        load_corpus("jsonl")
    with pytest.raises(CorpusError, match="needs a path"):
        load_corpus("folder", "")
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(CorpusError, match="does not exist") as info:
        load_corpus("jsonl", str(missing))
    assert str(missing) in str(info.value)
    p = write_jsonl(tmp_path / "c.jsonl", GOOD)
    with pytest.raises(CorpusError, match=r"unknown corpus source 'xml'.*demo, folder, jsonl, beir"):
        load_corpus("xml", str(p))  # type: ignore[arg-type]


def test_jsonl_kind_on_a_directory_is_a_corpus_error(tmp_path):
    with pytest.raises(CorpusError, match="cannot open corpus file"):
        load_corpus("jsonl", str(tmp_path))


def test_all_records_bad_means_no_usable_documents(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", ["{bad", "[1]"])
    with pytest.raises(CorpusError, match=r"no usable documents \(2 skipped\)"):
        load_corpus("jsonl", str(p), lenient=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="no usable documents"):
        load_corpus("jsonl", str(empty))


def test_jsonl_invalid_utf8_reports_the_right_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(
        json.dumps(GOOD[0]).encode() + b"\n" + json.dumps(GOOD[1]).encode() + b"\n"
        + b'{"doc_id": "bad", "content": "\xff\xfe"}\n'
    )
    with pytest.raises(CorpusError) as info:
        load_corpus("jsonl", str(p))
    assert str(info.value).startswith(f"{p}:3: ")


def test_lenient_jsonl_skips_invalid_utf8_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(
        json.dumps(GOOD[0]).encode() + b"\n" + b'{"doc_id": "bad", "content": "\xff"}\n'
        + json.dumps(GOOD[1]).encode() + b"\n"
    )
    snap = load_corpus("jsonl", str(p), lenient=True)
    assert [d.doc_id for d in snap.documents] == ["alpha", "beta"]
    assert [s.location for s in snap.skipped] == [f"{p}:2"]


# --- lenient mode ----------------------------------------------------------------------


def test_lenient_skips_and_records_every_bad_record(tmp_path):
    records = [
        GOOD[0],                                  # 1 ok
        "{not json",                              # 2 invalid JSON
        "[1, 2]",                                 # 3 not an object
        json.dumps({"doc_id": "nobody"}),         # 4 missing content
        json.dumps(rec("alpha", "dup")),          # 5 duplicate of line 1
        json.dumps(rec("t", title=3)),            # 6 wrong type
        json.dumps(rec("nl\nid")),                # 7 control char in id
        GOOD[1],                                  # 8 ok
        json.dumps(rec("  ", "x")),               # 9 blank id
        GOOD[2],                                  # 10 ok
    ]
    p = write_jsonl(tmp_path / "c.jsonl", records)
    snap = load_corpus("jsonl", str(p), lenient=True)
    assert [d.doc_id for d in snap.documents] == ["alpha", "beta", "gamma"]
    assert snap.by_id()["alpha"].content == "Alpha body text."  # first occurrence kept
    assert all(isinstance(s, SkippedRecord) for s in snap.skipped)
    assert [s.location for s in snap.skipped] == [f"{p}:{n}" for n in (2, 3, 4, 5, 6, 7, 9)]
    reasons = [s.reason for s in snap.skipped]
    assert reasons[0].startswith("invalid JSON")
    assert reasons[1] == "expected a JSON object, got list"
    assert reasons[2] == "field 'content' is empty"
    assert reasons[3].startswith("duplicate doc_id 'alpha'") and f"{p}:1" in reasons[3]
    assert reasons[4] == "field 'title' must be a string, got int"
    assert "control character" in reasons[5]
    assert reasons[6] == "field 'doc_id' is empty"
    # nothing silently dropped
    assert len(snap.documents) + len(snap.skipped) == len(records)


def test_lenient_with_only_good_records_equals_strict(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", GOOD)
    strict, lenient = load_corpus("jsonl", str(p)), load_corpus("jsonl", str(p), lenient=True)
    assert strict.documents == lenient.documents
    assert strict.signature == lenient.signature
    assert lenient.skipped == ()


# --- folder ----------------------------------------------------------------------------


def make_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "with-heading.md").write_text("\n# The Real Title\n\nBody of the markdown.\n", encoding="utf-8")
    (root / "no_heading-here.md").write_text("Plain first line.\n# Later heading\n", encoding="utf-8")
    (root / "notes.txt").write_text("Text file content.", encoding="utf-8")
    (root / "sub" / "record.json").write_text(
        json.dumps({"title": "Json Title", "description": "desc", "content": "Json content."}), encoding="utf-8"
    )
    (root / "sub" / "explicit.json").write_text(
        json.dumps({"doc_id": "custom-id", "filename": "elsewhere/x.pdf", "content": "C"}), encoding="utf-8"
    )
    return root


def test_folder_loads_md_txt_json(tmp_path):
    root = make_folder(tmp_path / "docs")
    snap = load_corpus("folder", str(root))
    docs = snap.by_id()
    assert set(docs) == {"with-heading", "no_heading-here", "notes", "sub/record", "custom-id"}
    assert snap.source == f"folder:{root}"
    assert snap.skipped == ()

    md = docs["with-heading"]
    assert md.title == "The Real Title"
    assert md.filename == "with-heading.md"
    assert md.content == "\n# The Real Title\n\nBody of the markdown.\n"
    assert md.description == ""

    # no heading on the first non-blank line: title from the file stem, - and _ become spaces
    assert docs["no_heading-here"].title == "no heading here"
    assert docs["notes"].title == "notes"
    assert docs["notes"].filename == "notes.txt"
    assert docs["notes"].content == "Text file content."

    js = docs["sub/record"]
    assert (js.title, js.description, js.content, js.filename) == ("Json Title", "desc", "Json content.", "sub/record.json")
    # explicit fields in a .json object win over the path-derived defaults
    assert docs["custom-id"].filename == "elsewhere/x.pdf"
    assert all("_location" not in d.metadata for d in snap.documents)


def test_folder_order_is_deterministic_and_signature_stable(tmp_path):
    a = load_corpus("folder", str(make_folder(tmp_path / "a")))
    b = load_corpus("folder", str(make_folder(tmp_path / "b")))
    assert [d.doc_id for d in a.documents] == [d.doc_id for d in b.documents]
    assert a.signature == b.signature  # signature does not depend on the root path


def test_folder_md_title_change_changes_signature(tmp_path):
    root = make_folder(tmp_path / "a")
    before = load_corpus("folder", str(root)).signature
    (root / "with-heading.md").write_text("# Another Title\n\nBody of the markdown.\n", encoding="utf-8")
    assert load_corpus("folder", str(root)).signature != before


def _bad_folder_file(root: Path, kind: str) -> tuple[Path, str]:
    if kind == "binary":
        p = root / "bin.txt"
        p.write_bytes(b"abc\x00def")
        return p, "binary file (contains NUL bytes)"
    if kind == "utf8":
        p = root / "latin.md"
        p.write_bytes(b"caf\xe9 au lait")
        return p, "invalid UTF-8 at byte 3"
    if kind == "suffix":
        p = root / "image.png"
        p.write_bytes(b"png")
        return p, "unsupported file type (expected .md, .txt, .json)"
    if kind == "empty":
        p = root / "empty.md"
        p.write_text("", encoding="utf-8")
        return p, "empty content"
    if kind == "blank":
        p = root / "blank.txt"
        p.write_text("  \n\t\n", encoding="utf-8")
        return p, "empty content"
    if kind == "json-array":
        p = root / "arr.json"
        p.write_text("[1, 2]", encoding="utf-8")
        return p, "expected a JSON object, got list"
    if kind == "json-no-content":
        p = root / "nocontent.json"
        p.write_text('{"title": "t"}', encoding="utf-8")
        return p, "field 'content' is empty"
    raise AssertionError(kind)


FOLDER_BAD_KINDS = ["binary", "utf8", "suffix", "empty", "blank", "json-array", "json-no-content"]


@pytest.mark.parametrize("kind", FOLDER_BAD_KINDS)
def test_folder_strict_errors_name_the_file(tmp_path, kind):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\nfine", encoding="utf-8")
    bad, reason = _bad_folder_file(root, kind)
    with pytest.raises(CorpusError) as info:
        load_corpus("folder", str(root))
    assert str(info.value) == f"{bad}: {reason}"


def test_folder_invalid_json_names_file_and_line(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "broken.json").write_text('{\n  "content": "x",\n  oops\n}', encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(root / 'broken.json'))}:3: invalid JSON"):
        load_corpus("folder", str(root))


def test_folder_lenient_skips_every_bad_file_and_keeps_good_ones(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\nfine", encoding="utf-8")
    (root / "also-good.txt").write_text("ok", encoding="utf-8")
    expected = dict(_bad_folder_file(root, k) for k in FOLDER_BAD_KINDS)
    snap = load_corpus("folder", str(root), lenient=True)
    assert sorted(d.doc_id for d in snap.documents) == ["also-good", "good"]
    assert {s.location: s.reason for s in snap.skipped} == {str(p): r for p, r in expected.items()}
    n_files = sum(1 for p in root.rglob("*") if p.is_file())
    assert len(snap.documents) + len(snap.skipped) == n_files


def test_folder_duplicate_doc_id_from_two_suffixes_names_both_files(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "same.md").write_text("markdown", encoding="utf-8")
    (root / "same.txt").write_text("text", encoding="utf-8")
    with pytest.raises(CorpusError) as info:
        load_corpus("folder", str(root))
    msg = str(info.value)
    assert "duplicate doc_id 'same'" in msg
    assert str(root / "same.md") in msg and str(root / "same.txt") in msg


def test_folder_empty_and_not_a_folder(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(CorpusError, match="no usable documents"):
        load_corpus("folder", str(root))
    with pytest.raises(CorpusError, match="no usable documents"):
        load_corpus("folder", str(root), lenient=True)
    f = tmp_path / "file.md"
    f.write_text("x", encoding="utf-8")
    with pytest.raises(CorpusError, match="not a folder"):
        load_corpus("folder", str(f))
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus("folder", str(tmp_path / "missing"))


def test_folder_only_bad_files_lenient_reports_skipped_count(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.bin").write_bytes(b"x")
    (root / "b.md").write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"no usable documents \(2 skipped\)"):
        load_corpus("folder", str(root), lenient=True)


# --- BEIR ------------------------------------------------------------------------------

BEIR = [
    {"_id": "b1", "title": "First", "text": "first text", "metadata": {"url": "u1"}},
    {"_id": 2, "title": "", "text": "second text"},
    {"_id": "b3", "text": "third text"},
]


def _check_beir(snap: CorpusSnapshot):
    assert [d.doc_id for d in snap.documents] == ["b1", "2", "b3"]
    b1 = snap.by_id()["b1"]
    assert (b1.title, b1.content, b1.description, b1.filename) == ("First", "first text", "", "")
    assert b1.metadata == {"url": "u1"}


def test_beir_plain_file_and_folder(tmp_path):
    f = write_jsonl(tmp_path / "corpus.jsonl", BEIR)
    by_file = load_corpus("beir", str(f))
    by_folder = load_corpus("beir", str(tmp_path))
    _check_beir(by_file)
    _check_beir(by_folder)
    assert by_file.signature == by_folder.signature
    assert by_folder.source == f"beir:{f}"


def test_beir_gzip_file_and_folder(tmp_path):
    gz = tmp_path / "corpus.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(r) for r in BEIR) + "\n")
    _check_beir(load_corpus("beir", str(gz)))
    snap = load_corpus("beir", str(tmp_path))
    _check_beir(snap)
    assert snap.source == f"beir:{gz}"
    # same documents as plain: same signature
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    write_jsonl(plain_dir / "corpus.jsonl", BEIR)
    assert load_corpus("beir", str(plain_dir)).signature == snap.signature


def test_beir_folder_prefers_plain_over_gz(tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl", BEIR)
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"_id": "other", "text": "other"}) + "\n")
    assert load_corpus("beir", str(tmp_path)).source == f"beir:{tmp_path / 'corpus.jsonl'}"


def test_beir_folder_without_corpus_file(tmp_path):
    (tmp_path / "queries.jsonl").write_text("{}\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="no corpus.jsonl or corpus.jsonl.gz"):
        load_corpus("beir", str(tmp_path))


def test_beir_errors_name_file_and_line_and_lenient_skips(tmp_path):
    f = write_jsonl(tmp_path / "corpus.jsonl", [BEIR[0], {"_id": "x"}, {"text": "no id"}, BEIR[2]])
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(f))}:2: field 'text' is empty"):
        load_corpus("beir", str(f))
    snap = load_corpus("beir", str(f), lenient=True)
    assert [d.doc_id for d in snap.documents] == ["b1", "b3"]
    assert [(s.location, s.reason) for s in snap.skipped] == [
        (f"{f}:2", "field 'text' is empty"),
        (f"{f}:3", "field '_id' is empty"),
    ]


def test_beir_truncated_gzip_is_a_corpus_error(tmp_path):
    gz = tmp_path / "corpus.jsonl.gz"
    data = gzip.compress(("\n".join(json.dumps(r) for r in BEIR * 50) + "\n").encode())
    gz.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match="unreadable"):
        load_corpus("beir", str(gz))


# --- demo ------------------------------------------------------------------------------


def test_demo_corpus_loads():
    if not (DEMO_DATA_DIR / "corpus.jsonl").exists():
        pytest.skip("demo corpus eval_pipeline/demo_data/corpus.jsonl does not exist yet")
    snap = load_corpus("demo")
    assert 30 <= len(snap.documents) <= 40
    assert snap.skipped == ()
    assert snap.source == "demo"
    assert len({d.doc_id for d in snap.documents}) == len(snap.documents)
    assert all(d.content.strip() for d in snap.documents)
    assert HEX16.fullmatch(snap.signature), snap.signature
    assert load_corpus("demo").signature == snap.signature
