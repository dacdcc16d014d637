"""The project's code identity is taken from each file's syntax tree, cached by the file's
version: a second process reads the trees' digests instead of parsing every file again (1.5 s of
each job's start on a quiet machine), and an edited file is parsed again."""

from __future__ import annotations

from eval_pipeline.common import versions, weights


def test_a_file_s_tree_digest_is_computed_once_per_version(tmp_path, monkeypatch):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    '''doc'''\n    return 1\n")
    cache = tmp_path / "digests.json"
    calls: list[bytes] = []

    def counted(raw: bytes) -> str:
        calls.append(raw)
        return versions._code_digest_of_bytes(raw)

    first = weights.files_sha256([source], cache_file=cache, compute=counted, kind="code")
    monkeypatch.setattr(weights, "_MEMORY", {})  # a new process: only the file on disk is left
    again = weights.files_sha256([source], cache_file=cache, compute=counted, kind="code")
    assert again == first and len(calls) == 1
    source.write_text("def f():\n    return 2\n")
    assert weights.files_sha256([source], cache_file=cache, compute=counted, kind="code") != first
    assert len(calls) == 2
    # the tree, not the text: a docstring or a comment changes nothing
    source.write_text("def f():\n    # a comment\n    return 2\n")
    changed = weights.files_sha256([source], cache_file=cache, compute=counted, kind="code")
    assert changed == weights.files_sha256([source], cache_file=cache, compute=counted, kind="code")
    assert changed == [versions._code_digest_of_bytes(b"def f():\n    return 2\n")]


def test_the_code_and_bytes_digests_of_one_file_are_kept_apart(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("x = 1\n")
    cache = tmp_path / "digests.json"
    code = weights.files_sha256([source], cache_file=cache, compute=versions._code_digest_of_bytes, kind="code")
    raw = weights.files_sha256([source], cache_file=cache)
    assert code != raw and len(raw[0]) == 64


def test_the_project_s_digest_is_the_same_from_the_cache_and_from_the_files(tmp_path, monkeypatch):
    from eval_pipeline.ranking.caches import CODE_PATHS

    monkeypatch.setenv("EVAL_PIPELINE_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(versions, "_SOURCES", {})
    monkeypatch.setattr(weights, "_MEMORY", {})
    parsed = versions.source_digest(*CODE_PATHS)
    monkeypatch.setattr(versions, "_SOURCES", {})
    monkeypatch.setattr(weights, "_MEMORY", {})
    monkeypatch.setattr(versions, "_code_of", lambda text: (_ for _ in ()).throw(AssertionError("parsed again")))
    assert versions.source_digest(*CODE_PATHS) == parsed
