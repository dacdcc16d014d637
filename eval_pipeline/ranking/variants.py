"""Variants: the engine configurations a sweep compares, read from one YAML file.

Each variant is an engine, its knobs and a reranker.  Its partition key is readable and
derived from the config (`hybrid`, `hybrid+mmr`, or an explicit `name`).  Every mistake (an
unknown engine, reranker or knob, a bad value, two variants with one key) is an error when
the file is loaded, naming the variant and the setting and listing what is valid, so a bad
sweep fails before anything is embedded or any paid call is made.  That includes a key given
twice in one YAML mapping (`{path}:{line}: duplicate key ...`, where plain YAML would keep the
last silently) and every reranker option: its name (the reranker's own options, minus the
objects the resource injects, plus `model` for bi-encoder) and its value (the reranker class
is constructed with the file's options, which loads nothing).

    baseline: hybrid            # the variant the others are compared with
    gate:                       # regression gate against the previous run of each variant
      tolerances: {hit@1: 0.05, hit@5: 0.05, mrr: 0.05, ndcg@10: 0.05}
      strict: false             # true: a changed corpus/labels or missing provenance fails too
    schedule: {cron: "0 2 * * *"}   # the nightly run
    variants:
      - engine: pg-dense
      - engine: hybrid
        fusion: rrf             # rrf | merge | dbsf (Haystack DocumentJoiner modes)
        rrf_k: 60
        legs: [keyword, dense]  # any two or more of keyword, dense, bm25
      - engine: hybrid
        tune: rrf_k             # chosen on the tuning questions (see `tuning:` in the sweep file)
        name: hybrid-tuned
      - engine: hybrid
        reranker: {kind: cross-encoder, model: /path/to/model}
        name: hybrid+ce-mini
      - engine: hybrid
        abstain: {policy: auto}  # refuses below a threshold chosen on the tuning questions
        name: hybrid-refuses     # (eval_pipeline.ranking.abstention)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eval_pipeline.common.checks import is_integer, is_real
from eval_pipeline.ranking.abstention import AbstainSpec, parse_abstain
from eval_pipeline.ranking.defaults import DEPTH, RRF_K, RRF_K_RANGE
from eval_pipeline.ranking.engines import ENGINE_NAMES, ENGINES, LEGS, MAX_DENSE_TOP_K, leg_kind
from eval_pipeline.ranking.engines import legs as leg_kinds
from eval_pipeline.ranking.fusion_tuning import METHODS as TUNE_METHODS
from eval_pipeline.ranking.rerankers import (
    RERANKER_KINDS,
    RERANKERS,
    ResourceServices,
    build_reranker,
    reranker_options,
)

FUSION_MODES = ("rrf", "merge", "dbsf")

__all__ = ["ENGINE_NAMES", "LEGS", "MAX_DENSE_TOP_K", "RerankerSpec", "Variant", "VariantConfigError", "Where",
           "parse_variant", "resolved_leg_settings"]


_KEY = re.compile(r"^[a-z0-9][a-z0-9+._@-]{0,63}$")


COMMON_KNOBS = {"engine", "name", "reranker", "depth", "chunk_top_k", "rerank_depth", "abstain_below", "abstain"}


# Settings of each first-stage leg (its kind's `options`, eval_pipeline.ranking.engines.ENGINES),
# given on the variant that uses the leg (a pg-keyword variant, or a hybrid with that leg). What
# is not given is the leg's default, decided by its engine; the engine's resolved settings are
# recorded with the results. A fusing engine's own settings are its kind's `engine_options`.


def _fuses(engine: str) -> bool:
    kind = ENGINES.get(engine)
    return kind is not None and kind.fuses


def _own_legs(engine: str) -> tuple[str, ...]:
    kind = ENGINES.get(engine)
    return (kind.leg,) if kind is not None and kind.leg is not None else ()


class VariantConfigError(ValueError):
    """A variants file that cannot be used; names the file, the variant and the setting."""


def _no_lines(path: tuple[Any, ...]) -> int | None:
    return None


@dataclass(frozen=True)
class Where:
    """Where a message about one variant points. `str(where)` is the variant as a whole,
    `source:line: variant N` with the line its mapping starts on; `where.at("depth")` is the same
    text with the line of its `depth:` key, `where.at("reranker", "model")` with the line of a
    setting inside a setting, and `where.first(paths)` with the line of whichever of several
    settings comes first in the file (a message naming several unknown ones). Only the line
    differs: the text after it is the one README documents, `FILE:LINE: variant N: SETTING ...`.

    Why an object: the parser of a variant (here) knows which setting each message is about, and
    only the reader of the file knows the lines; that reader, eval_pipeline.config.sweep, is a
    later stage that ranking/ may not import, so it hands the lines over as `lines` (a setting's
    path of keys -> its line, None when not known) and every message asks for the setting it
    names. A setting whose line is not known (a default, or a mapping not read from a file)
    points at the nearest enclosing setting that has one, then at the variant's line, then at no
    line: a plain string `where` (`Where.of("the reference configuration x")`) reads as given.
    `tail` is what follows the line (`: variant 3`); `named(" ('hybrid+mmr')")` appends to it."""

    source: str
    tail: str = ""
    line: int | None = None
    lines: Callable[[tuple[Any, ...]], int | None] = _no_lines

    @classmethod
    def of(cls, where: str | Where) -> Where:
        return where if isinstance(where, Where) else cls(where)

    def __str__(self) -> str:
        return self._text(self.line)

    def at(self, *path: Any) -> str:
        return self._text(self._line(path))

    def first(self, paths: Iterable[tuple[Any, ...]]) -> str:
        known = [line for line in (self._line(tuple(path)) for path in paths) if line]
        return self._text(min(known, default=self.line))

    def named(self, label: str) -> Where:
        return replace(self, tail=self.tail + label)

    def _line(self, path: tuple[Any, ...]) -> int | None:
        while path:
            line = self.lines(path)
            if line:
                return line
            path = path[:-1]
        return self.line

    def _text(self, line: int | None) -> str:
        return f"{self.source}:{line}{self.tail}" if line else f"{self.source}{self.tail}"


@dataclass(frozen=True)
class RerankerSpec:
    kind: str = "none"
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **dict(self.options)}


@dataclass(frozen=True)
class Variant:
    key: str
    engine: str
    depth: int = DEPTH
    chunk_top_k: int = 100
    rerank_depth: int = DEPTH
    abstain_below: float | None = None
    fusion: str = "rrf"
    rrf_k: int = RRF_K
    weights: tuple[float, ...] | None = None
    legs: tuple[str, ...] = ("keyword", "dense")
    reranker: RerankerSpec = field(default_factory=RerankerSpec)
    leg_knobs: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()  # (leg, sorted (knob, value) pairs)
    # hybrid: choose rrf_k or the leg weights by grid search on the sweep's tuning questions
    # (eval_pipeline.ranking.fusion_tuning); every variant is then scored on the held-out rest
    tune: str | None = None
    # when the variant refuses (eval_pipeline.ranking.abstention): `abstain:` in the file, or the
    # legacy `abstain_below` (a threshold on the top score); `auto` has its `below` chosen on the
    # tuning questions before the scored ones are ranked
    abstain: AbstainSpec = field(default_factory=AbstainSpec)

    @property
    def refusal_threshold(self) -> float | None:
        """The threshold the variant refuses below (None: it refuses only an empty list)."""
        return self.abstain.below if self.abstain.policy != "none" else None

    @property
    def dense_leg(self) -> str | None:
        """The first of its legs on the dense side (its confidence `dense_cosine` reads it)."""
        return next((leg for leg in self.used_legs if leg_kind(leg).side == "dense"), None)

    @property
    def used_legs(self) -> tuple[str, ...]:
        """The first-stage legs this variant queries (none for metadata)."""
        return self.legs if _fuses(self.engine) else _own_legs(self.engine)

    def leg_settings(self, leg: str) -> dict[str, Any]:
        """The settings the variants file gives `leg` ({} for the leg's defaults)."""
        return dict(dict(self.leg_knobs).get(leg, ()))

    @property
    def first_stage(self) -> tuple:
        """Everything that decides the candidate pool; variants that differ only by reranker
        or threshold share it, so a reranker sweep never re-queries the store."""
        hybrid = (self.fusion, self.rrf_k, self.weights, self.legs, self.tune) if _fuses(self.engine) else ()
        return (self.engine, self.chunk_top_k, max(self.depth, self.rerank_depth), *hybrid, self.leg_knobs)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "depth": self.depth, "chunk_top_k": self.chunk_top_k}
        if _fuses(self.engine):
            out.update(fusion=self.fusion, legs=list(self.legs))
            if self.fusion == "rrf":
                out["rrf_k"] = self.rrf_k
            if self.weights:
                out["weights"] = list(self.weights)
            if self.tune:
                out["tune"] = self.tune
        if self.reranker.kind != "none":
            out["reranker"] = self.reranker.to_json()
            out["rerank_depth"] = self.rerank_depth
        if self.abstain_below is not None:
            out["abstain_below"] = self.abstain_below
        elif self.abstain.policy != "none":
            out["abstain"] = self.abstain.describe()
        for _, knobs in self.leg_knobs:
            out.update(knobs)
        return out


