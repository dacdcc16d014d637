#!/usr/bin/env python3
"""Compare two results.md files, ignoring what differs between any two runs of the same code
on the same inputs: run ids (whole, or the 8 characters a table shows), timings, checkout and
state paths, code versions.

    python scripts/compare_reports.py OLD/results.md NEW/results.md

Prints a unified diff of the normalized reports and exits 1 when they differ, 0 when they are
the same. Used to show that a refactoring changed no number and no line of the report.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
LATENCY_SECTION = "## Latency by stage"
# Columns of timings, masked as <ms> wherever a table has them: in every table (the answers
# table's "p50 / p95 ms"), and in the Variants table (its "p50 ms" and "p95 ms").
TIMING_COLUMNS = {"p50 / p95 ms"}
VARIANTS_TIMING_COLUMNS = {"p50 ms", "p95 ms"}
# Columns naming another run by the start of its id (the flips' "since run"), masked as <run id>.
RUN_ID_COLUMNS = {"since run"}


def normalize(text: str) -> list[str]:
    out = []
    section = ""
    header: list[str] = []  # the current table's column names; empty outside a table
    for line in text.splitlines():
        if line.startswith("## "):
            section = line
        if not line.startswith("|"):
            header = []
        line = UUID.sub("<run id>", line)
        line = re.sub(r"code version: `[^`]*`", "code version: `<code>`", line)
        line = re.sub(r"/[^`\s()]*/([^/`\s()]+\.(?:md|jsonl|yaml))\b", r"<path>/\1", line)
        if section.startswith(LATENCY_SECTION) and line.startswith("| ") and not line.startswith("| variant"):
            line = re.sub(r"\d+\.\d+", "<ms>", line)
        if line.startswith("|"):
            cells = line.strip().strip("|").split("|")
            if not header:
                header = [c.strip() for c in cells]
            elif len(cells) == len(header) and not set(line.strip()) <= set("|-: "):
                masked = TIMING_COLUMNS | (VARIANTS_TIMING_COLUMNS if section == "## Variants" else set())
                cells = [("<ms>" if h in masked else "<run id>" if h in RUN_ID_COLUMNS else c)
                         for h, c in zip(header, cells)]
                line = "|" + "|".join(cells) + "|"
        out.append(line)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    old, new = (normalize(Path(p).read_text(encoding="utf-8")) for p in argv)
    diff = list(difflib.unified_diff(old, new, argv[0], argv[1], lineterm=""))
    print("\n".join(diff) if diff else f"same report (modulo run ids, timings, paths and code version): {argv[1]}")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
