"""Model weights are identified by their bytes, never by their path."""

import os
import shutil

import pytest

from eval_pipeline.common import weights
from eval_pipeline.common.weights import content_digest


def _model(folder, weights_bytes=b"\x00" * 64, config='{"dim": 4}'):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights_bytes)
    (folder / "config.json").write_text(config)
    return folder


def test_other_bytes_at_the_same_path_are_another_identity(tmp_path):
    model = _model(tmp_path / "m")
    before = content_digest(model)
    (model / "model.safetensors").write_bytes(b"\x01" * 64)
    assert content_digest(model) != before


def test_a_copy_that_keeps_size_and_mtime_is_still_seen(tmp_path):
    """`cp -p` of other weights of the same size: size and mtime match the cached entry, the
    ctime and inode do not, so the file is hashed again."""
    model = _model(tmp_path / "m")
    before = content_digest(model)
    stat = (model / "model.safetensors").stat()
    other = _model(tmp_path / "other", weights_bytes=b"\x02" * 64)
    os.replace(other / "model.safetensors", model / "model.safetensors")
    os.utime(model / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (model / "model.safetensors").stat().st_size == stat.st_size
    assert content_digest(model) != before


def test_same_bytes_elsewhere_are_the_same_identity_and_hidden_files_do_not_count(tmp_path):
    a = _model(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / ".cache").mkdir()
    (b / ".cache" / "download.lock").write_text("x")
    assert content_digest(a) == content_digest(b)


def test_a_renamed_file_is_another_identity(tmp_path):
    model = _model(tmp_path / "m")
    before = content_digest(model)
    (model / "config.json").rename(model / "config2.json")
    assert content_digest(model) != before


def test_digests_are_cached_on_disk_and_a_damaged_cache_is_only_a_rehash(tmp_path, monkeypatch):
    model = _model(tmp_path / "m")
    cache = tmp_path / "digests.json"
    first = content_digest(model, cache_file=cache)
    assert cache.exists()
    weights._MEMORY.clear()
    calls = []
    real = weights.hashlib.sha256
    monkeypatch.setattr(weights.hashlib, "sha256", lambda *a: calls.append(a) or real(*a))
    assert content_digest(model, cache_file=cache) == first
    assert len(calls) == 1  # only the combining hash: no file was read again
    cache.write_text("{not json")
    weights._MEMORY.clear()
    assert content_digest(model, cache_file=cache) == first


def test_missing_or_empty_model_is_named(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        content_digest(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no files"):
        content_digest(tmp_path / "empty")


def test_embedder_identity_follows_the_weights(tmp_path):
    from eval_pipeline.store.embedders import LocalEmbedder

    model = _model(tmp_path / "m")
    embedder = LocalEmbedder(model=str(model))
    first, revision = embedder.identity, embedder.revision
    (model / "model.safetensors").write_bytes(b"\x03" * 64)
    assert embedder.identity != first and embedder.revision != revision
    assert embedder.identity.startswith(f"{model}@sha256:")


def test_a_verified_file_does_not_reread_the_disk_cache(tmp_path, monkeypatch):
    """The identity is read several times a step: once this process has checked a file's
    signature, the digest comes from memory, without parsing the cache file again."""
    model = _model(tmp_path / "m")
    cache = tmp_path / "digests.json"
    first = content_digest(model, cache_file=cache)
    monkeypatch.setattr(weights, "_load", lambda path: (_ for _ in ()).throw(AssertionError("cache file read")))
    assert content_digest(model, cache_file=cache) == first
