"""The digest cache file is shared by every process on the machine (installed packages' code) or
of a state dir: a process saving its new digests must keep what another process saved while it
was hashing (it wrote back the copy it had read before, so every concurrent job lost the others'
digests and hashed thousands of package files again on its next, nothing-changed run), and
its own save must not make it parse the whole file again on its next identity."""

import json
import os

from eval_pipeline.common import weights
from eval_pipeline.common.weights import files_sha256, stat_signature


def entry_of(path) -> list:
    import hashlib

    return [stat_signature(os.stat(path)), hashlib.sha256(path.read_bytes()).hexdigest()]


def test_a_digest_another_process_saved_meanwhile_is_kept(tmp_path):
    cache = tmp_path / "digests.json"
    mine, theirs = tmp_path / "mine.py", tmp_path / "theirs.py"
    mine.write_text("x = 1\n")
    theirs.write_text("y = 2\n")
    cache.write_text(json.dumps({}))

    def hash_while_another_process_saves(raw: bytes) -> str:
        on_disk = json.loads(cache.read_text())
        on_disk[str(theirs)] = entry_of(theirs)
        cache.write_text(json.dumps(on_disk))  # the other process's save, while this one hashes
        return "digest of mine"

    assert files_sha256([mine], cache_file=cache, compute=hash_while_another_process_saves, kind="t") == \
        ["digest of mine"]
    saved = json.loads(cache.read_text())
    assert saved[f"t:{mine}"][1] == "digest of mine"
    assert saved[str(theirs)] == entry_of(theirs)


def test_a_process_does_not_parse_its_own_save_again(tmp_path, monkeypatch):
    cache = tmp_path / "digests.json"
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"a")
    second.write_bytes(b"b")
    files_sha256([first], cache_file=cache)  # computed and saved
    parsed = []
    real = json.loads
    monkeypatch.setattr(weights.json, "loads", lambda text: parsed.append(1) or real(text))
    weights._MEMORY.clear()  # as a new identity meeting files this process has not verified
    assert files_sha256([first], cache_file=cache) == [entry_of(first)[1]]
    assert parsed == []  # what it saved is what it holds: no re-read of its own write
    files_sha256([second], cache_file=cache)
    assert {str(first), str(second)} <= json.loads(cache.read_text()).keys()
