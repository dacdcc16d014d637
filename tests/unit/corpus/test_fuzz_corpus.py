"""Property-based test of the corpus readers, a JSONL file (ours or BEIR's) and a folder (#25, hunt
the class): random bytes, random Unicode (line separators, lone surrogates, bidi and zero-width
controls, NUL), deep nesting, huge values, file names that are not UTF-8 and links. Strict and
lenient, the reader loads the corpus or raises CorpusError naming the file (or the source),
within a time bound; no other exception escapes. 50 inputs for each kind of source (100 for the
reader) keep the pair under 10 s."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_pipeline.corpus.sources import CorpusError, load_corpus

# A hang detector, not a timing: a reader that backtracks or recurses without bound takes minutes;
# 30 s per input leaves room for a loaded 2-core machine (timings vary ~2.5x).
HANG = timedelta(seconds=30)

SPECIAL = ["\u2028", "\u0085", "\x00", "\r", "\n", "\t", "\u200b", "\u202e", "\u2066", "\ufeff", "\ud800", "\udfff",
           '"', "#", "é"]
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=15).map("".join)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)
CONTENT = st.one_of(TEXT, VALUES, st.sampled_from([60, 100_000]).map(lambda n: "c " * (n // 2)))
OURS = st.fixed_dictionaries({"doc_id": st.one_of(TEXT, st.sampled_from(["a", "b", "a"]), VALUES),
                              "content": CONTENT},
                             optional={"title": VALUES, "description": VALUES, "filename": VALUES, "metadata": VALUES})
BEIRS = st.fixed_dictionaries({"_id": st.one_of(TEXT, st.integers(), VALUES), "text": CONTENT},
                              optional={"title": VALUES, "metadata": VALUES})
DEEP = st.tuples(st.sampled_from([50, 3_000, 100_000]), st.sampled_from(["", "9" * 5_000])).map(
    lambda t: '{"doc_id": "deep", "content": ' + "[" * t[0] + t[1] + "]" * t[0] + "}")
LIMITS = st.sampled_from([50, 5_000_000])


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@st.composite
def jsonl_files(draw, records) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=300))
    lines = [json.dumps(r, ensure_ascii=draw(st.booleans())) for r in draw(st.lists(records, max_size=4))]
    lines += draw(st.lists(st.one_of(DEEP, TEXT), max_size=1))
    return _encode(draw(st.sampled_from(["\n", "\r\n", "\u2028"])).join(lines) + "\n")


NAMES = st.one_of(
    st.text(st.characters(exclude_characters="/\x00", exclude_categories=["Cs"]), min_size=1, max_size=12),
    st.binary(min_size=1, max_size=8).filter(lambda b: b"/" not in b and b"\x00" not in b).map(os.fsdecode),
).filter(lambda n: n not in (".", ".."))
SUFFIXES = st.sampled_from([".md", ".txt", ".json", ".pdf", ""])
FOLDER_FILES = st.one_of(st.binary(max_size=200), TEXT.map(_encode), jsonl_files(OURS),
                         st.builds(lambda r: _encode(json.dumps(r)), OURS), DEEP.map(str.encode))


def _check(accepted: tuple[str, ...], call) -> None:
    try:
        call()
    except CorpusError as exc:
        assert str(exc).startswith(accepted), str(exc)


FUZZ = settings(max_examples=50, deadline=HANG, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from(["jsonl", "beir"]).flatmap(lambda k: st.tuples(st.just(k), jsonl_files(
    OURS if k == "jsonl" else BEIRS))), st.booleans(), LIMITS)
def test_a_jsonl_corpus_loads_or_names_the_file(kind_and_data, lenient, limit):
    kind, data = kind_and_data
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "corpus.jsonl"
        path.write_bytes(data)
        _check((str(path), f"{kind}:{path}"),
               lambda: load_corpus(kind, str(path), lenient=lenient, max_document_chars=limit))


@FUZZ
@given(st.lists(st.tuples(NAMES, SUFFIXES, st.one_of(FOLDER_FILES, st.sampled_from(["link", "loop", "fifo"]))),
                min_size=1, max_size=4), st.booleans(), LIMITS)
def test_a_folder_corpus_loads_or_names_the_file(entries, lenient, limit):
    with tempfile.TemporaryDirectory() as name:
        root = Path(name) / "docs"
        root.mkdir()
        for stem, suffix, data in entries:
            path = root / (stem + suffix)
            if os.path.lexists(path):
                continue  # a name drawn twice: writing to a FIFO made before would block the test forever
            try:
                if data == "link":
                    path.symlink_to(Path(name) / "outside.md" if len(stem) % 2 else "missing")
                elif data == "loop":
                    path.symlink_to(path.name)
                elif data == "fifo":
                    os.mkfifo(path)
                else:
                    path.write_bytes(data)
            except (OSError, UnicodeEncodeError):  # a name this file system refuses, or already taken
                continue
        (Path(name) / "outside.md").write_text("# outside\nnot in the folder", encoding="utf-8")
        _check((str(root), f"folder:{root}"),
               lambda: load_corpus("folder", str(root), lenient=lenient, max_document_chars=limit))
