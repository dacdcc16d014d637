"""A code identity taken from the files on disk must not label what the process loaded earlier
(a hostile review's F1): an edit or a `git pull` landing after the process imported the project
but before an identity was first computed made the old code's result be stored under the new
code's identity, and every later run of the new code read it (the audit cache, the results
cache, every identity built on `source_digest`). The project's source files are stat-ed when the
process starts (`versions.remember_sources`); a file changed since then gives an identity of
this process alone, which no cache entry matches and no later process will compute."""

from __future__ import annotations

from eval_pipeline.common import state, versions


def _project(tmp_path, monkeypatch):
    (tmp_path / "eval_pipeline").mkdir()
    source = tmp_path / "eval_pipeline" / "audit.py"
    source.write_text("def problems():\n    return []\n")
    monkeypatch.setattr(state, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(versions, "_SOURCES", {})
    monkeypatch.setattr(versions, "_STARTED", {})
    monkeypatch.delenv("EVAL_PIPELINE_STATE_DIR", raising=False)
    return source


def test_unchanged_sources_give_the_identity_any_process_gives(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch)
    versions.remember_sources()
    first = versions.source_digest("eval_pipeline")
    monkeypatch.setattr(versions, "_SOURCES", {})
    assert versions.source_digest("eval_pipeline") == first
    assert "changed" not in first


def test_a_file_edited_after_the_start_gives_an_identity_no_cache_holds(tmp_path, monkeypatch):
    source = _project(tmp_path, monkeypatch)
    versions.remember_sources()
    source.write_text("def problems():\n    return ['the new code fails this set']\n")  # a git pull mid-run
    during = versions.source_digest("eval_pipeline")
    assert "changed" in during
    monkeypatch.setattr(versions, "_SOURCES", {})
    monkeypatch.setattr(versions, "_STARTED", {})
    versions.remember_sources()  # the next process, started on the new code
    after = versions.source_digest("eval_pipeline")
    assert after != during and "changed" not in after


def test_a_file_added_or_removed_after_the_start_counts_as_a_change(tmp_path, monkeypatch):
    source = _project(tmp_path, monkeypatch)
    versions.remember_sources()
    (tmp_path / "eval_pipeline" / "new_module.py").write_text("X = 1\n")
    assert "changed" in versions.source_digest("eval_pipeline")
    monkeypatch.setattr(versions, "_SOURCES", {})
    (tmp_path / "eval_pipeline" / "new_module.py").unlink()
    source.unlink()
    assert "changed" in versions.source_digest("eval_pipeline")


def test_this_process_remembered_the_real_project_at_import():
    started = versions._STARTED[state.PROJECT_ROOT]
    assert any(str(path).endswith("eval_pipeline/common/versions.py") for path in started)
    assert "changed" not in versions.source_digest("eval_pipeline/common/versions.py")


def test_an_editor_lock_file_is_no_source(tmp_path, monkeypatch):
    # Emacs keeps `.#name.py`, a dangling symbolic link, beside a file with unsaved edits: it holds
    # no code that can run, and hashing it crashed every identity (the audit check among them)
    _project(tmp_path, monkeypatch)
    versions.remember_sources()
    before = versions.source_digest("eval_pipeline")
    monkeypatch.setattr(versions, "_SOURCES", {})
    (tmp_path / "eval_pipeline" / ".#audit.py").symlink_to("user@host.1234:1700000000")
    assert versions.source_digest("eval_pipeline") == before
