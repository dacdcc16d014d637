"""Atomic writes get ordinary permissions, and a results folder is published all at once: a run
that fails part-way leaves the previous results exactly as they were, a run replaces only its
own files (full run vs limited runs), and a crash between the two renames of the swap is
repaired by the next publish."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.common import atomic
from eval_pipeline.common.atomic import atomic_write_bytes, atomic_write_text, current_umask
from eval_pipeline.questions.sets import Question
from eval_pipeline.reporting import publish
from eval_pipeline.reporting.publish import PublishError, owned_by, recover, staged_results
from eval_pipeline.reporting.report import write_report
from eval_pipeline.reporting.trec import write_trec_files

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def umask():
    """Set the process umask for one test (and restore it)."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def snapshot(folder: Path) -> dict[str, tuple[str, bytes | None, int]]:
    """Every entry under folder: kind, bytes (files) and mode."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_dir():
            out[rel] = ("dir", None, mode(p))
        else:
            out[rel] = ("file", p.read_bytes(), mode(p))
    return out


def leftovers(parent: Path, name: str = "results") -> list[str]:
    """Staging folders, superseded copies and journals beside the results folder."""
    return sorted(p.name for p in parent.iterdir()
                  if p.name.startswith(f".{name}.") and not p.name.endswith(".publish.lock"))


QUESTIONS = [Question("q1", "where is a?", ("doc-a",)), Question("q2", "and b?", ("doc-b",))]


def write_run(folder: Path, suffix: str = "", *, tag: str = "new", plots=("hit_at_k", "ndcg_intervals")) -> None:
    """What the report asset writes: the report, per-question file, plots and TREC files."""
    per_query = pd.DataFrame([{"variant": "hybrid", "qid": q.qid, "tag": tag} for q in QUESTIONS])
    write_report(folder, f"# results {tag}\n", per_query, suffix=suffix)
    for name in plots:
        atomic_write_bytes(folder / f"{name}{suffix}.png", f"png {name} {tag}".encode())
    write_trec_files(folder / f"trec{suffix}", {"hybrid": {"q1": ["doc-a"], "q2": ["doc-b"]}}, QUESTIONS)


def previous_results(tmp_path: Path) -> Path:
    """A results folder with a full run (three plots, two run files), a limited run and a user's file."""
    results = tmp_path / "results"
    with staged_results(results) as stage:
        write_run(stage, tag="old", plots=("hit_at_k", "ndcg_intervals", "baseline_deltas"))
        atomic_write_text(stage / "trec" / "pg-dense.run", "q1 Q0 doc-a 1 1 pg-dense\n")
    with staged_results(results, suffix=".limited-50") as stage:
        write_run(stage, ".limited-50", tag="old-limited")
    (results / "NOTES.txt").write_text("kept by hand\n")
    return results


def test_temp_files_of_dead_writers_are_not_carried(tmp_path):
    results = previous_results(tmp_path)
    (results / ".results.md.abc123.tmp").write_text("half")
    with staged_results(results, suffix=".limited-50") as stage:
        write_run(stage, ".limited-50")
    assert not (results / ".results.md.abc123.tmp").exists() and (results / "results.md").exists()


# --- atomic writes ----------------------------------------------------------------------------


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                       (0o002, 0o664, 0o775)])
def test_atomic_writes_get_ordinary_permissions(tmp_path, umask, mask, file_mode, dir_mode):
    umask(mask)
    assert current_umask() == mask
    atomic_write_bytes(tmp_path / "new" / "a.bin", b"x")
    atomic_write_text(tmp_path / "new" / "b.txt", "y")
    assert mode(tmp_path / "new" / "a.bin") == file_mode
    assert mode(tmp_path / "new" / "b.txt") == file_mode
    assert mode(tmp_path / "new") == dir_mode
    # replacing a file gives the new one the same ordinary mode
    atomic_write_bytes(tmp_path / "new" / "a.bin", b"z")
    assert mode(tmp_path / "new" / "a.bin") == file_mode
    assert [p.name for p in (tmp_path / "new").iterdir() if p.name.endswith(".tmp")] == []


def test_umask_is_read_without_proc_too(monkeypatch, umask):
    umask(0o027)
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path) == "/proc/self/status":
            raise OSError(errno.ENOENT, "no /proc")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    assert current_umask() == 0o027
    monkeypatch.undo()
    assert current_umask() == 0o027  # and it was left as it was


def test_atomic_module_imports_only_the_standard_library():
    code = "import sys, eval_pipeline.common.atomic, eval_pipeline.reporting.publish; print(sorted(m for m in sys.modules if m.startswith('eval_pipeline')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(['eval_pipeline', 'eval_pipeline.common', 'eval_pipeline.common.atomic',
                                      'eval_pipeline.reporting', 'eval_pipeline.reporting.publish'])


