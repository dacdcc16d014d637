"""The eval_pipeline package is a plain library: Dagster lives only in the orchestration layer
(definitions.py, assets/, resources/).  No module under eval_pipeline/ may import dagster."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = PROJECT_ROOT / "eval_pipeline"

LIBRARY_MODULES = tuple(
    sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "eval_pipeline").glob("*.py") if p.stem != "__init__")
)


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
    names = {p.stem for p in _library_files()}
    assert set(LIBRARY_MODULES) <= names


def test_no_library_source_imports_dagster():
    offenders = {}
    for path in _library_files():
        hits = dagster_imports(path.read_text(encoding="utf-8"), str(path))
        if hits:
            offenders[str(path.relative_to(PROJECT_ROOT))] = hits
    assert offenders == {}, f"eval_pipeline must not import dagster: {offenders}"


def test_importing_the_library_does_not_load_dagster():
    imports = ", ".join(f"eval_pipeline.{m}" for m in LIBRARY_MODULES)
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
