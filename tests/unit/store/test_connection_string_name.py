"""One name for a connection string in the library's signatures: `connection_string` (issue
#24; the database resource's attribute, the retrievers', the ingest's and the verdict's). Not
conn_str, conninfo, dsn, url or database_url."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "eval_pipeline"
OTHER_NAMES = {"conn_str", "conninfo", "dsn", "database_url", "db_url", "conn_string", "connstr"}


def parameters_named_otherwise(source: str, label: str) -> list[str]:
    """'label:line function(parameter)' for every parameter given another name, in functions,
    methods and nested functions alike."""
    found = []
    for node in ast.walk(ast.parse(source, filename=label)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.arg in OTHER_NAMES:
                    found.append(f"{label}:{node.lineno} {node.name}({arg.arg})")
    return found


def test_a_connection_string_is_called_connection_string():
    offenders = [hit for path in sorted(PACKAGE.rglob("*.py"))
                 for hit in parameters_named_otherwise(path.read_text(encoding="utf-8"),
                                                       str(path.relative_to(PACKAGE.parent)))]
    assert offenders == [], "name the parameter connection_string:\n" + "\n".join(offenders)


def test_the_scanner_sees_every_kind_of_parameter():
    source = ("def a(conninfo): ...\ndef b(*, conn_str=None): ...\nclass C:\n    def __init__(self, dsn): ...\n"
              "async def d(x, /, database_url): ...\ndef ok(connection_string, url_env=None): ...\n")
    assert parameters_named_otherwise(source, "x.py") == [
        "x.py:1 a(conninfo)", "x.py:2 b(conn_str)", "x.py:5 d(database_url)", "x.py:4 __init__(dsn)"]
