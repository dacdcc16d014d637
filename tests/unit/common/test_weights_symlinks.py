"""A model folder's identity covers what its symlinks lead to.

On Python 3.11 `Path.rglob` does not descend into a symlinked sub-folder: a folder hashed
that way leaves the link's content out, so re-pointing the link changes what loads (and the
results) but not the identity every cache key and table name is built from.
"""

import hashlib
import json
import os
import time
import types

import pytest

from eval_pipeline.common import weights
from eval_pipeline.common.weights import content_digest


def _model(folder, weights_bytes=b"\x00" * 64):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights_bytes)
    (folder / "config.json").write_text('{"dim": 4}')
    return folder


def _tokenizer(folder, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(text)
    return folder


def test_a_symlinked_sub_folders_content_counts(tmp_path):
    """The bytes behind a linked sub-folder are part of the identity: changing them changes it."""
    target = _tokenizer(tmp_path / "tok_a", '{"vocab": ["a"]}')
    model = _model(tmp_path / "m")
    (model / "tokenizer").symlink_to(target, target_is_directory=True)
    before = content_digest(model)
    # the same bytes in a plain sub-folder, named alike, are the same identity
    plain = _model(tmp_path / "plain")
    _tokenizer(plain / "tokenizer", '{"vocab": ["a"]}')
    assert content_digest(plain) == before
    # other bytes behind the link (same size, same path): another identity
    (target / "tokenizer.json").write_text('{"vocab": ["b"]}')
    assert content_digest(model) != before
    # a file added behind the link counts too
    (target / "tokenizer.json").write_text('{"vocab": ["a"]}')
    assert content_digest(model) == before
    (target / "merges.txt").write_text("a b")
    assert content_digest(model) != before


def test_a_re_pointed_link_is_another_identity(tmp_path):
    """A sub-folder link (and a file link) re-pointed at other bytes: another identity; pointed
    back: the first one again (the identity is of the bytes, not of where they are)."""
    a = _tokenizer(tmp_path / "tok_a", '{"vocab": ["a"]}')
    b = _tokenizer(tmp_path / "tok_b", '{"vocab": ["b"]}')
    model = _model(tmp_path / "m")
    link = model / "tokenizer"
    link.symlink_to(a, target_is_directory=True)
    first = content_digest(model)
    link.unlink()
    link.symlink_to(b, target_is_directory=True)
    second = content_digest(model)
    assert second != first
    link.unlink()
    link.symlink_to(a, target_is_directory=True)
    assert content_digest(model) == first

    (tmp_path / "w1.bin").write_bytes(b"\x01" * 64)
    (tmp_path / "w2.bin").write_bytes(b"\x02" * 64)
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to(tmp_path / "w1.bin")
    with_w1 = content_digest(model)
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to(tmp_path / "w2.bin")
    assert content_digest(model) != with_w1


def test_nested_links_are_followed(tmp_path):
    """A link inside a linked folder, and a link to a link, are followed too."""
    deep = _tokenizer(tmp_path / "deep", '{"vocab": ["a"]}')
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "inner").symlink_to(deep, target_is_directory=True)
    hop = tmp_path / "hop"
    hop.symlink_to(outer, target_is_directory=True)
    model = _model(tmp_path / "m")
    (model / "extra").symlink_to(hop, target_is_directory=True)
    before = content_digest(model)
    (deep / "tokenizer.json").write_text('{"vocab": ["z"]}')
    assert content_digest(model) != before


@pytest.mark.parametrize("make_loop", ["to_root", "to_parent", "self_file", "pair"])
def test_a_symlink_loop_is_refused_with_its_path(tmp_path, make_loop):
    """A loop is a ValueError naming the offending path: never a RecursionError, a hang, or a
    loop silently left out of the identity."""
    model = _model(tmp_path / "m")
    if make_loop == "to_root":
        offending = model / "again"
        offending.symlink_to(model, target_is_directory=True)
    elif make_loop == "to_parent":
        sub = model / "sub"
        sub.mkdir()
        (sub / "file.txt").write_text("x")
        offending = sub / "up"
        offending.symlink_to("..", target_is_directory=True)
    elif make_loop == "self_file":
        offending = model / "weights.bin"
        offending.symlink_to("weights.bin")
    else:
        offending = model / "a"
        offending.symlink_to("b")
        (model / "b").symlink_to("a")
    with pytest.raises(ValueError, match="symlink loop") as raised:
        content_digest(model)
    message = str(raised.value)
    assert str(offending.relative_to(model)) in message or str(offending) in message, message


