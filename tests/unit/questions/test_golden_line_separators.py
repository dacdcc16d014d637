"""A golden prompt or reference holding U+2028, U+0085 or another character str.splitlines breaks
on is valid JSONL and loads, and `stamp` round-trips it (issue #25, item 6)."""

from __future__ import annotations

import json

import pytest

from eval_pipeline.questions.golden import load_golden_prompts

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_separator_inside_a_prompt_or_reference_loads(tmp_path, sep):
    path = tmp_path / "golden.jsonl"
    rows = [{"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "team.seps"},
            {"id": "p1", "prompt": f"first{sep}second", "reference": f"an{sep}answer",
             "assertions": [{"type": "contains", "value": "answer"}]}]
    path.write_bytes(("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n").encode("utf-8"))
    (prompt,) = load_golden_prompts(path, require_fingerprint=False).prompts
    assert prompt.prompt == f"first{sep}second" and prompt.reference == f"an{sep}answer"
