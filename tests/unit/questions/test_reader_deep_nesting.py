"""A golden prompt set whose json_schema is nested deeper than MAX_SCHEMA_DEPTH is refused naming
the file, the line and the path of the schema, not a bare RecursionError; so is a line nested
too deeply for the JSON reader, in every JSONL reader of the stage (#25, item 7)."""

from __future__ import annotations

import json

import pytest

from eval_pipeline.corpus.sources import CorpusError, load_corpus
from eval_pipeline.questions.golden import MAX_SCHEMA_DEPTH, GoldenPromptError, load_golden_prompts
from eval_pipeline.questions.sets import QuestionSetError, load_question_set

HEADER = {"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "team.deep"}


def _schema(depth: int, via: str = "properties") -> str:
    """The JSON text of a schema `depth` levels deep (built as text: json.dumps would recurse)."""
    if via == "properties":
        opening, closing = '{"type": "object", "properties": {"a": ', "}}"
    else:
        opening, closing = '{"type": "array", "items": ', "}"
    return opening * (depth - 1) + '{"type": "string"}' + closing * (depth - 1)


def _golden(tmp_path, schema: str) -> object:
    path = tmp_path / "golden.jsonl"
    prompt = '{"id": "p1", "prompt": "give JSON", "assertions": [{"type": "json_schema", "schema": ' + schema + "}]}"
    path.write_text(json.dumps(HEADER) + "\n" + prompt + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("via", ["properties", "items"])
def test_a_schema_at_the_limit_loads(tmp_path, via):
    path = _golden(tmp_path, _schema(MAX_SCHEMA_DEPTH, via))
    assert len(load_golden_prompts(path, require_fingerprint=False).prompts) == 1


@pytest.mark.parametrize("via, step", [("properties", ".properties.a"), ("items", ".items")])
@pytest.mark.parametrize("depth", [MAX_SCHEMA_DEPTH + 1, 900, 5000])
def test_a_schema_deeper_than_the_limit_is_refused(tmp_path, via, step, depth):
    path = _golden(tmp_path, _schema(depth, via))
    with pytest.raises(GoldenPromptError) as info:
        load_golden_prompts(path, require_fingerprint=False)
    message = str(info.value)
    where = "assertions[0].schema" + step * MAX_SCHEMA_DEPTH
    too_deep_to_read = f"{path}:2: invalid JSON: nested too deeply to read"  # past the JSON reader's own limit
    assert message in (f"{path}:2: field {where!r}: the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels "
                       f"(MAX_SCHEMA_DEPTH)", too_deep_to_read), message


def test_max_schema_depth_is_stated():
    assert MAX_SCHEMA_DEPTH == 32


@pytest.mark.parametrize("depth", [2000, 100_000])
def test_a_line_nested_too_deeply_for_the_reader(tmp_path, depth):
    deep = "[" * depth + "]" * depth
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps(HEADER) + "\n" + '{"id": "p1", "prompt": ' + deep + "}\n", encoding="utf-8")
    with pytest.raises(GoldenPromptError, match=rf"^{golden}:2: invalid JSON: nested too deeply"):
        load_golden_prompts(golden, require_fingerprint=False)
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"kind": "eval-pipeline/question-set", "version": 1, "corpus_signature": "s"}\n'
                         '{"qid": "q1", "question": ' + deep + "}\n", encoding="utf-8")
    with pytest.raises(QuestionSetError, match=rf"^{questions}:2: invalid JSON: nested too deeply"):
        load_question_set(questions, corpus_signature="s", doc_ids=[], require_fingerprint=False)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"doc_id": "d", "content": ' + deep + "}\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"^{corpus}:1: invalid JSON: nested too deeply"):
        load_corpus("jsonl", str(corpus))
