"""The variants file read into a `SweepConfig` (eval_pipeline.config.models): the sweep's
variants (parsed by `eval_pipeline.ranking.variants`), its indexes (`indexes:`, parsed by
`eval_pipeline.store.indexes`), the baseline, the gate's tolerances, the question-set audit's
thresholds, the answer gate's tolerances and price table (`answers:`), the recommendation's
budgets (`recommend:`), the fusion-tuning split (`tuning:`) and the schedule, read strictly
(eval_pipeline.config.yaml_file: a duplicate YAML key is an error naming its line).

Everything here is checked when the file is read (the code location loads it), so a bad
tolerance or price fails before any model is called or any result is stored; each message
names the file, and the line of the section, the variant or the variant's setting where the
reader knows it. The typed models come last: what reaches them has been checked here."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from eval_pipeline.common.checks import is_finite, is_integer
from eval_pipeline.common.prices import check_prices
from eval_pipeline.config.models import (
    DEFAULT_CRON,
    DEFAULT_EFFECT,
    DEFAULT_TUNING,
    PAIR_SEPARATOR,
    SweepConfig,
    TuningSplit,
    pair_key,
)
from eval_pipeline.config.yaml_file import line_at, line_of, located, read_yaml
from eval_pipeline.config.yaml_file import strict_loader as _strict_loader
from eval_pipeline.gates.answers import validate_answer_tolerances
from eval_pipeline.gates.retrieval import DEFAULT_TOLERANCES, validate_tolerances
from eval_pipeline.ranking.variants import Variant, VariantConfigError, Where, parse_variant
from eval_pipeline.recommend import parse_budgets
from eval_pipeline.store.indexes import IndexSpec, parse_indexes
from eval_pipeline.validity.audit import AuditThresholds

__all__ = ["DEFAULT_TUNING", "SweepConfig", "TuningSplit", "_strict_loader", "load_sweep", "pair_key", "parse_sweep"]


def load_sweep(path: str | Path) -> SweepConfig:
    """The variants file at `path`, read and checked (a VariantConfigError naming the file)."""
    path = Path(path)
    return parse_sweep(read_yaml(path), source=str(path))


def parse_sweep(data: Any, *, source: str = "<config>") -> SweepConfig:
    if not isinstance(data, dict):
        raise VariantConfigError(f"{source}: expected a mapping with 'variants' (and optionally 'baseline')")
    settings = ("answers", "audit", "baseline", "gate", "indexes", "recommend", "schedule", "tuning", "variants")
    unknown = set(data) - set(settings)
    if unknown:
        raise VariantConfigError(
            f"{source}: unknown top-level setting(s) {sorted(unknown, key=str)}; valid: {', '.join(settings)}"
        )
    raw = data.get("variants")
    if not isinstance(raw, list) or not raw:
        raise VariantConfigError(f"{source}: 'variants' must be a non-empty list")
    variants: list[Variant] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw, start=1):
        # a message about one setting names that setting's line (ranking.variants.Where)
        v = parse_variant(item, Where(source, f": variant {index}", line_of(item), partial(line_at, item)))
        if v.key in seen:
            raise VariantConfigError(f"{located(source, item)}: variant {index} has the key {v.key!r} of variant "
                                     f"{seen[v.key]}; give one of them a 'name'")
        seen[v.key] = index
        variants.append(v)
    listed = data.get("indexes") is not None
    try:
        base_dir = Path(source).parent if source != "<config>" else None
        indexes = parse_indexes(data.get("indexes"), source, base_dir=base_dir)
        budgets = parse_budgets(data.get("recommend"), source)
    except ValueError as exc:
        raise VariantConfigError(str(exc)) from None
    baseline = _baseline(data.get("baseline", variants[0].key), seen, indexes if listed else None, source)
    tolerances, strict, effect = _gate(data.get("gate"), source)
    answer_tolerances, answer_strict, prices = _answers(data.get("answers"), source, strict)
    return SweepConfig(variants=tuple(variants), baseline=baseline, source=source, tolerances=tolerances,
                       strict=strict, cron=_cron(data.get("schedule"), source), audit=_audit(data.get("audit"), source),
                       effect=effect, answer_tolerances=answer_tolerances, answer_strict=answer_strict, prices=prices,
                       indexes=indexes, indexes_listed=listed, budgets=budgets,
                       tuning=_tuning(data.get("tuning"), [v for v in variants if v.tune or v.abstain.policy == "auto"],
                                      source))


def _tuning(raw: Any, tuned: list[Variant], source: str) -> TuningSplit | None:
    """`tuning: {fraction, seed}`, the split the tuning questions come from (default 0.3 and 0):
    fusion tuning (`tune:`) and the refusal threshold of `abstain: {policy: auto}` are both chosen
    on its tuning part, never on the scored questions. None when no variant tunes either (a
    `tuning:` section that nothing uses is an error, not silently ignored)."""

    where = located(source, raw)
    if raw is None:
        return DEFAULT_TUNING if tuned else None
    if not tuned:
        raise VariantConfigError(f"{where}: tuning is set but no variant has `tune: rrf_k` or `tune: weights` "
                                 "nor `abstain: {policy: auto}`; remove it, or tune a hybrid variant or a "
                                 "variant's refusal threshold")
    if not isinstance(raw, dict) or set(raw) - {"fraction", "seed"}:
        raise VariantConfigError(f"{where}: tuning must be a mapping with 'fraction' and/or 'seed'")
    fraction, seed = raw.get("fraction", DEFAULT_TUNING[0]), raw.get("seed", DEFAULT_TUNING[1])
    if isinstance(fraction, bool) or not is_finite(fraction) or not 0 < float(fraction) < 1:
        raise VariantConfigError(f"{where}: tuning.fraction must be a number strictly between 0 and 1, got "
                                 f"{fraction!r}")
    if not is_integer(seed) or seed < 0:
        raise VariantConfigError(f"{where}: tuning.seed must be an integer >= 0, got {seed!r}")
    return TuningSplit(float(fraction), int(seed))


def _baseline(raw: Any, variant_keys: Mapping[str, int], indexes: tuple[IndexSpec, ...] | None, source: str) -> str:
    """The baseline's partition key: a variant key; with indexes listed, a variant key (on the
    first index) or `index|variant`."""
    if not isinstance(raw, str):
        raise VariantConfigError(f"{source}: baseline must be a variant key, got {raw!r}")
    index, sep, variant = raw.rpartition(PAIR_SEPARATOR)
    if variant not in variant_keys:
        raise VariantConfigError(f"{source}: baseline {raw!r} is not a variant key; keys: {', '.join(variant_keys)}")
    if indexes is None:
        if sep:
            raise VariantConfigError(f"{source}: baseline {raw!r} names an index, but the file lists no indexes; "
                                     f"give the variant key alone ({variant!r})")
        return variant
    keys = [i.key for i in indexes]
    if sep and index not in keys:
        raise VariantConfigError(f"{source}: baseline {raw!r}: {index!r} is not an index key; keys: {', '.join(keys)}")
    return pair_key(index if sep else keys[0], variant)


def _answers(raw: Any, source: str, strict: bool) -> tuple[dict[str, float], bool, dict[str, dict[str, float]]]:
    """`answers: {gate: {max_pass_rate_drop, max_mean_score_drop, strict}, prices: {model: {prompt_per_1k,
    completion_per_1k}}}`; the answer gate's strictness defaults to the retrieval gate's."""

    where = located(source, raw)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or set(raw) - {"gate", "prices"}:
        raise VariantConfigError(f"{where}: answers must be a mapping with 'gate' and/or 'prices'")
    gate = raw.get("gate") or {}
    if not isinstance(gate, dict):
        raise VariantConfigError(f"{where}: answers.gate must be a mapping of tolerances (and 'strict')")
    gate = dict(gate)
    answer_strict = gate.pop("strict", strict)
    if not isinstance(answer_strict, bool):
        raise VariantConfigError(f"{where}: answers.gate.strict must be true or false, got {answer_strict!r}")
    try:
        tolerances = validate_answer_tolerances(gate, f"{where}: answers.gate")
        prices = check_prices(raw.get("prices") or {})
    except ValueError as exc:
        message = str(exc) if str(exc).startswith(where) else f"{where}: answers: {exc}"
        raise VariantConfigError(message) from None
    return tolerances, answer_strict, prices


def _audit(raw: Any, source: str) -> AuditThresholds:
    try:
        return AuditThresholds.from_mapping(raw, located(source, raw))
    except ValueError as exc:
        raise VariantConfigError(str(exc)) from None


def _gate(raw: Any, source: str) -> tuple[dict[str, float], bool, float]:
    if raw is None:
        return dict(DEFAULT_TOLERANCES), False, DEFAULT_EFFECT
    if not isinstance(raw, dict):
        raise VariantConfigError(f"{source}: gate must be a mapping with 'tolerances', 'strict' and/or 'effect'")
    where = located(source, raw)
    unknown = sorted(map(str, set(raw) - {"tolerances", "strict", "effect"}))
    if unknown:  # a misspelled `strict` would leave the gate lenient without a word
        raise VariantConfigError(f"{where}: gate: unknown setting(s) {unknown}; "
                                 "valid: 'tolerances', 'strict', 'effect'")
    strict = raw.get("strict", False)
    if not isinstance(strict, bool):
        raise VariantConfigError(f"{where}: gate.strict must be true or false, got {strict!r}")
    effect = raw.get("effect", DEFAULT_EFFECT)
    if isinstance(effect, bool) or not is_finite(effect) or not 0 < float(effect) <= 1:
        raise VariantConfigError(f"{where}: gate.effect must be a number in (0, 1], got {effect!r}")
    tolerances = raw.get("tolerances", DEFAULT_TOLERANCES)
    if not isinstance(tolerances, dict):
        raise VariantConfigError(f"{where}: gate.tolerances must map metric names to numbers")
    try:
        return validate_tolerances(tolerances), strict, float(effect)
    except ValueError as exc:
        at = located(source, tolerances) if line_of(tolerances) else where
        raise VariantConfigError(f"{at}: gate.tolerances: {exc}") from None


def _cron(raw: Any, source: str) -> str:
    if raw is None:
        return DEFAULT_CRON
    if not isinstance(raw, dict) or set(raw) != {"cron"} or not isinstance(raw["cron"], str):
        raise VariantConfigError(f"{source}: schedule must be a mapping with one key, cron (e.g. \"0 2 * * *\")")
    if len(raw["cron"].split()) != 5:
        raise VariantConfigError(f"{source}: schedule.cron {raw['cron']!r} must have 5 fields")
    return raw["cron"]
