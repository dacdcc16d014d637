"""The vector store's pure parts: what a vector is keyed by, asking the store before embedding
(order, repeats, counts), the age a prune takes. The database side is in
tests/integration/test_vector_store_reuse.py."""

import hashlib
from pathlib import Path

import pytest

from eval_pipeline.store.vectors import (
    Reuse,
    embed_through_store,
    parse_age,
    parse_vector,
    store_identity,
    table_for,
    text_key,
    vector_literal,
)


class Recording:
    """An embedder giving [len(text), 1] and recording every call's texts."""

    content_addressed = True
    identity = "rec-v1"
    model_id = "rec"

    def __init__(self):
        self.calls = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return [[float(len(t)), 1.0] for t in texts]


class DictStore:
    """VectorStore's get/put on a dict."""

    def __init__(self, stored=None):
        self.rows = dict(stored or {})
        self.puts = []

    def get(self, keys):
        return {k: self.rows[k] for k in keys if k in self.rows}

    def put(self, keys, vectors):
        self.puts.append(list(keys))
        for k, v in zip(keys, vectors):
            self.rows.setdefault(k, v)


def test_text_key_is_sha256_of_the_exact_utf8_bytes():
    assert text_key("é") == hashlib.sha256(b"\xc3\xa9").digest()
    assert text_key("a ") != text_key("a")  # no normalization: the model sees the bytes


def test_store_identity_needs_the_embedder_to_declare_it():
    class Label:
        identity = "label"

    assert store_identity(Label()) is None
    assert store_identity(Recording()) == "rec-v1"

    class OnDevice(Recording):
        device = "cuda:0"

    assert store_identity(OnDevice()) == "rec-v1|device:cuda:0"


def test_one_table_per_identity():
    assert table_for("a") == "vectors_" + hashlib.sha256(b"a").hexdigest()[:16]
    assert table_for("a") != table_for("a|device:cpu")


def test_vector_text_round_trip():
    assert vector_literal([0.5, -1.0]) == "[0.5,-1.0]"
    assert parse_vector("[0.5,-1.0]") == [0.5, -1.0]
    assert parse_vector("[]") == []


def test_only_misses_are_embedded_in_one_call_in_order_and_counted():
    store = DictStore({text_key("bb"): "[9.0,9.0]"})
    embedder = Recording()
    vectors, done = embed_through_store(embedder, ["a", "bb", "ccc", "a"], store)
    assert embedder.calls == [["a", "ccc"]]  # "a" twice is embedded once; "bb" is stored
    assert vectors == ["[1.0,1.0]", "[9.0,9.0]", "[3.0,1.0]", "[1.0,1.0]"]
    assert (done.embedded, done.from_store) == (2, 2)
    assert store.puts == [[text_key("a"), text_key("ccc")]]
    again, done = embed_through_store(embedder, ["ccc", "a"], store)
    assert len(embedder.calls) == 1 and again == ["[3.0,1.0]", "[1.0,1.0]"]
    assert (done.embedded, done.from_store) == (0, 2)


def test_without_a_store_every_text_is_embedded():
    embedder = Recording()
    vectors, done = embed_through_store(embedder, ["a", "a"], None)
    assert embedder.calls == [["a", "a"]] and vectors == ["[1.0,1.0]", "[1.0,1.0]"]
    assert (done.embedded, done.from_store) == (2, 0)


def test_an_embedder_returning_too_few_vectors_is_refused():
    class Short(Recording):
        def embed(self, texts):
            return [[1.0]]

    with pytest.raises(RuntimeError, match="1 vectors for 2 texts"):
        embed_through_store(Short(), ["a", "b"], DictStore())


def test_reuse_adds_up():
    total = Reuse()
    total.add(Reuse(3, 1))
    total.add(Reuse(0, 5))
    assert (total.embedded, total.from_store) == (3, 6)


@pytest.mark.parametrize("text,interval", [("30d", "30 days"), ("12h", "12 hours"), ("90m", "90 minutes"),
                                           ("10s", "10 seconds"), (" 2 days ", "2 days")])
def test_ages(text, interval):
    assert parse_age(text) == interval


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "1.5d", "1w", "30d; DROP TABLE x"])
def test_bad_ages_name_the_value(text):
    with pytest.raises(ValueError, match="--older-than"):
        parse_age(text)


def test_cli_refuses_a_bad_age_before_connecting(capsys, monkeypatch):
    from eval_pipeline.store.vectors import main

    monkeypatch.setenv("NOWHERE_URL", "postgresql://nowhere.invalid/x")
    assert main(["--url-env", "NOWHERE_URL", "prune", "--older-than", "soon"]) == 2
    assert "--older-than 'soon'" in capsys.readouterr().err


def test_the_cli_finds_the_state_dir_as_every_other_command_does(tmp_path, monkeypatch):
    """No --state-dir and no EVAL_PIPELINE_STATE_DIR: the checkout's .eval_state (as the jobs and
    `python -m eval_pipeline.history` find it), not a .eval_state in whatever folder the command
    was started from, where it would start a new, empty server and list nothing."""
    from eval_pipeline.common.state import default_state_dir
    from eval_pipeline.store import database, vectors

    monkeypatch.delenv("EVAL_PIPELINE_STATE_DIR", raising=False)
    monkeypatch.delenv("EVAL_PIPELINE_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    opened: list = []

    def server(state, name):  # the embedded server a job made in `state` (database._existing_embedded_database)
        opened.append(Path(state).resolve())
        return "postgresql://nowhere.invalid/x"

    monkeypatch.setattr(database, "_existing_embedded_database", server)
    monkeypatch.setattr(vectors, "list_stores", lambda url: [])
    assert vectors.main(["list"]) == 0
    assert opened == [default_state_dir().resolve()]
    assert not (tmp_path / ".eval_state").exists()
