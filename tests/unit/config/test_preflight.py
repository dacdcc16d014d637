"""Everything that can be checked before embedding is checked before embedding, with a message
naming the file and line (or the file, the variant and the setting): question sets (header
fingerprint, text Postgres cannot store, no answerable question) and variants files
(duplicate YAML keys, reranker options and their values)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.config import sweep as sweep_file
from eval_pipeline.config.sweep import load_sweep
from eval_pipeline.questions.sets import (
    FORMAT_VERSION,
    HEADER_KIND,
    Question,
    QuestionSetError,
    load_beir_questions,
    load_question_set,
    preflight_question_set,
    question_set_fingerprint,
    stamp_question_file,
    write_question_set,
)
from eval_pipeline.ranking import rerankers, variants
from eval_pipeline.ranking.variants import VariantConfigError

REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SIG = "abcdef0123456789"
DOC_IDS = ("doc-a", "doc-b")


def qline(qid="q1", question="where is a?", gold=("doc-a",), **extra) -> dict:
    return {"qid": qid, "question": question, "gold": list(gold), **extra}


def write_set(path: Path, questions: list[dict], *, fingerprint: str | None | bool = True, **header) -> Path:
    """A question file with a header; fingerprint=True computes the right one, None writes null,
    False leaves the key out.  JSON escapes are kept (\\u0000 and \\ud800 stay escapes)."""
    h = {"kind": HEADER_KIND, "version": FORMAT_VERSION, "corpus_signature": SIG, **header}
    if fingerprint is True:
        qs = [Question(q["qid"], q["question"], tuple(q["gold"])) for q in questions]
        h["fingerprint"] = question_set_fingerprint(qs)
    elif fingerprint is not False:
        h["fingerprint"] = fingerprint
    path.write_text("\n".join(json.dumps(o) for o in [h, *questions]) + "\n", encoding="utf-8")
    return path


def load(path, sig=SIG, ids=DOC_IDS):
    return load_question_set(path, corpus_signature=sig, doc_ids=ids, require_fingerprint=True)


# --- question sets: the header's fingerprint --------------------------------------------------


@pytest.mark.parametrize("fingerprint", [False, None], ids=["missing", "null"])
def test_a_header_without_a_fingerprint_is_an_error_saying_how_to_stamp(tmp_path, fingerprint):
    p = write_set(tmp_path / "q.jsonl", [qline()], fingerprint=fingerprint)
    for attempt in (lambda: load(p),
                    lambda: preflight_question_set("file", p, corpus_signature=SIG, doc_ids=DOC_IDS)):
        with pytest.raises(QuestionSetError) as info:
            attempt()
        msg = str(info.value)
        assert msg.startswith(f"{p}:1: ") and "no fingerprint" in msg
        assert f"python -m eval_pipeline.questions.sets stamp {p}" in msg


def test_a_stamped_file_loads(tmp_path):
    p = write_set(tmp_path / "q.jsonl", [qline()], fingerprint=False)
    stamp_question_file(p, SIG, DOC_IDS)
    assert [q.qid for q in load(p).questions] == ["q1"]


@pytest.mark.parametrize("path, corpus", [
    (REPO / "eval_pipeline" / "demo_data" / "questions.jsonl", ("demo", None)),
    (FIXTURES / "tiny_questions.jsonl", ("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))),
])
def test_the_committed_question_sets_have_fingerprints_and_load(path, corpus):
    snapshot = load_corpus(*corpus)
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert header.get("fingerprint")
    qs = load_question_set(path, corpus_signature=snapshot.signature, doc_ids=[d.doc_id for d in snapshot.documents])
    assert qs.fingerprint == header["fingerprint"]


# --- question sets: text Postgres cannot store ------------------------------------------------

NUL = "\u0000"
LONE_SURROGATE = "\ud800"


@pytest.mark.parametrize("field, value, what", [
    ("question", f"where{NUL}is a?", "NUL"),
    ("qid", f"q{NUL}1", "NUL"),
    ("question", f"where is {LONE_SURROGATE}a?", "surrogate"),
    ("qid", f"q1{LONE_SURROGATE}", "surrogate"),
    ("gist", f"gist{NUL}", "NUL"),
    ("hard_class", f"{LONE_SURROGATE}", "surrogate"),
])
def test_text_postgres_cannot_store_is_an_error_naming_line_and_field(tmp_path, field, value, what):
    bad = qline("q2", question="and b?", gold=("doc-b",))
    bad[field] = value
    p = write_set(tmp_path / "q.jsonl", [qline(), bad], fingerprint="0" * 16)
    raw = p.read_text(encoding="utf-8")
    assert "\\u0000" in raw or "\\ud800" in raw  # as escapes: valid JSON, valid UTF-8 file
    with pytest.raises(QuestionSetError) as info:
        load(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}:3: field '{field}'"), msg
    assert what in msg


def test_a_valid_surrogate_pair_is_fine(tmp_path):
    q = [qline(question="where is \U0001F600?")]
    p = tmp_path / "q.jsonl"
    write_question_set(p, [Question("q1", "where is \U0001F600?", ("doc-a",))], corpus_signature=SIG)
    assert load(p).questions[0].question == q[0]["question"]


def test_stamping_applies_the_same_text_checks(tmp_path):
    p = tmp_path / "hand.jsonl"
    p.write_text(json.dumps(qline()) + "\n" + json.dumps(qline("q2", question=f"b{NUL}?", gold=("doc-b",))) + "\n")
    before = p.read_bytes()
    with pytest.raises(QuestionSetError, match=rf"^{p}:2: field 'question'.*NUL"):
        stamp_question_file(p, SIG, DOC_IDS)
    assert p.read_bytes() == before  # nothing written


def test_writing_a_set_applies_the_same_text_checks(tmp_path):
    with pytest.raises(QuestionSetError, match="field 'question'.*surrogate"):
        write_question_set(tmp_path / "q.jsonl", [Question("q1", f"a{LONE_SURROGATE}", ("doc-a",))],
                           corpus_signature=SIG)
    assert not (tmp_path / "q.jsonl").exists()


# --- question sets: nothing to measure ----------------------------------------------------------


def test_a_set_with_no_answerable_question_is_an_error(tmp_path):
    p = write_set(tmp_path / "q.jsonl", [qline("q1", gold=()), qline("q2", gold=())])
    with pytest.raises(QuestionSetError) as info:
        load(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: ") and "no answerable question" in msg


def test_stamping_a_set_with_no_answerable_question_is_an_error(tmp_path):
    p = tmp_path / "hand.jsonl"
    p.write_text(json.dumps(qline(gold=())) + "\n")
    with pytest.raises(QuestionSetError, match=rf"^{p}: .*no answerable question"):
        stamp_question_file(p, SIG, DOC_IDS)


# --- BEIR question sets -----------------------------------------------------------------------


def beir_folder(tmp_path: Path, queries: list[dict], qrels: str) -> Path:
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    (tmp_path / "qrels").mkdir(exist_ok=True)
    (tmp_path / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("query, field, what", [
    ({"_id": "2", "text": f"b{NUL}"}, "text", "NUL"),
    ({"_id": "2", "text": f"b{LONE_SURROGATE}"}, "text", "surrogate"),
    ({"_id": f"2{NUL}", "text": "b"}, "_id", "NUL"),
])
def test_beir_queries_get_the_same_text_checks(tmp_path, query, field, what):
    qid = query["_id"]
    folder = beir_folder(tmp_path, [{"_id": "1", "text": "a"}, query], f"1\tdoc-a\t1\n{qid}\tdoc-b\t1\n")
    with pytest.raises(QuestionSetError) as info:
        load_beir_questions(folder, split="test", doc_ids=DOC_IDS)
    msg = str(info.value)
    assert msg.startswith(f"{folder / 'queries.jsonl'}:2: field '{field}'"), msg
    assert what in msg


def test_beir_empty_query_text_names_the_line(tmp_path):
    folder = beir_folder(tmp_path, [{"_id": "1", "text": "a"}, {"_id": "2", "text": " "}], "1\tdoc-a\t1\n2\tdoc-b\t1\n")
    with pytest.raises(QuestionSetError, match=rf"^{folder / 'queries.jsonl'}:2: .*empty text"):
        load_beir_questions(folder, split="test", doc_ids=DOC_IDS)


def test_beir_split_with_no_answerable_question_is_an_error(tmp_path):
    folder = beir_folder(tmp_path, [{"_id": "1", "text": "a"}], "query-id\tcorpus-id\tscore\n1\tdoc-a\t0\n")
    with pytest.raises(QuestionSetError, match=rf"^{folder / 'qrels' / 'test.tsv'}: .*no answerable question"):
        load_beir_questions(folder, split="test", doc_ids=DOC_IDS)


# --- the preflight entry point ----------------------------------------------------------------


def test_preflight_loads_a_file_set(tmp_path):
    p = write_set(tmp_path / "q.jsonl", [qline()])
    qs = preflight_question_set("file", p, corpus_signature=SIG, doc_ids=DOC_IDS)
    assert [q.qid for q in qs.questions] == ["q1"]


def test_preflight_fails_on_a_bad_file_set(tmp_path):
    p = write_set(tmp_path / "q.jsonl", [qline()], fingerprint=False)
    with pytest.raises(QuestionSetError, match=rf"^{p}:1: "):
        preflight_question_set("file", p, corpus_signature=SIG, doc_ids=DOC_IDS)
    with pytest.raises(QuestionSetError, match=rf"{tmp_path / 'missing.jsonl'}: .*cannot read"):
        preflight_question_set("file", tmp_path / "missing.jsonl", corpus_signature=SIG, doc_ids=DOC_IDS)


def test_preflight_on_the_demo_corpus_defaults_to_the_committed_set():
    snapshot = load_corpus("demo", None)
    qs = preflight_question_set("file", None, corpus_signature=snapshot.signature,
                                doc_ids=[d.doc_id for d in snapshot.documents], corpus_source="demo")
    assert qs is not None and len(qs.questions) > 10


def test_preflight_names_the_setting_when_no_path_is_given():
    with pytest.raises(QuestionSetError, match="question_set.path"):
        preflight_question_set("file", None, corpus_signature=SIG, doc_ids=DOC_IDS, corpus_source="folder")
    with pytest.raises(QuestionSetError, match="question_set.path"):
        preflight_question_set("beir", None, corpus_signature=SIG, doc_ids=DOC_IDS)
    with pytest.raises(QuestionSetError, match="question_set.source"):
        preflight_question_set("wiki", "x", corpus_signature=SIG, doc_ids=DOC_IDS)


def test_preflight_loads_a_beir_set(tmp_path):
    folder = beir_folder(tmp_path, [{"_id": "1", "text": "a"}], "1\tdoc-a\t1\n")
    qs = preflight_question_set("beir", folder, corpus_signature=SIG, doc_ids=DOC_IDS, beir_split="test")
    assert [q.qid for q in qs.questions] == ["1"]
    with pytest.raises(QuestionSetError, match="dev.tsv: missing"):
        preflight_question_set("beir", folder, corpus_signature=SIG, doc_ids=DOC_IDS, beir_split="dev")


def test_preflight_cannot_check_a_set_still_to_be_generated(tmp_path):
    assert preflight_question_set("generate", tmp_path / "gen.jsonl", corpus_signature=SIG, doc_ids=DOC_IDS) is None


# --- variants files: duplicate YAML keys ------------------------------------------------------


def write_yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "variants.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_a_duplicate_key_in_a_variant_names_file_and_line(tmp_path):
    p = write_yaml(tmp_path, "variants:\n  - engine: hybrid\n    depth: 10\n    depth: 20\n")
    with pytest.raises(VariantConfigError) as info:
        load_sweep(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}:4: ") and "duplicate key 'depth'" in msg and "line 3" in msg


def test_a_duplicate_top_level_key_names_file_and_line(tmp_path):
    p = write_yaml(tmp_path, "baseline: bm25\nvariants: [bm25]\nbaseline: hybrid\n")
    with pytest.raises(VariantConfigError, match=rf"^{p}:3: duplicate key 'baseline'"):
        load_sweep(p)


def test_a_duplicate_key_in_a_flow_mapping_is_caught_too(tmp_path):
    p = write_yaml(tmp_path, "variants:\n  - engine: hybrid\n    reranker: {kind: mmr, lambda_: 0.5, lambda_: 0.9}\n")
    with pytest.raises(VariantConfigError, match=rf"^{p}:3: duplicate key 'lambda_'"):
        load_sweep(p)


def test_the_repository_variants_file_has_no_duplicate_keys():
    assert load_sweep(REPO / "variants.yaml").baseline


# --- variants files: reranker options ---------------------------------------------------------


def sweep_with(tmp_path: Path, reranker: str, *, name: str = "hybrid+x") -> Path:
    return write_yaml(tmp_path, f"variants:\n  - engine: hybrid\n  - engine: hybrid\n    name: {name}\n"
                                f"    reranker: {reranker}\n")


@pytest.mark.parametrize("reranker, setting, valid", [
    ("{kind: mmr, lambda: 0.5}", "lambda", "lambda_"),
    ("{kind: mmr, lamda_: 0.5}", "lamda_", "lambda_"),
    ("{kind: cross-encoder, model: /m, batchsize: 8}", "batchsize", "batch_size"),
    ("{kind: llm, max_candidate: 5}", "max_candidate", "max_candidates"),
    ("{kind: llm, llm: gpt}", "llm", "max_candidates"),  # injected by the resource, not settable
    ("{kind: bi-encoder, model: /m, embedder: x}", "embedder", "model"),
    ("{kind: none, depth: 3}", "depth", "none"),
])
def test_an_unknown_reranker_option_names_file_variant_and_setting(tmp_path, reranker, setting, valid):
    p = sweep_with(tmp_path, reranker)
    with pytest.raises(VariantConfigError) as info:
        load_sweep(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}") and "variant 2" in msg and "hybrid+x" in msg
    assert f"'{setting}'" in msg and "valid options:" in msg and valid in msg.split("valid options:")[1]


@pytest.mark.parametrize("reranker, setting", [
    ("{kind: mmr, lambda_: 1.5}", "lambda_"),
    ("{kind: mmr, lambda_: '0.5'}", "lambda_"),
    ("{kind: mmr, lambda_: true}", "lambda_"),
    ("{kind: llm, max_candidates: 0}", "max_candidates"),
    ("{kind: llm, max_chars: 2.5}", "max_chars"),
    ("{kind: llm, max_tokens: -1}", "max_tokens"),
    ("{kind: cross-encoder, model: /m, batch_size: '32'}", "batch_size"),
    ("{kind: cross-encoder, model: 3}", "model"),
    ("{kind: cross-encoder, model: /m, device: 0}", "device"),
    ("{kind: cross-encoder, model: /m, scale_score: 'yes'}", "scale_score"),
    ("{kind: bi-encoder, model: 3}", "model"),
    ("{kind: bi-encoder, model: ''}", "model"),
])
def test_a_bad_reranker_value_names_file_variant_and_setting(tmp_path, reranker, setting):
    p = sweep_with(tmp_path, reranker)
    with pytest.raises(VariantConfigError) as info:
        load_sweep(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}") and "variant 2" in msg and "hybrid+x" in msg and setting in msg, msg


@pytest.mark.parametrize("reranker, options", [
    ("mmr", {}),
    ("{kind: mmr, lambda_: 0}", {"lambda_": 0}),
    ("{kind: mmr, lambda_: 1}", {"lambda_": 1}),
    ("{kind: llm, max_candidates: 10, max_chars: 300, max_tokens: 64}",
     {"max_candidates": 10, "max_chars": 300, "max_tokens": 64}),
    ("{kind: cross-encoder, model: /m, batch_size: 8, scale_score: true, device: cpu}",
     {"model": "/m", "batch_size": 8, "scale_score": True, "device": "cpu"}),
    ("cross-encoder", {}),  # the model may come from RerankerResource.cross_encoder_model
    ("{kind: bi-encoder, model: /m}", {"model": "/m"}),
    ("bi-encoder", {}),  # likewise RerankerResource.bi_encoder_model
])
def test_valid_reranker_options_load_unchanged(tmp_path, reranker, options):
    sweep = load_sweep(sweep_with(tmp_path, reranker))
    assert dict(sweep.variants[1].reranker.options) == options


def test_reranker_options_are_checked_for_parsed_configs_too():
    with pytest.raises(VariantConfigError, match=r"^v.yaml: variant 1.*'lambda'.*valid options: lambda_"):
        sweep_file.parse_sweep({"variants": [{"engine": "hybrid", "reranker": {"kind": "mmr", "lambda": 0.3}}]},
                             source="v.yaml")


def test_one_definition_of_the_reranker_kinds():
    assert variants.RERANKER_KINDS is rerankers.RERANKER_KINDS


def test_loading_a_variants_file_imports_no_model_stack(tmp_path):
    p = sweep_with(tmp_path, "{kind: cross-encoder, model: /m}")
    code = ("import sys; from eval_pipeline.config.sweep import load_sweep; "
            f"load_sweep({str(p)!r}); "
            "print(','.join(m for m in ('torch', 'haystack', 'sentence_transformers', 'openai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
