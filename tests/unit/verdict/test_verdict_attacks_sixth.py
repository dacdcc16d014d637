"""The sixth review of the verdict: holes in today's changes, each kept as a failing test.

Every test here is marked ``xfail(strict=True)`` with the hole in its reason: the suite stays
green while the hole is open and turns red (XPASS) the day it is closed, so the mark is
removed with the fix. They call the library directly, without a database.

The holes:

1. the code of an installed package (`versions.package_code_digest`, in the engine identity,
   the results cache key, the embedding runtime, the statistics key and the code-graded
   yardsticks) misses code that runs:

   a. a patched file whose inode changed *before* RECORD's last did is read from RECORD (the
      wheel's hash, not its bytes): anything that touches RECORD after the patch (``chown -R``
      or ``chmod -R`` over the venv, a venv restored from a CI cache or copied into an image,
      where the order of the archive decides the ctimes) hides the patch;
   b. an editable install made by setuptools' default finder (a meta path finder mapping the
      name to the checkout, as this project's own install is) is looked up with
      ``PathFinder`` only: the checkout is never found, never hashed, and its edits never
      change the digest;
   c. a file added to an intact install is imported without any listed file changing: a
      package folder shadows the module of the same name (Python's finder prefers it);
   d. the shared libraries a wheel vendors under versioned names (``libgomp.so.1`` in torch,
      ``libgfortran-…so.5.0.0`` in numpy and scipy) are not code by `CODE_SUFFIXES`;
   e. (low) a ``.pth`` line or sitecustomize that patches a ranking package at start-up is in
      no identity;

2. the code-graded yardsticks leave out code that decides their numbers:

   a. the grounding grader's yardstick holds grounding.py only: the rule that makes an
      answer pass (``passed=not missing_items`` in grading/run.py) and the Python and Unicode
      versions its word splitting depends on are in no yardstick;
   b. grading/summary.py's `answer_metric_frames` decides which grades reach
      `answer_metrics` and counts the errored answers (the gate's ``n_errored``), outside
      `grading_code`;

3. the classic class on today's HEAD, a regression that passes because what measures it did
   not move:

   a. the vector table is named by a hand-kept CHUNKER_VERSION, not the chunking code, and the
      local embedder's identity (vector table, content-addressed vectors, question-embedding
      cache) holds no project code: an edit of store/ingest.py or store/embedders.py replays
      the vectors the old code made, so the edit is never measured and its run becomes a
      yardstick;
   b. the grounding grader leaves an answer with nothing checkable out of its pass rate and
      the answer gate never compares ``n_scored``: a generator that starts hedging or
      answering empty reads as an improvement.

tests/orchestration/test_verdict_attacks_sixth.py holds the one that needs Dagster: a report
rendered beside findings measured from another verdict.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from eval_pipeline.common import versions
from tests.wheels import digest_on_path, install_wheel

# --------------------------------------------------------------------------------------------
# hole 1: package code that runs and is not in the digest
# --------------------------------------------------------------------------------------------


def test_a_patch_made_before_records_inode_last_changed_still_changes_the_digest(
        fresh_package_code, monkeypatch, tmp_path):
    site = tmp_path / "site"
    record = install_wheel(site, "toyrank", {"toyrank/__init__.py": b"K1 = 1.5\n",
                                        "toyrank/score.py": b"def boost():\n    return 1.0\n"})
    unpatched = digest_on_path(monkeypatch, site, "toyrank")

    (site / "toyrank" / "score.py").write_bytes(b"def boost():\n    return 0.5\n")  # the patch
    assert digest_on_path(monkeypatch, site, "toyrank") != unpatched  # seen while RECORD is older

    # what `chown -R app /venv` (or extracting the venv from an archive) does to RECORD after it
    time.sleep(0.01)
    os.chmod(record, 0o644)
    assert digest_on_path(monkeypatch, site, "toyrank") != unpatched, \
        "the patched score.py is read from RECORD's hash of the unpatched file"


def test_a_patched_ranking_package_behind_a_touched_record_is_another_engine(fresh_package_code, monkeypatch, tmp_path):
    from importlib.metadata import version

    from eval_pipeline.ranking.caches import engine_identity

    installed = version("bm25s")
    site = tmp_path / "site"
    source = b"K1 = 1.5\n"
    install_wheel(site, "bm25s", {"bm25s/__init__.py": source})
    (site / "bm25s-1.0.dist-info").rename(site / f"bm25s-{installed}.dist-info")
    record = site / f"bm25s-{installed}.dist-info" / "RECORD"
    record.write_text(record.read_text().replace("bm25s-1.0.dist-info", f"bm25s-{installed}.dist-info"))
    (site / f"bm25s-{installed}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: bm25s\nVersion: {installed}\n")
    identities = []
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        assert version("bm25s") == installed  # the shadow copy is the one installed
        identities.append(engine_identity())
        (site / "bm25s" / "__init__.py").write_bytes(b"K1 = 0.1  # a patched scorer\n")
        time.sleep(0.01)
        os.chmod(record, 0o644)  # chown -R / chmod -R over the venv, after the patch
        versions._PACKAGE_CODE.clear()  # another process
        identities.append(engine_identity())
    importlib.invalidate_caches()
    assert identities[0] != identities[1]


def _setuptools_finder(name: str, checkout: Path) -> bytes:
    """The finder module setuptools writes for an editable install (``pip install -e``) whose
    layout cannot be put on sys.path as it is: this venv's own for eval_pipeline, its mapping
    pointed at `checkout`."""
    import eval_pipeline

    site = Path(importlib.util.find_spec("setuptools").origin).parents[1]  # type: ignore[union-attr]
    templates = sorted(site.glob("__editable___*_finder.py"))
    if not templates:
        pytest.skip(f"no setuptools editable finder in {site} to copy ({eval_pipeline.__file__})")
    text = templates[0].read_text(encoding="utf-8")
    text = re.sub(r"^MAPPING: .*$", f"MAPPING: dict[str, str] = {{{name!r}: {str(checkout / name)!r}}}",
                  text, count=1, flags=re.M)
    text = re.sub(r"^NAMESPACES: .*$", "NAMESPACES: dict[str, list[str]] = {}", text, count=1, flags=re.M)
    text = re.sub(r"^PATH_PLACEHOLDER = .*$", f"PATH_PLACEHOLDER = '__editable__.{name}-1.0.finder.__path_hook__'",
                  text, count=1, flags=re.M)
    return text.encode()


def test_an_editable_install_through_setuptools_finder_is_hashed_from_its_checkout(
        fresh_package_code, monkeypatch, tmp_path):
    site, checkout = tmp_path / "site", tmp_path / "checkout"
    (checkout / "toyedit").mkdir(parents=True)
    (checkout / "toyedit" / "__init__.py").write_text("def boost():\n    return 1.0\n")
    finder = "__editable___toyedit_1_0_finder"
    install_wheel(site, "toyedit", {f"{finder}.py": _setuptools_finder("toyedit", checkout),
                               "__editable__.toyedit-1.0.pth": f"import {finder}; {finder}.install()".encode()},
             top_level="toyedit")
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(site))
        patch.setattr(sys, "meta_path", list(sys.meta_path))
        importlib.import_module(finder).install()  # what the .pth does at start-up
        sys.modules.pop("toyedit", None)
        assert importlib.import_module("toyedit").boost() == 1.0  # the checkout is what runs
        sys.modules.pop("toyedit", None)
        sys.modules.pop(finder, None)
        before = digest_on_path(monkeypatch, site, "toyedit")
        (checkout / "toyedit" / "__init__.py").write_text("def boost():\n    return 0.5\n")
        after = digest_on_path(monkeypatch, site, "toyedit")
    assert after != before, "the editable checkout's code is not in the digest"


def test_a_package_folder_that_shadows_a_listed_module_changes_the_digest(fresh_package_code, monkeypatch, tmp_path):
    site = tmp_path / "site"
    install_wheel(site, "toyshadow", {"toyshadow/__init__.py": b"",
                                 "toyshadow/score.py": b"def boost():\n    return 1.0\n"})
    before = digest_on_path(monkeypatch, site, "toyshadow")
    (site / "toyshadow" / "score").mkdir()
    (site / "toyshadow" / "score" / "__init__.py").write_text("def boost():\n    return 0.5\n")
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        for name in ("toyshadow.score", "toyshadow"):
            sys.modules.pop(name, None)
        assert importlib.import_module("toyshadow.score").boost() == 0.5  # the new file is what runs
        for name in ("toyshadow.score", "toyshadow"):
            sys.modules.pop(name, None)
    assert digest_on_path(monkeypatch, site, "toyshadow") != before


def test_a_vendored_versioned_shared_library_is_code(fresh_package_code, monkeypatch, tmp_path):
    site = tmp_path / "site"
    install_wheel(site, "toyblas", {"toyblas/__init__.py": b"K1 = 1.5\n",
                               "toyblas.libs/libgfortran-0a1b2c3d.so.5.0.0": b"\x7fELF one"})
    before = digest_on_path(monkeypatch, site, "toyblas")
    (site / "toyblas.libs" / "libgfortran-0a1b2c3d.so.5.0.0").write_bytes(b"\x7fELF two")
    assert digest_on_path(monkeypatch, site, "toyblas") != before


# --------------------------------------------------------------------------------------------
# hole 2: code-graded yardsticks without the code that decides their numbers
# --------------------------------------------------------------------------------------------


def _tree_copy(tmp_path: Path) -> Path:
    """A copy of the project's eval_pipeline package (sources only), to edit."""
    from eval_pipeline.common.state import PROJECT_ROOT

    root = tmp_path / "checkout"
    shutil.copytree(PROJECT_ROOT / "eval_pipeline", root / "eval_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "demo_data", "ict_data"))
    return root


def _edit(root: Path, relative: str, old: str, new: str) -> bool:
    path = root / relative
    text = path.read_text(encoding="utf-8")
    if old not in text:
        return False
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return True


def _grounding_yardstick() -> str:
    from eval_pipeline.grading.registry import GradingContext
    from eval_pipeline.grading.run import _ground_all

    versions._SOURCES.clear()
    _, yardsticks = _ground_all([], GradingContext(llm=None, grade_cache=None, max_tokens=None, sampling="",
                                                   variants=("v",)))
    return yardsticks["v"]


def test_the_grounding_yardstick_moves_when_its_pass_rule_is_edited(monkeypatch, tmp_path):
    from eval_pipeline.common import state

    monkeypatch.setattr(versions, "_SOURCES", {})
    before = _grounding_yardstick()
    root = _tree_copy(tmp_path)
    assert _edit(root, "eval_pipeline/grading/run.py", "passed=not missing_items,",
                 "passed=len(missing_items) <= 1,"), "the grounding pass rule moved: re-aim this test"
    monkeypatch.setattr(state, "PROJECT_ROOT", root)
    assert _grounding_yardstick() != before


def test_the_grounding_yardstick_moves_with_the_unicode_version(monkeypatch):
    import unicodedata

    from eval_pipeline.grading.run import grading_code

    monkeypatch.setattr(versions, "_SOURCES", {})
    before, graded_before = _grounding_yardstick(), grading_code()
    monkeypatch.setattr(unicodedata, "unidata_version", "99.0.0")
    assert grading_code() != graded_before  # the deterministic and static yardsticks move
    assert _grounding_yardstick() != before


def test_the_code_graded_yardstick_moves_when_the_grades_fed_to_the_gate_are_filtered(monkeypatch, tmp_path):
    from eval_pipeline.common import state
    from eval_pipeline.grading.run import grading_code

    monkeypatch.setattr(versions, "_SOURCES", {})
    before = grading_code()
    root = _tree_copy(tmp_path)
    if not _edit(root, "eval_pipeline/grading/summary.py", "        graded = grades[variant]\n",
                 "        graded = grades[variant][grades[variant]['status'] != 'no_answer']\n"):
        return  # the numbers' code left summary.py: nothing to show
    monkeypatch.setattr(state, "PROJECT_ROOT", root)
    versions._SOURCES.clear()
    assert grading_code() != before


# --------------------------------------------------------------------------------------------
# the classic class on today's HEAD: a cache replayed after the code that decides it changed
# --------------------------------------------------------------------------------------------


def test_the_vector_table_moves_when_the_code_that_chunks_and_embeds_changes(monkeypatch, tmp_path):
    from eval_pipeline.common import state
    from eval_pipeline.store.ingest import ChunkingConfig, store_fingerprint

    chunking = ChunkingConfig()
    monkeypatch.setattr(versions, "_SOURCES", {})
    before = store_fingerprint("corpus", chunking, "embedder")
    root = _tree_copy(tmp_path)
    assert _edit(root, "eval_pipeline/store/ingest.py", "        return f\"{chunk.meta['title']}\\n{chunk.content}\"\n",
                 "        return chunk.content\n"), "embedding_text moved: re-aim this test"
    monkeypatch.setattr(state, "PROJECT_ROOT", root)
    versions._SOURCES.clear()
    assert store_fingerprint("corpus", chunking, "embedder") != before


def test_the_embedder_identity_moves_when_the_embedding_code_changes(monkeypatch, tmp_path):
    from eval_pipeline.common import state
    from eval_pipeline.store.embedders import LocalEmbedder

    monkeypatch.setattr(versions, "_SOURCES", {})
    before = LocalEmbedder().identity
    root = _tree_copy(tmp_path)
    assert _edit(root, "eval_pipeline/store/embedders.py", "normalize_embeddings=True",
                 "normalize_embeddings=False"), "the normalization moved: re-aim this test"
    monkeypatch.setattr(state, "PROJECT_ROOT", root)
    versions._SOURCES.clear()
    assert LocalEmbedder().identity != before


# --------------------------------------------------------------------------------------------
# the classic class, answers: a regression that leaves the grounding grader's denominator
# --------------------------------------------------------------------------------------------

_CONTEXT = [[1, "c1", "d1", "Set answers.keep_text to true in config.yaml to keep every answer."]]
_GROUNDED = "Set answers.keep_text in config.yaml [1]."
_INVENTED = "Set answers.keep_texts in settings.toml [1]."
_HEDGE = "I could not find this in the documents."


def _grounding_numbers(texts: list[str]) -> dict:
    """The grounding grader's gated row for one variant's answers (`texts`, one per prompt), as
    graded_answers and answer_metrics compute it."""
    import pandas as pd

    from eval_pipeline.grading.answer_metrics import ANSWER_COLUMNS, answer_metrics, answer_summary_row
    from eval_pipeline.grading.registry import AnswerToGrade, GradingContext
    from eval_pipeline.grading.run import GRADE_COLUMNS, _ground_all

    class Prompt:
        def __init__(self, pid: str):
            self.id, self.prompt = pid, "How do I keep the answers' texts?"

    todo = [AnswerToGrade("v", Prompt(f"p{i}"), {"text": t, "context": _CONTEXT}, False) for i, t in enumerate(texts)]
    rows, _ = _ground_all(todo, GradingContext(llm=None, grade_cache=None, max_tokens=None, sampling="",
                                               variants=("v",)))
    grades = pd.DataFrame(rows["v"], columns=GRADE_COLUMNS)
    answers = pd.DataFrame([{c: None for c in ANSWER_COLUMNS} | {
        "variant": "v", "prompt_id": f"p{i}", "form": "MATCH", "retrieved_gold": True, "model_sent": "m",
        "model_reported": "m", "prompt_tokens": 0, "completion_tokens": 0, "retrieval_ms": 1.0,
        "generation_ms": 1.0, "cached": False} for i in range(len(texts))], columns=list(ANSWER_COLUMNS))
    summary = answer_summary_row(answer_metrics(answers, grades, n_resamples=50))["grounding"]
    return {"pass_rate": summary["pass_rate"], "mean_score": summary["mean_score"], "n_scored": summary["n"]}


def test_answers_that_stop_saying_anything_checkable_do_not_pass_the_grounding_gate():
    from eval_pipeline.gates.answers import evaluate_answer_gate

    yardstick = "grounding:v1+abc+context-only"
    key = {"variant": "v", "grader": "grounding", "set_id": "team.set", "set_fingerprint": "fp",
           "corpus_signature": "corpus", "generator": "extractive", "yardstick": yardstick, "limited": False,
           "errored": 0}
    before = _grounding_numbers([_GROUNDED, _GROUNDED, _GROUNDED, _INVENTED])
    after = _grounding_numbers([_GROUNDED, _HEDGE, _HEDGE, ""])
    assert (before["pass_rate"], before["n_scored"]) == (0.75, 4)
    assert (after["pass_rate"], after["n_scored"]) == (1.0, 1)  # three of four prompts lost their answer
    previous = {**key, **before, "run_id": "run-1", "eligible": True}
    gate = evaluate_answer_gate({**key, **after, "run_id": "run-2"}, previous, None,
                                {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}, strict=True)
    assert not gate.passed, gate.message


def test_a_pth_hotfix_that_runs_at_start_up_is_in_the_engine_identity(fresh_package_code, monkeypatch, tmp_path):
    import site

    from eval_pipeline.ranking.caches import engine_identity

    hotfix_site = tmp_path / "site"
    hotfix_site.mkdir()
    (hotfix_site / "toy_bm25_hotfix.py").write_text("import bm25s\nbm25s.TOY_HOTFIX_K1 = 0.1  # patches the scorer\n")
    with monkeypatch.context() as patch:
        patch.setattr(sys, "path", list(sys.path))
        site.addsitedir(str(hotfix_site))  # the site dir, without the .pth yet
        versions._PACKAGE_CODE.clear()
        before = engine_identity()
        (hotfix_site / "zz-bm25-hotfix.pth").write_text("import toy_bm25_hotfix\n")
        site.addsitedir(str(hotfix_site))  # what the next process's start-up does: the hotfix runs
        import bm25s

        assert bm25s.TOY_HOTFIX_K1 == 0.1
        versions._PACKAGE_CODE.clear()
        after = engine_identity()
        del bm25s.TOY_HOTFIX_K1
        sys.modules.pop("toy_bm25_hotfix", None)
    assert after != before
