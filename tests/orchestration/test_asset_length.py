"""Thin assets: no asset, op, check or graph body in the Dagster layer is longer than 25 lines.

Behaviour lives in eval_pipeline/ (one library function per asset where it makes sense), so a
newcomer finds any behaviour in two hops: the asset, then the one function it calls.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "assets").glob("*.py")) + [ROOT / "definitions.py"]
DECORATORS = {"asset", "op", "asset_check", "graph_asset", "multi_asset_check", "multi_asset", "graph", "job"}
MAX_LINES = 25


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def body_lengths(source: str, filename: str = "<src>") -> dict[str, int]:
    """name -> lines of the body (docstring excluded) of every function decorated as a Dagster
    asset, op, check or graph."""
    out = {}
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not any(_decorator_name(d) in DECORATORS for d in node.decorator_list):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        out[node.name] = (body[-1].end_lineno - body[0].lineno + 1) if body else 0
    return out


@pytest.mark.parametrize("source, expected", [
    ("@asset\ndef a():\n    '''doc\n    more'''\n    x = 1\n    return x\n", {"a": 2}),
    ("@dg.asset(group_name='g')\ndef a():\n    return (1,\n            2)\n", {"a": 2}),
    ("@multi_asset_check(specs=[])\ndef c():\n    yield 1\n", {"c": 1}),
    ("def helper():\n    return 1\n", {}),
    ("@op(out=DynamicOut())\ndef o():\n    '''only a docstring'''\n", {"o": 0}),
])
def test_the_scanner_measures_decorated_bodies(source, expected):
    assert body_lengths(source) == expected


def test_the_scanner_sees_every_asset():
    names = {n for path in FILES for n in body_lengths(path.read_text(), str(path))}
    assert {"corpus_snapshot", "pgvector_store", "question_set", "variant_metrics", "report", "ranked_results",
            "plan_ranking", "rank_variants", "collect_ranked_results", "plan_ingest", "ingest_shard", "finish_ingest",
            "no_errored_questions"} <= names


def test_no_asset_or_op_body_is_longer_than_25_lines():
    too_long = {f"{path.relative_to(ROOT)}:{name}": n for path in FILES
                for name, n in body_lengths(path.read_text(), str(path)).items() if n > MAX_LINES}
    assert too_long == {}, f"bodies over {MAX_LINES} lines (move the policy into eval_pipeline/): {too_long}"
