"""Every file digest (model weights, installed packages' code, the project's syntax trees) is kept
in one cache per machine, the user's cache folder: its entries are keyed by the file's absolute
path and version (size, mtime, ctime, inode, device), so they hold for any state dir, and a new
state dir (each test's, each new project's) no longer parses and hashes the project again. The
library finds no folder through the environment's state dir. A save drops the entries that can
never match again (the file is gone or was rewritten), so the cache does not grow with every
temporary checkout and model copy a machine has seen."""

from __future__ import annotations

import json

from eval_pipeline.common import versions, weights
from tests.unit.common.test_digest_cache_attacks import fresh as _fresh_process


def test_weights_digests_go_to_the_machine_cache_and_never_into_the_state_dir(tmp_path, monkeypatch):
    _fresh_process(monkeypatch)
    monkeypatch.setenv("EVAL_PIPELINE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\x00" * 1000)

    weights.content_digest(model)

    assert not (tmp_path / "state").exists()
    kept = json.loads((tmp_path / "user-cache" / "eval-pipeline" / "file-digests.json").read_text())
    assert str((model / "weights.bin").resolve()) in kept


def test_a_new_state_dir_reads_the_project_s_trees_from_the_machine_cache(tmp_path, monkeypatch):
    from eval_pipeline.ranking.caches import CODE_PATHS

    _fresh_process(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.setenv("EVAL_PIPELINE_STATE_DIR", str(tmp_path / "first"))
    parsed = versions.source_digest(*CODE_PATHS)

    _fresh_process(monkeypatch)
    monkeypatch.setenv("EVAL_PIPELINE_STATE_DIR", str(tmp_path / "second"))
    monkeypatch.setattr(versions, "_code_of", lambda text: (_ for _ in ()).throw(AssertionError("parsed again")))
    assert versions.source_digest(*CODE_PATHS) == parsed


def test_a_save_drops_the_entries_that_can_never_match_again(tmp_path, monkeypatch):
    _fresh_process(monkeypatch)
    monkeypatch.setattr(weights, "PRUNE_GROWTH", 0)  # every save prunes here; when one is due: the next test
    cache = tmp_path / "digests.json"
    live, rewritten, gone, new = (tmp_path / n for n in ("live.bin", "rewritten.bin", "gone.bin", "new.bin"))
    for path in (live, rewritten, gone, new):
        path.write_bytes(path.name.encode())
    weights.files_sha256([live, rewritten, gone], cache_file=cache)
    weights.files_sha256([live], cache_file=cache, compute=lambda raw: "tree", kind="code")
    gone.unlink()
    rewritten.write_bytes(b"other bytes, other size")

    _fresh_process(monkeypatch)
    weights.files_sha256([new], cache_file=cache)  # a miss: hashed, then saved

    kept = json.loads(cache.read_text())
    assert set(kept) == {str(live), f"code:{live}", str(new)}, sorted(kept)
    # and what is kept still answers without reading the file again
    _fresh_process(monkeypatch)
    monkeypatch.setattr(weights.hashlib, "sha256", lambda: (_ for _ in ()).throw(AssertionError("hashed again")))
    assert weights.files_sha256([live], cache_file=cache) == [kept[str(live)][1]]


def test_a_save_prunes_only_when_the_cache_has_doubled_since_it_last_pruned(tmp_path, monkeypatch):
    """Pruning stats every entry: 0.7 s on a 59k-entry machine cache, paid by every save when it
    was done on each. It is done when the entries have doubled since the last prune (the count
    kept then is written beside the cache), so the file holds at most about as many dead entries
    as live ones, at a cost spread over the saves."""
    _fresh_process(monkeypatch)
    checked: list[str] = []
    can_match = weights._can_match
    monkeypatch.setattr(weights, "_can_match", lambda key, entry: checked.append(key) or can_match(key, entry))
    cache = tmp_path / "digests.json"
    files = [tmp_path / f"f{n}.bin" for n in range(8)]
    for n, path in enumerate(files):
        path.write_bytes(bytes([n]) * 10)

    weights.files_sha256(files[:2], cache_file=cache)  # no prune recorded yet: prunes, keeps 2
    assert len(checked) == 2
    checked.clear()
    weights.files_sha256(files[2:3], cache_file=cache)  # 3 entries, fewer than twice 2: no stat at all
    assert checked == []
    files[0].unlink()
    weights.files_sha256(files[3:4], cache_file=cache)  # 4 entries, twice 2: prunes the gone one
    assert len(checked) == 4
    assert sorted(json.loads(cache.read_text())) == sorted(str(p) for p in files[1:4])