def parse_variant(item: Any, where: str | Where) -> Variant:
    """The variant `item` (a mapping, or an engine's name) describes; every mistake is a
    VariantConfigError that starts with `where`, pointing at the line of the setting at fault."""
    where = Where.of(where)
    if isinstance(item, str):
        item = {"engine": item}
    if not isinstance(item, dict):
        raise VariantConfigError(f"{where}: expected a mapping like {{engine: hybrid}}")
    engine = item.get("engine")
    if not isinstance(engine, str) or engine not in ENGINES:
        raise VariantConfigError(
            f"{where.at('engine')}: engine {engine!r} is not valid; valid engines: {', '.join(ENGINE_NAMES)}")
    kind = ENGINES[engine]
    given_legs = item.get("legs", ["keyword", "dense"])
    listed = tuple(given_legs) if isinstance(given_legs, (list, tuple)) else ()
    legs_used = listed if kind.fuses else _own_legs(engine)
    by_leg = leg_kinds()
    leg_knobs = {knob for leg in legs_used if isinstance(leg, str) and leg in by_leg
                 for knob in by_leg[leg].option_names}
    allowed = COMMON_KNOBS | set(kind.engine_options) | leg_knobs
    unknown = sorted(set(item) - allowed, key=str)  # keys of any type (1, null): sorted as text
    if unknown:
        raise VariantConfigError(f"{where.first((key,) for key in unknown)} ({engine}): unknown setting(s) "
                                 f"{unknown}; valid: {', '.join(sorted(allowed))}")

    depth = _int(item, "depth", DEPTH, where, lo=1, hi=1000)
    kwargs: dict[str, Any] = {
        "engine": engine,
        "depth": depth,
        "chunk_top_k": _int(item, "chunk_top_k", max(100, 5 * depth), where, lo=1, hi=100_000),
        "rerank_depth": _int(item, "rerank_depth", depth, where, lo=1, hi=1000),
        "abstain_below": _float(item, "abstain_below", None, where),
        "reranker": _reranker(item.get("reranker", "none"), where, item),
    }
    if kind.fuses:
        fusion = item.get("fusion", "rrf")
        if fusion not in FUSION_MODES:
            raise VariantConfigError(
                f"{where.at('fusion')}: fusion {fusion!r} is not valid; valid: {', '.join(FUSION_MODES)}")
        legs = item.get("legs", ["keyword", "dense"])
        if (not isinstance(legs, list) or len(legs) < 2 or any(leg not in LEGS for leg in legs)
                or len(set(legs)) != len(legs)):
            raise VariantConfigError(
                f"{where.at('legs')}: legs {legs!r} must list two or more distinct of {', '.join(LEGS)}")
        weights = item.get("weights")
        if weights is not None:
            if (not isinstance(weights, list) or len(weights) != len(legs)
                    or not all(_finite_number(w) and w >= 0 for w in weights) or sum(weights) <= 0):
                raise VariantConfigError(f"{where.at('weights')}: weights {weights!r} must be {len(legs)} "
                                         "non-negative numbers (one per leg), not all 0")
            weights = tuple(float(w) for w in weights)
        if "rrf_k" in item and fusion != "rrf":
            raise VariantConfigError(f"{where.at('rrf_k')}: rrf_k only applies to fusion: rrf (got fusion: {fusion})")
        rrf_k = _int(item, "rrf_k", RRF_K, where, lo=RRF_K_RANGE[0], hi=RRF_K_RANGE[1])
        kwargs.update(fusion=fusion, rrf_k=rrf_k, weights=weights, legs=tuple(legs), tune=_tune(item, fusion, where))
    kwargs["leg_knobs"] = _leg_knobs(item, where)
    has_dense = any(leg_kind(leg).side == "dense" for leg in (kwargs["legs"] if kind.fuses else legs_used)
                    if isinstance(leg, str) and leg in by_leg)
    try:
        kwargs["abstain"] = parse_abstain(item.get("abstain"), where.at("abstain"), has_dense=has_dense,
                                          legacy_below=kwargs["abstain_below"],
                                          at=lambda *keys: where.first(("abstain", key) for key in keys))
    except ValueError as exc:
        raise VariantConfigError(str(exc)) from None
    for leg in legs_used:
        deepest = by_leg[leg].max_top_k
        if deepest is not None and kwargs["chunk_top_k"] > deepest:
            why = f": {by_leg[leg].max_top_k_why}" if by_leg[leg].max_top_k_why else ""
            # not given, chunk_top_k follows depth: the line of depth
            at = where.at("chunk_top_k" if "chunk_top_k" in item else "depth")
            raise VariantConfigError(
                f"{at}: chunk_top_k {kwargs['chunk_top_k']} is too deep for the {leg} leg{why}; use at most {deepest}")
    name = item.get("name")
    key = name if name is not None else engine + (
        "" if kwargs["reranker"].kind == "none" else f"+{kwargs['reranker'].kind}")
    if not isinstance(key, str) or not _KEY.match(key):
        raise VariantConfigError(
            f"{where.at('name')}: name {key!r} must be 1-64 characters of lowercase letters, digits and + . _ @ -"
        )
    return Variant(key=key, **kwargs)