def test_an_unchanged_folder_keeps_its_digest(tmp_path):
    """A folder with no linked sub-folder keeps the identity it had before links were followed
    (the value below is what the rglob-based hash gave): every table name and cache key built
    from an existing model stays valid. Asked again, from memory or afresh: the same value."""
    model = tmp_path / "m"
    for sub in ("sub", ".cache", "a-b"):
        (model / sub).mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "config.json").write_bytes(b'{"dim": 4}')
    (model / "sub" / "tokenizer.json").write_bytes(b"tok")
    (model / "a-b" / "z.txt").write_bytes(b"x")
    (model / ".cache" / "x.lock").write_bytes(b"lock")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "vocab.txt").write_bytes(b"shared")
    (model / "vocab.txt").symlink_to("../outside/vocab.txt")
    pinned = "a94b1898056346af9986a740caf3ebe65d28198f7e3a32b7fe94f9df4209bd8d"
    assert content_digest(model) == pinned
    assert content_digest(model) == pinned
    weights._MEMORY.clear()
    assert content_digest(model, cache_file=tmp_path / "digests.json") == pinned
    weights._MEMORY.clear()
    assert content_digest(model, cache_file=tmp_path / "digests.json") == pinned  # from the disk cache


def test_a_cached_digest_is_of_the_bytes_read_through_the_link(tmp_path):
    """The disk cache's entry for a file reached through a linked folder is keyed by the file
    the bytes came from, and its signature is that file's: a later change to the target is
    seen even by a fresh process reading the cache."""
    target = _tokenizer(tmp_path / "tok", '{"vocab": ["a"]}')
    model = _model(tmp_path / "m")
    (model / "tokenizer").symlink_to(target, target_is_directory=True)
    cache = tmp_path / "digests.json"
    before = content_digest(model, cache_file=cache)
    stored = json.loads(cache.read_text())
    real = (target / "tokenizer.json").resolve()
    signature, digest = stored[str(real)]
    assert digest == hashlib.sha256(real.read_bytes()).hexdigest()
    stat = os.stat(real)
    assert signature == [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]
    # other bytes behind the link, size and mtime kept: a fresh process still sees them
    os.replace(_tokenizer(tmp_path / "new", '{"vocab": ["b"]}') / "tokenizer.json", real)
    os.utime(real, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    weights._MEMORY.clear()
    assert content_digest(model, cache_file=cache) != before


def test_a_file_replaced_while_it_is_hashed_is_cached_under_the_bytes_read(tmp_path, monkeypatch):
    """The target behind a link is replaced between the stat and the read: the digest is kept
    under the signature of the file actually read, never under the replaced file's (replaced
    after the read began, that file is not settled, `weights._settled`: the first read is used,
    not cached, and the next caches it)."""
    target = _tokenizer(tmp_path / "tok", '{"vocab": ["a"]}')
    model = _model(tmp_path / "m")
    (model / "tokenizer").symlink_to(target, target_is_directory=True)
    real = (target / "tokenizer.json").resolve()
    replacement = _tokenizer(tmp_path / "new", '{"vocab": ["b"]}') / "tokenizer.json"
    real_open = open

    def swapping_open(path, *args, **kwargs):
        if str(path) == str(real) and replacement.exists():
            os.replace(replacement, real)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(weights, "open", swapping_open, raising=False)
    # The read begins a second before the replacement, as it would in use (a hash takes time). Not
    # left to the clocks: the file times come from the kernel's coarse clock, which can stamp a
    # change made after `time.time_ns()` with an earlier time (under load, one run in a few).
    monkeypatch.setattr(weights, "time", types.SimpleNamespace(time_ns=lambda: time.time_ns() - 10**9))
    first = content_digest(model)
    monkeypatch.setattr(weights, "time", time)
    assert str(real) not in weights._MEMORY
    assert content_digest(model) == first
    signature, digest = weights._MEMORY[str(real)]
    stat = os.stat(real)
    assert digest == hashlib.sha256(b'{"vocab": ["b"]}').hexdigest()
    assert signature == [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]
