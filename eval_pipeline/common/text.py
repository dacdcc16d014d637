"""What counts as a word: one definition for every place that tokenizes text (the metadata
and BM25 engines, the question generator's name masking and overlap checks)."""

from __future__ import annotations

import re

TOKEN = re.compile(r"[^\W_]+")  # a run of Unicode letters and digits; underscores and punctuation split