def _tune(item: Mapping[str, Any], fusion: str, where: Where) -> str | None:
    """`tune: rrf_k | weights`: what fusion tuning may choose; the tuned setting itself must not
    also be given, and the fusion must have it (dbsf ignores weights)."""
    method = item.get("tune")
    if method is None:
        return None
    at = where.at("tune")
    if method not in TUNE_METHODS:
        raise VariantConfigError(f"{at}: tune {method!r} is not valid; valid: {', '.join(TUNE_METHODS)}")
    if method in item:
        raise VariantConfigError(f"{at}: tune: {method} chooses {method}; do not also give {method}")
    if method == "rrf_k" and fusion != "rrf":
        raise VariantConfigError(f"{at}: tune: rrf_k needs fusion: rrf (got fusion: {fusion})")
    if method == "weights" and fusion == "dbsf":
        raise VariantConfigError(f"{at}: tune: weights cannot tune fusion dbsf, which ignores leg weights; "
                                 "use rrf or merge")
    return method


def resolved_leg_settings(leg: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A leg's settings with its engine's defaults filled in, as the engine will run them;
    computed without building the engine (nothing connects or loads), so it can be recorded
    even for a leg that fails."""
    return dict(leg_kind(leg).resolve(given))


def _leg_knobs(item: Mapping[str, Any], where: Where) -> tuple:
    """The leg settings the variant gives, validated by each leg kind's options, as
    (leg, ((knob, value), ...)) pairs, the knobs sorted, the legs in registration order."""
    out = []
    for leg, kind in leg_kinds().items():
        given = []
        for option in kind.options:
            if option.name not in item:
                continue
            try:
                given.append((option.name, option.check(item[option.name])))
            except ValueError as exc:
                raise VariantConfigError(f"{where.at(option.name)}: {exc}") from None
        if given:
            out.append((leg, tuple(sorted(given))))
    return tuple(out)


def _reranker(value: Any, where: Where, item: Mapping[str, Any] | None = None) -> RerankerSpec:
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict) or value.get("kind") not in RERANKER_KINDS:
        kind = value.get("kind") if isinstance(value, dict) else value
        raise VariantConfigError(f"{where.at('reranker', 'kind')}: reranker {kind!r} is not valid; "
                                 f"valid rerankers: {', '.join(RERANKER_KINDS)}")
    kind = value["kind"]
    options = {k: v for k, v in value.items() if k != "kind"}
    try:
        json.dumps(options)
    except TypeError:
        raise VariantConfigError(f"{where.at('reranker')}: reranker options must be plain values") from None
    _check_reranker_options(kind, options, _label(where, item, kind))
    return RerankerSpec(kind=kind, options=options)


# What a reranker's options may be in a file: its constructor's options minus what the services
# inject (its kind's `needs`: an LLM client, a second model's embedder), plus what they read (a
# second model's `model`), each value checked by the kind's `checks`, then by its constructor,
# built with stand-ins for what it needs (cheap, loads nothing).


def file_reranker_options(kind: str) -> list[str]:
    """The options a variants file may give a reranker of `kind`."""
    spec = RERANKERS[kind]
    return [name for name in reranker_options(kind) if name not in spec.injected] + list(spec.added)


class _StandInLLM:
    """Stands in for the LLM client the resource injects, to check the other options."""

    def complete(self, messages, **kwargs):  # pragma: no cover - never called
        raise NotImplementedError


class _StandInEmbedder:
    """Stands in for the embedder the resource builds from `model`."""

    def embed(self, texts):  # pragma: no cover - never called
        raise NotImplementedError


class _StandIns(ResourceServices):
    """A model the resource may default stands in as a name (RerankerResource.cross_encoder_model...)."""

    def default_model(self, kind: str) -> str | None:
        return "stand-in-model"


_CHECK_SERVICES = _StandIns(llm_client=_StandInLLM, make_embedder=lambda model: _StandInEmbedder())


def _label(where: Where, item: Mapping[str, Any] | None, kind: str) -> Where:
    """`where` plus the variant's name (given or derived), for messages about its reranker."""
    if item is None:
        return where
    name = item.get("name")
    if not isinstance(name, str):
        name = f"{item.get('engine')}" + ("" if kind == "none" else f"+{kind}")
    return where.named(f" ({name!r})")


def _check_reranker_options(kind: str, options: Mapping[str, Any], where: Where) -> None:
    """Each message points at the option it names (the first in the file of several unknown
    ones); one from the constructor, which checks the options together, at the reranker."""
    spec = RERANKERS[kind]
    valid = file_reranker_options(kind)
    listing = ", ".join(valid) or "none"
    unknown = sorted(set(options) - set(valid), key=str)
    if unknown:
        injected = [u for u in unknown if u in spec.injected]
        note = f" ({', '.join(injected)}: supplied by the resource, not the file)" if injected else ""
        raise VariantConfigError(
            f"{where.first(('reranker', u) for u in unknown)}: reranker {kind!r} has no option(s) "
            f"{', '.join(repr(u) for u in unknown)}{note}; valid options: {listing}"
        )
    checks = {option.name: option for option in spec.checks}
    for name, value in options.items():
        if name in checks and not checks[name].test(value):
            raise VariantConfigError(f"{where.at('reranker', name)}: reranker {kind!r} option {name!r} must be "
                                     f"{checks[name].expected}, got {value!r}")
    # The constructors check the rest (ranges, types); they are cheap and load nothing.
    try:
        build_reranker(kind, options, _CHECK_SERVICES)
    except (ValueError, TypeError) as exc:
        raise VariantConfigError(
            f"{where.at('reranker')}: reranker {kind!r}: {exc}; valid options: {listing}") from None


def _finite_number(x: Any) -> bool:
    return is_real(x) and math.isfinite(x)


def _int(item: Mapping[str, Any], name: str, default: int, where: Where, *, lo: int, hi: int) -> int:
    value = item.get(name, default)
    if not is_integer(value) or not lo <= value <= hi:
        raise VariantConfigError(f"{where.at(name)}: {name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _float(item: dict, name: str, default: float | None, where: Where) -> float | None:
    value = item.get(name, default)
    if value is None:
        return None
    if not _finite_number(value):
        raise VariantConfigError(f"{where.at(name)}: {name} must be a finite number, got {value!r}")
    return float(value)
