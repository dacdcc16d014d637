"""The digest cache file is parsed once per process while it is unchanged (a warm job run read
the whole file ten times, once for each identity that met a file new to the process: 0.8 s of an
18 s warm demo run), and read again as soon as another process rewrote it."""

import json

from eval_pipeline.common import weights


def test_an_unchanged_cache_file_is_parsed_once(tmp_path, monkeypatch):
    cache = tmp_path / "digests.json"
    cache.write_text(json.dumps({"/a": [[1, 2, 3, 4, 5], "aa"]}))
    parsed = []
    real = json.loads
    monkeypatch.setattr(weights.json, "loads", lambda text: parsed.append(1) or real(text))
    assert weights._load(cache) == {"/a": [[1, 2, 3, 4, 5], "aa"]}
    assert weights._load(cache) == {"/a": [[1, 2, 3, 4, 5], "aa"]}
    assert len(parsed) == 1


def test_a_rewritten_cache_file_is_read_again(tmp_path):
    cache = tmp_path / "digests.json"
    cache.write_text(json.dumps({"/a": [[1], "aa"]}))
    assert weights._load(cache) == {"/a": [[1], "aa"]}
    cache.write_text(json.dumps({"/a": [[1], "aa"], "/b": [[2], "bb"]}))  # another process saved it
    assert weights._load(cache) == {"/a": [[1], "aa"], "/b": [[2], "bb"]}


def test_a_damaged_or_missing_cache_is_empty(tmp_path):
    cache = tmp_path / "digests.json"
    assert weights._load(cache) == {}
    cache.write_text("{not json")
    assert weights._load(cache) == {}
