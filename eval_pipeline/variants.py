"""Variants: the engine configurations a sweep compares, read from one YAML file.

Each variant is an engine, its knobs and a reranker.  Its partition key is readable and
derived from the config (`hybrid`, `hybrid+mmr`, or an explicit `name`).  Every mistake (an
unknown engine, reranker or knob, a bad value, two variants with one key) is an error when
the file is loaded, naming the variant and the setting and listing what is valid, so a bad
sweep fails before anything is embedded or any paid call is made.

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
        reranker: {kind: cross-encoder, model: /path/to/model}
        name: hybrid+ce-mini
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval_pipeline.engines import ENGINE_NAMES

RERANKER_KINDS = ("none", "cross-encoder", "bi-encoder", "llm", "mmr")
FUSION_MODES = ("rrf", "merge", "dbsf")
LEGS = ("keyword", "dense", "bm25")
_KEY = re.compile(r"^[a-z0-9][a-z0-9+._@-]{0,63}$")

COMMON_KNOBS = {"engine", "name", "reranker", "depth", "chunk_top_k", "rerank_depth", "abstain_below"}
HYBRID_KNOBS = {"fusion", "rrf_k", "weights", "legs"}


class VariantConfigError(ValueError):
    """A variants file that cannot be used; names the file, the variant and the setting."""


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
    depth: int = 20
    chunk_top_k: int = 100
    rerank_depth: int = 20
    abstain_below: float | None = None
    fusion: str = "rrf"
    rrf_k: int = 61
    weights: tuple[float, ...] | None = None
    legs: tuple[str, ...] = ("keyword", "dense")
    reranker: RerankerSpec = field(default_factory=RerankerSpec)

    @property
    def first_stage(self) -> tuple:
        """Everything that decides the candidate pool; variants that differ only by reranker
        or threshold share it, so a reranker sweep never re-queries the store."""
        hybrid = (self.fusion, self.rrf_k, self.weights, self.legs) if self.engine == "hybrid" else ()
        return (self.engine, self.chunk_top_k, max(self.depth, self.rerank_depth), *hybrid)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "depth": self.depth, "chunk_top_k": self.chunk_top_k}
        if self.engine == "hybrid":
            out.update(fusion=self.fusion, legs=list(self.legs))
            if self.fusion == "rrf":
                out["rrf_k"] = self.rrf_k
            if self.weights:
                out["weights"] = list(self.weights)
        if self.reranker.kind != "none":
            out["reranker"] = self.reranker.to_json()
            out["rerank_depth"] = self.rerank_depth
        if self.abstain_below is not None:
            out["abstain_below"] = self.abstain_below
        return out


DEFAULT_CRON = "0 2 * * *"


@dataclass(frozen=True)
class SweepConfig:
    variants: tuple[Variant, ...]
    baseline: str
    source: str
    tolerances: Mapping[str, float] = field(default_factory=dict)
    strict: bool = False
    cron: str = DEFAULT_CRON

    @property
    def keys(self) -> list[str]:
        return [v.key for v in self.variants]

    def by_key(self) -> dict[str, Variant]:
        return {v.key: v for v in self.variants}


def load_sweep(path: str | Path) -> SweepConfig:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise VariantConfigError(f"{path}: cannot read variants file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise VariantConfigError(f"{path}: invalid YAML: {exc}") from exc
    return parse_sweep(data, source=str(path))


def parse_sweep(data: Any, *, source: str = "<config>") -> SweepConfig:
    if not isinstance(data, dict):
        raise VariantConfigError(f"{source}: expected a mapping with 'variants' (and optionally 'baseline')")
    unknown = set(data) - {"variants", "baseline", "gate", "schedule"}
    if unknown:
        raise VariantConfigError(
            f"{source}: unknown top-level setting(s) {sorted(unknown)}; valid: baseline, gate, schedule, variants"
        )
    raw = data.get("variants")
    if not isinstance(raw, list) or not raw:
        raise VariantConfigError(f"{source}: 'variants' must be a non-empty list")
    variants: list[Variant] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw, start=1):
        v = _parse_variant(item, f"{source}: variant {index}")
        if v.key in seen:
            raise VariantConfigError(
                f"{source}: variant {index} has the key {v.key!r} of variant {seen[v.key]}; give one of them a 'name'"
            )
        seen[v.key] = index
        variants.append(v)
    baseline = data.get("baseline", variants[0].key)
    if baseline not in seen:
        raise VariantConfigError(f"{source}: baseline {baseline!r} is not a variant key; keys: {', '.join(seen)}")
    tolerances, strict = _gate(data.get("gate"), source)
    return SweepConfig(variants=tuple(variants), baseline=baseline, source=source, tolerances=tolerances,
                       strict=strict, cron=_cron(data.get("schedule"), source))


def _gate(raw: Any, source: str) -> tuple[dict[str, float], bool]:
    from eval_pipeline.gates import DEFAULT_TOLERANCES, validate_tolerances

    if raw is None:
        return dict(DEFAULT_TOLERANCES), False
    if not isinstance(raw, dict) or set(raw) - {"tolerances", "strict"}:
        raise VariantConfigError(f"{source}: gate must be a mapping with 'tolerances' and/or 'strict'")
    strict = raw.get("strict", False)
    if not isinstance(strict, bool):
        raise VariantConfigError(f"{source}: gate.strict must be true or false, got {strict!r}")
    tolerances = raw.get("tolerances", DEFAULT_TOLERANCES)
    if not isinstance(tolerances, dict):
        raise VariantConfigError(f"{source}: gate.tolerances must map metric names to numbers")
    try:
        return validate_tolerances(tolerances), strict
    except ValueError as exc:
        raise VariantConfigError(f"{source}: gate.tolerances: {exc}") from None


def _cron(raw: Any, source: str) -> str:
    if raw is None:
        return DEFAULT_CRON
    if not isinstance(raw, dict) or set(raw) != {"cron"} or not isinstance(raw["cron"], str):
        raise VariantConfigError(f"{source}: schedule must be a mapping with one key, cron (e.g. \"0 2 * * *\")")
    if len(raw["cron"].split()) != 5:
        raise VariantConfigError(f"{source}: schedule.cron {raw['cron']!r} must have 5 fields")
    return raw["cron"]


def _parse_variant(item: Any, where: str) -> Variant:
    if isinstance(item, str):
        item = {"engine": item}
    if not isinstance(item, dict):
        raise VariantConfigError(f"{where}: expected a mapping like {{engine: hybrid}}")
    engine = item.get("engine")
    if engine not in ENGINE_NAMES:
        raise VariantConfigError(f"{where}: engine {engine!r} is not valid; valid engines: {', '.join(ENGINE_NAMES)}")
    allowed = COMMON_KNOBS | (HYBRID_KNOBS if engine == "hybrid" else set())
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise VariantConfigError(f"{where} ({engine}): unknown setting(s) {unknown}; valid: {', '.join(sorted(allowed))}")

    depth = _int(item, "depth", 20, where, lo=1, hi=1000)
    kwargs: dict[str, Any] = {
        "engine": engine,
        "depth": depth,
        "chunk_top_k": _int(item, "chunk_top_k", max(100, 5 * depth), where, lo=1, hi=100_000),
        "rerank_depth": _int(item, "rerank_depth", depth, where, lo=1, hi=1000),
        "abstain_below": _float(item, "abstain_below", None, where),
        "reranker": _reranker(item.get("reranker", "none"), where),
    }
    if engine == "hybrid":
        fusion = item.get("fusion", "rrf")
        if fusion not in FUSION_MODES:
            raise VariantConfigError(f"{where}: fusion {fusion!r} is not valid; valid: {', '.join(FUSION_MODES)}")
        legs = item.get("legs", ["keyword", "dense"])
        if not isinstance(legs, list) or len(legs) < 2 or any(l not in LEGS for l in legs) or len(set(legs)) != len(legs):
            raise VariantConfigError(f"{where}: legs {legs!r} must list two or more distinct of {', '.join(LEGS)}")
        weights = item.get("weights")
        if weights is not None:
            if (not isinstance(weights, list) or len(weights) != len(legs)
                    or not all(_finite_number(w) and w >= 0 for w in weights) or sum(weights) <= 0):
                raise VariantConfigError(
                    f"{where}: weights {weights!r} must be {len(legs)} non-negative numbers (one per leg), not all 0"
                )
            weights = tuple(float(w) for w in weights)
        if "rrf_k" in item and fusion != "rrf":
            raise VariantConfigError(f"{where}: rrf_k only applies to fusion: rrf (got fusion: {fusion})")
        kwargs.update(fusion=fusion, rrf_k=_int(item, "rrf_k", 61, where, lo=1, hi=10_000), weights=weights,
                      legs=tuple(legs))
    name = item.get("name")
    key = name if name is not None else engine + ("" if kwargs["reranker"].kind == "none" else f"+{kwargs['reranker'].kind}")
    if not isinstance(key, str) or not _KEY.match(key):
        raise VariantConfigError(
            f"{where}: name {key!r} must be 1-64 characters of lowercase letters, digits and + . _ @ -"
        )
    return Variant(key=key, **kwargs)


def _reranker(value: Any, where: str) -> RerankerSpec:
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict) or value.get("kind") not in RERANKER_KINDS:
        kind = value.get("kind") if isinstance(value, dict) else value
        raise VariantConfigError(f"{where}: reranker {kind!r} is not valid; valid rerankers: {', '.join(RERANKER_KINDS)}")
    options = {k: v for k, v in value.items() if k != "kind"}
    try:
        json.dumps(options)
    except TypeError:
        raise VariantConfigError(f"{where}: reranker options must be plain values") from None
    return RerankerSpec(kind=value["kind"], options=options)


def _finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(item: dict, name: str, default: int, where: str, *, lo: int, hi: int) -> int:
    value = item.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise VariantConfigError(f"{where}: {name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _float(item: dict, name: str, default: float | None, where: str) -> float | None:
    value = item.get(name, default)
    if value is None:
        return None
    if not _finite_number(value):
        raise VariantConfigError(f"{where}: {name} must be a finite number, got {value!r}")
    return float(value)