# --- ownership --------------------------------------------------------------------------------


@pytest.mark.parametrize("name, full, limited", [
    ("results.md", True, False), ("per_query.jsonl", True, False), ("hit_at_k.png", True, False),
    ("baseline_deltas.png", True, False), ("trec", True, False),
    ("results.limited-50.md", False, True), ("per_query.limited-50.jsonl", False, True),
    ("hit_at_k.limited-50.png", False, True), ("trec.limited-50", False, True),
    ("results.limited-5.md", False, False), ("trec.limited-500", False, False), ("NOTES.txt", False, False),
    ("results.md.bak", False, False), ("indexes.json", True, False), ("indexes.limited-50.json", False, True),
    ("pareto_latency.png", True, False), ("misses.jsonl", True, False), ("misses.limited-50.jsonl", False, True),
])
def test_ownership_by_suffix(name, full, limited):
    assert owned_by(name, "") is full
    assert owned_by(name, ".limited-50") is limited


# --- publishing -------------------------------------------------------------------------------


def test_first_run_creates_the_folder_with_ordinary_permissions(tmp_path, umask):
    umask(0o022)
    results = tmp_path / "deep" / "results"
    with staged_results(results) as stage:
        assert stage.parent == results.parent and stage.name.startswith(".results.staging-")
        write_run(stage)
        assert not results.exists()  # nothing visible before the block completes
    assert mode(results) == 0o755 and mode(results / "trec") == 0o755
    assert {p.name: mode(p) for p in results.rglob("*") if p.is_file()} == {
        "results.md": 0o644, "per_query.jsonl": 0o644, "misses.jsonl": 0o644, "hit_at_k.png": 0o644,
        "ndcg_intervals.png": 0o644, "hybrid.run": 0o644, "qrels.txt": 0o644}
    assert leftovers(results.parent) == []


def test_a_failure_mid_run_leaves_the_previous_folder_byte_identical(tmp_path, monkeypatch):
    results = previous_results(tmp_path)
    before = snapshot(results)
    calls = []

    def disk_full_on_third_write(fh, data):
        calls.append(len(data))
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        fh.write(data)

    monkeypatch.setattr(atomic, "_write", disk_full_on_third_write)
    with pytest.raises(PublishError) as info:
        with staged_results(results) as stage:
            write_run(stage)
    assert len(calls) == 3
    message = str(info.value)
    assert str(results) in message and "previous results were left intact" in message
    assert "No space left on device" in message
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert snapshot(results) == before
    assert leftovers(tmp_path) == []


def test_a_failure_on_the_first_run_leaves_no_folder(tmp_path):
    results = tmp_path / "results"
    with pytest.raises(PublishError, match="left intact"):
        with staged_results(results) as stage:
            write_run(stage)
            raise ValueError("boom")
    assert not results.exists() and leftovers(tmp_path) == []


def test_interrupts_are_not_wrapped_but_still_clean_up(tmp_path):
    results = previous_results(tmp_path)
    before = snapshot(results)
    with pytest.raises(KeyboardInterrupt):
        with staged_results(results) as stage:
            write_run(stage)
            raise KeyboardInterrupt
    assert snapshot(results) == before and leftovers(tmp_path) == []


def test_a_full_run_replaces_its_files_and_keeps_the_limited_runs(tmp_path):
    results = previous_results(tmp_path)
    before = snapshot(results)
    with staged_results(results) as stage:
        assert (stage / "results.limited-50.md").exists()  # carried over for the block to see
        assert not (stage / "results.md").exists()  # this run's own files start empty
        write_run(stage, tag="new")
    after = snapshot(results)
    # this run's files: all new; the plot and run file it no longer writes are gone
    assert (results / "results.md").read_text() == "# results new\n"
    assert b'"tag": "new"' in (results / "per_query.jsonl").read_bytes()
    assert (results / "hit_at_k.png").read_bytes() == b"png hit_at_k new"
    assert not (results / "baseline_deltas.png").exists()
    assert sorted(p.name for p in (results / "trec").iterdir()) == ["hybrid.run", "qrels.txt"]
    # everything else: byte-identical
    others = {k: v for k, v in before.items() if not owned_by(k.split("/")[0], "")}
    assert others and {k: after[k] for k in others} == others
    assert "NOTES.txt" in others and "trec.limited-50/qrels.txt" in others
    assert leftovers(tmp_path) == []


def test_a_limited_run_keeps_the_full_run(tmp_path):
    results = previous_results(tmp_path)
    before = snapshot(results)
    with staged_results(results, suffix=".limited-50") as stage:
        write_run(stage, ".limited-50", tag="new-limited", plots=("hit_at_k",))
    after = snapshot(results)
    assert (results / "results.limited-50.md").read_text() == "# results new-limited\n"
    assert not (results / "ndcg_intervals.limited-50.png").exists()
    full = {k: v for k, v in before.items() if not owned_by(k.split("/")[0], ".limited-50")}
    assert {k: after[k] for k in full} == full


