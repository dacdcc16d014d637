"""Users' regular expressions, run with a bound.

A golden prompt's `regex` assertion is user input, and Python's `re` can take exponential time
on a pattern that backtracks catastrophically (`^(\\w+\\s?)*$` on a long answer ran 13 minutes
on 10 answers). Patterns are compiled by the `regex` module, which takes a time limit per
search, and checked once at load against probe strings built to trigger that backtracking
(runs of each character class, and of the pattern's own literal characters, ending in a
character that cannot match): a pattern that exceeds the probe bound is refused, naming it.
Any later search that still exceeds its bound raises `PatternTimeout`, never hangs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import regex

__all__ = ["REGEX_FLAGS", "CompiledPattern", "PatternTimeout", "bounded_search", "check_bounded", "compile_pattern"]

REGEX_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL}
CompiledPattern = Any  # a `regex` module Pattern (the module ships no type information)
SEARCH_SECONDS = 1.0  # one answer: ordinary patterns take microseconds
PROBE_SECONDS = 0.05  # each load-time probe
_PROBE_LENGTH = 48  # 2^48 steps for a nested quantifier: far beyond any bound


class PatternTimeout(ValueError):
    """A pattern that took longer than its bound: it backtracks catastrophically."""


def compile_pattern(pattern: str, flags: Iterable[str]) -> CompiledPattern:
    """The pattern compiled (V0: Python `re` syntax and behaviour) with flags among i, m, s;
    a ValueError naming it when it is not a valid regular expression."""
    bits = 0
    for flag in flags:
        if flag not in REGEX_FLAGS:
            raise ValueError(f"flags may hold only {', '.join(map(repr, REGEX_FLAGS))}, got {flag!r}")
        bits |= REGEX_FLAGS[flag]
    try:
        return regex.compile(pattern, bits | regex.VERSION0)
    except (regex.error, TypeError) as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None


def bounded_search(compiled: CompiledPattern, text: str, *, timeout: float = SEARCH_SECONDS) -> bool:
    """Whether the pattern occurs in `text`; `PatternTimeout` after `timeout` seconds."""
    try:
        return compiled.search(text, timeout=timeout) is not None
    except TimeoutError:
        raise PatternTimeout(f"pattern {compiled.pattern!r} took more than {timeout:g} s on a {len(text)}-character "
                             "text: it can backtrack catastrophically (nested quantifiers such as (a+)+ or "
                             "(\\w+\\s?)*); rewrite it without nested repetition") from None


def _probes(pattern: str) -> list[str]:
    units = ["a", "1", " ", "a ", "ab", "a1", "-", "\n", "\t", "_"]
    units += sorted({c for c in pattern if c.isalnum()})  # the pattern's own literals: (x+x+)+y needs x
    stops = ("!", "\x00")
    return [unit * (_PROBE_LENGTH // len(unit)) + stop for unit in dict.fromkeys(units) for stop in stops]


def check_bounded(compiled: CompiledPattern, shown: str | None = None) -> None:
    """Refuse (`PatternTimeout`, naming the pattern) a pattern that backtracks catastrophically
    on a probe string; a few milliseconds for an ordinary pattern."""
    for probe in _probes(compiled.pattern):
        try:
            compiled.search(probe, timeout=PROBE_SECONDS)
        except TimeoutError:
            raise PatternTimeout(
                f"pattern {shown or compiled.pattern!r} can backtrack catastrophically: it ran over "
                f"{PROBE_SECONDS:g} s on a {len(probe)}-character probe ({probe[:12]!r}...); a long answer would "
                "hang the grading. Rewrite it without nested repetition (e.g. (a+)+, (\\w+\\s?)*)") from None
