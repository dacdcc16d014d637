"""scripts/compare_reports.py masks what differs between two runs of the same code on the same
inputs: here, the answers table's "p50 / p95 ms" column, whatever section holds it."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "compare_reports.py"
spec = importlib.util.spec_from_file_location("compare_reports", SCRIPT)
compare_reports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_reports)


def _report(ms: str, score: str = "0.80") -> str:
    return "\n".join([
        "## Answer quality", "",
        "| variant | grader | n | pass rate | p50 / p95 ms | tokens |",
        "|---|---|---|---|---|---|",
        f"| hybrid | static | 12 | {score} | {ms} | 340 |",
        "", "Text after the table | with a bar.", "",
        "| other | p50 / p95 ms |", "|---|---|", f"| x | {ms} |",
    ])


def test_timing_column_is_masked_in_any_table():
    a, b = compare_reports.normalize(_report("12.1 / 40.3")), compare_reports.normalize(_report("9.8 / 51.0"))
    assert a == b
    assert "| hybrid | static | 12 | 0.80 |<ms>| 340 |" in a
    assert "| x |<ms>|" in a


def test_other_columns_still_differ():
    assert compare_reports.normalize(_report("1 / 2")) != compare_reports.normalize(_report("1 / 2", score="0.75"))


def _flips(since: str, flips: str = "0") -> str:
    return "\n".join(["## How far can the numbers be trusted?", "",
                      "| variant | since run | hit→miss | miss→hit | nondeterministic |", "|---|---:|---:|---:|---:|",
                      f"| pg-dense | {since} | {flips} | 0 | 0 |"])


def test_the_flips_short_run_id_is_masked():
    """The flips table names the run it compared with by the first 8 characters of its id: no
    run id pattern catches it, and two runs of the same code differ there."""
    assert compare_reports.normalize(_flips("cc1f298b")) == compare_reports.normalize(_flips("a70a9d2f"))
    assert compare_reports.normalize(_flips("cc1f298b")) != compare_reports.normalize(_flips("cc1f298b", flips="1"))