def test_another_suffix_published_meanwhile_is_kept(tmp_path):
    """A full run and a quick run at the same time: neither undoes the other."""
    results = previous_results(tmp_path)
    with staged_results(results) as full_stage:
        write_run(full_stage, tag="full-2")
        with staged_results(results, suffix=".limited-50") as limited_stage:
            write_run(limited_stage, ".limited-50", tag="limited-2")
    assert (results / "results.md").read_text() == "# results full-2\n"
    assert (results / "results.limited-50.md").read_text() == "# results limited-2\n"
    assert leftovers(tmp_path) == []


def test_the_folder_keeps_its_mode(tmp_path):
    results = previous_results(tmp_path)
    os.chmod(results, 0o750)
    with staged_results(results) as stage:
        write_run(stage)
    assert mode(results) == 0o750


def test_not_a_folder_is_refused(tmp_path):
    (tmp_path / "results").write_text("a file")
    with pytest.raises(PublishError, match="is not a folder"):
        with staged_results(tmp_path / "results"):
            pass
    assert (tmp_path / "results").read_text() == "a file"


# --- crashes ----------------------------------------------------------------------------------

CRASH = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from eval_pipeline.reporting import publish
    from test_atomic_publish import write_run
    real, calls = publish._rename, []
    def rename(src, dst):
        calls.append(1)
        if len(calls) == {crash_at}:
            os._exit(17)  # the process dies: no cleanup runs
        real(src, dst)
    publish._rename = rename
    real_remove = publish._remove
    def remove(path):
        if {crash_at} == 3 and path.name.startswith(".results.old-"):
            os._exit(17)  # both renames done, the superseded copy not yet deleted
        real_remove(path)
    publish._remove = remove
    with publish.staged_results(Path({results!r})) as stage:
        write_run(stage, tag="crashed")
""")


def crash_publish(results: Path, crash_at: int) -> None:
    code = CRASH.format(tests=str(Path(__file__).parent), results=str(results), crash_at=crash_at)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 17, out.stderr[-3000:]


def test_a_crash_between_the_renames_is_recovered_by_the_next_call(tmp_path):
    results = previous_results(tmp_path)
    before = snapshot(results)
    crash_publish(results, crash_at=2)  # after "results -> .results.old-*", before "stage -> results"
    assert not results.exists()
    assert any(n.startswith(".results.old-") for n in leftovers(tmp_path))
    assert any(n.startswith(".results.staging-") for n in leftovers(tmp_path))
    # the next publish first puts the previous results back ...
    with staged_results(results) as stage:
        assert snapshot(results) == before
        write_run(stage, tag="next")
    # ... and then publishes normally
    assert (results / "results.md").read_text() == "# results next\n"
    assert (results / "results.limited-50.md").read_text() == "# results old-limited\n"
    assert leftovers(tmp_path) == []


def test_recover_alone_restores_after_a_crash_between_the_renames(tmp_path):
    results = previous_results(tmp_path)
    before = snapshot(results)
    crash_publish(results, crash_at=2)
    done = recover(results)
    assert any("restored" in d for d in done)
    assert snapshot(results) == before and leftovers(tmp_path) == []


def test_a_crash_before_the_first_rename_or_after_the_second_is_cleaned_up(tmp_path):
    results = previous_results(tmp_path)
    before = snapshot(results)
    crash_publish(results, crash_at=1)  # journal written, nothing renamed
    assert snapshot(results) == before
    recover(results)
    assert snapshot(results) == before and leftovers(tmp_path) == []

    crash_publish(results, crash_at=3)  # both renames done, the old copy not yet deleted
    assert (results / "results.md").read_text() == "# results crashed\n"
    assert any(n.startswith(".results.old-") for n in leftovers(tmp_path))
    recover(results)
    assert (results / "results.md").read_text() == "# results crashed\n"
    assert leftovers(tmp_path) == []


def test_an_abandoned_stage_is_deleted_but_a_live_one_is_not(tmp_path):
    results = previous_results(tmp_path)
    dead = tmp_path / ".results.staging-deadbeef0000"
    dead.mkdir()
    (dead / "results.md").write_text("half a run")
    with staged_results(results) as live:
        recover(results)  # as another run starting now would
        assert live.exists() and not dead.exists()
        write_run(live)
    assert leftovers(tmp_path) == []


def test_publish_uses_the_same_filesystem(tmp_path):
    results = tmp_path / "results"
    with staged_results(results) as stage:
        assert os.stat(stage).st_dev == os.stat(tmp_path).st_dev
        assert publish._stage_prefix(results) in stage.name
