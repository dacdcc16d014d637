"""The eval_pipeline package is a plain library shaped like the asset graph.

- Dagster lives only in the orchestration layer (definitions.py, assets/, resources/): no
  module under eval_pipeline/ may import dagster.
- One package per stage, each importing only the stages below it:
  common < metrics < corpus < store < questions < ranking < answering < grading < scoring < history
  < gates < validity < verdict < recommend < config < reporting.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = PROJECT_ROOT / "eval_pipeline"

STAGES = ("common", "metrics", "corpus", "store", "questions", "ranking", "answering", "grading", "scoring",
          "history", "gates", "validity", "verdict", "recommend", "config", "reporting")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


LIBRARY_MODULES = tuple(sorted(_module_name(p) for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts))


def _is_dagster(module: str | None) -> bool:
    if not module:
        return False
    top = module.split(".")[0]
    return top == "dagster" or top.startswith("dagster_")


def dagster_imports(source: str, filename: str = "<src>") -> list[str]:
    """'line: module' for every Import/ImportFrom of dagster or dagster_* anywhere in the tree
    (including imports nested in functions, classes, try blocks and TYPE_CHECKING guards)."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: {a.name}" for a in node.names if _is_dagster(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_dagster(node.module):
            found.append(f"{node.lineno}: {node.module}")
    return found


def _library_files() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import dagster", 1),
        ("import dagster as dg", 1),
        ("import os, dagster.core", 1),
        ("from dagster import asset", 1),
        ("from dagster._core.definitions import x", 1),
        ("import dagster_postgres", 1),
        ("from dagster_webserver import app", 1),
        ("def f():\n    from dagster import op\n", 1),
        ("try:\n    import dagster\nexcept ImportError:\n    pass\n", 1),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dagster\n", 1),
        ("import os\nfrom pathlib import Path", 0),
        ("import dagsterish\nfrom . import dagster_helpers", 0),  # not dagster; relative import
        ("x = 'import dagster'", 0),
    ],
)
def test_scanner_detects_dagster_imports(source, expected):
    assert len(dagster_imports(source)) == expected


def test_scan_covers_every_library_module():
    names = {_module_name(p) for p in _library_files()}
    assert set(LIBRARY_MODULES) == names and len(names) > 30


def library_imports(source: str, filename: str = "<src>") -> list[tuple[int, str]]:
    """(line, module) of every import of an eval_pipeline module anywhere in the tree
    (function-level and TYPE_CHECKING imports count: they are dependencies too)."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "eval_pipeline"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "eval_pipeline":
            if node.module == "eval_pipeline":
                found += [(node.lineno, f"eval_pipeline.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_lives_in_a_stage_package():
    loose = [m for m in LIBRARY_MODULES if m != "eval_pipeline" and _stage(m) not in STAGES]
    assert loose == [], f"modules outside the stage packages {STAGES}: {loose}"


def test_a_package_imports_only_the_stages_below_it():
    offenders = []
    for path in _library_files():
        module = _module_name(path)
        own = _stage(module)
        if own is None:
            continue
        for line, imported in library_imports(path.read_text(encoding="utf-8"), str(path)):
            target = _stage(imported)
            if target not in STAGES or STAGES.index(target) > STAGES.index(own):
                offenders.append(f"{path.relative_to(PROJECT_ROOT)}:{line} ({own}) imports {imported} ({target})")
    assert offenders == [], "a stage may import only the stages below it:\n" + "\n".join(offenders)


@pytest.mark.parametrize("source, expected", [
    ("from eval_pipeline.store.ingest import ingest", ["eval_pipeline.store.ingest"]),
    ("def f():\n    import eval_pipeline.verdict.retrieval as v\n", ["eval_pipeline.verdict.retrieval"]),
    ("from eval_pipeline import store", ["eval_pipeline.store"]),
    ("import os\nfrom pathlib import Path", []),
])
def test_the_layering_scanner_sees_every_import(source, expected):
    assert [m for _, m in library_imports(source)] == expected


def test_no_library_source_imports_dagster():
    offenders = {}
    for path in _library_files():
        hits = dagster_imports(path.read_text(encoding="utf-8"), str(path))
        if hits:
            offenders[str(path.relative_to(PROJECT_ROOT))] = hits
    assert offenders == {}, f"eval_pipeline must not import dagster: {offenders}"


def test_importing_the_library_does_not_load_dagster():
    imports = ", ".join(LIBRARY_MODULES)
    code = (
        f"import {imports}; import sys; "
        "bad = sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.') or m.startswith('dagster_')); "
        "assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
