"""The variants file: the sweep's variants (parsed by `eval_pipeline.ranking.variants`), its
indexes (`indexes:`, parsed by `eval_pipeline.store.indexes`), the baseline, the gate's
tolerances, the question-set audit's thresholds, the answer gate's tolerances and price table
(`answers:`), the recommendation's budgets (`recommend:`), the fusion-tuning split (`tuning:`)
and the schedule, read strictly (a duplicate YAML key is an error naming its line). It sits
with the judging because it says what is judged and how.

Everything here is checked when the file is read (the code location loads it), so a bad
tolerance or price fails before any model is called or any result is stored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from eval_pipeline.common.checks import is_finite, is_integer
from eval_pipeline.common.prices import check_prices
from eval_pipeline.gates.answers import validate_answer_tolerances
from eval_pipeline.gates.retrieval import DEFAULT_TOLERANCES, validate_tolerances
from eval_pipeline.ranking.variants import Variant, VariantConfigError, parse_variant
from eval_pipeline.recommend import Budgets, parse_budgets
from eval_pipeline.store.indexes import DEFAULT_INDEX, IndexSpec, parse_indexes
from eval_pipeline.validity.audit import AuditThresholds

# A pair's partition key: Dagster's multi-partition key, the dimensions in name order (index,
# then variant) joined by "|", which neither an index key nor a variant key can hold.
PAIR_SEPARATOR = "|"


def pair_key(index: str, variant: str) -> str:
    """`minilm-w150-o20|hybrid+mmr`: the partition key of an (index, variant) pair."""
    return f"{index}{PAIR_SEPARATOR}{variant}"

DEFAULT_CRON = "0 2 * * *"
DEFAULT_EFFECT = 0.02


@dataclass(frozen=True)
class SweepConfig:
    """The sweep. Without `indexes:` in the file there is one index (the embedder resource's,
    on `StoreConfig`'s chunking) and a partition key is a variant key, as it always was; with
    it, a partition is an (index, variant) pair and its key is `pair_key(index, variant)`.
    `baseline` is a partition key either way."""

    variants: tuple[Variant, ...]
    baseline: str
    source: str
    tolerances: Mapping[str, float] = field(default_factory=dict)
    strict: bool = False
    cron: str = DEFAULT_CRON
    audit: AuditThresholds = field(default_factory=AuditThresholds)
    effect: float = DEFAULT_EFFECT  # the change the question set should detect (report: questions needed)
    answer_tolerances: Mapping[str, float] = field(default_factory=dict)  # max_pass_rate_drop, max_mean_score_drop
    answer_strict: bool = False  # an answer run that cannot be compared fails the answer gate
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # model -> price per 1k tokens
    indexes: tuple[IndexSpec, ...] = (DEFAULT_INDEX,)
    indexes_listed: bool = False  # the file has `indexes:`: partitions are (index, variant) pairs
    budgets: Budgets = field(default_factory=Budgets)  # `recommend:`: what a recommended pair stays within
    # (fraction, seed) of the fusion-tuning split when a variant has `tune`: the questions tuned
    # on are never scored, and every variant is scored on the same held-out rest
    tuning: tuple[float, int] | None = None

    @property
    def keys(self) -> list[str]:
        """The partition keys, in the file's order (index by index when indexes are listed)."""
        if not self.indexes_listed:
            return [v.key for v in self.variants]
        return [pair_key(i.key, v.key) for i in self.indexes for v in self.variants]

    def by_key(self) -> dict[str, Variant]:
        """Variant key -> variant."""
        return {v.key: v for v in self.variants}

    def index_by_key(self) -> dict[str, IndexSpec]:
        return {i.key: i for i in self.indexes}

    def pair(self, key: str) -> tuple[IndexSpec, Variant]:
        """The index and the variant of a partition key (a KeyError naming it when it is not one)."""
        index, sep, variant = str(key).rpartition(PAIR_SEPARATOR)
        if self.indexes_listed != bool(sep):
            raise KeyError(f"{key!r} is not a partition key of {self.source} (keys look like {self.keys[0]!r})")
        spec = self.index_by_key().get(index) if sep else self.indexes[0]
        variant_ = self.by_key().get(variant)
        if spec is None or variant_ is None:
            raise KeyError(f"{key!r} is not a partition key of {self.source} (keys look like {self.keys[0]!r})")
        return spec, variant_


def load_sweep(path: str | Path) -> SweepConfig:
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_strict_loader())  # noqa: S506 - a SafeLoader
    except OSError as exc:
        raise VariantConfigError(f"{path}: cannot read variants file: {exc}") from exc
    except _DuplicateKey as exc:
        raise VariantConfigError(
            f"{path}:{exc.line}: duplicate key {exc.key!r} (first at line {exc.first_line}); "
            f"YAML would keep only the last one: remove one of them"
        ) from None
    except _TooLarge:
        raise VariantConfigError(
            f"{path}: the file expands, through YAML aliases (*name), to more than {MAX_EXPANDED_VALUES} values: "
            "refused (an alias bomb would exhaust memory); use fewer aliases"
        ) from None
    except yaml.YAMLError as exc:
        raise VariantConfigError(f"{path}: invalid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise VariantConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RecursionError:
        raise VariantConfigError(f"{path}: nested too deeply to read") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        # PyYAML's constructors raise these for a value they cannot convert: an explicitly tagged
        # scalar (!!int x, !!timestamp 2001-13-45) or an integer over Python's 4,300 digits
        raise VariantConfigError(f"{path}: a value YAML cannot read ({type(exc).__name__}: {str(exc)[:200]})") from None
    return parse_sweep(data, source=str(path))


class _Mapping(dict):
    """A YAML mapping that remembers the line it starts on (for messages)."""

    line: int | None = None


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int):
        super().__init__(f"duplicate key {key!r} at line {line} (first at line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


class _TooLarge(Exception):
    """The document expands, through aliases, to more values than a variants file can hold."""


# No real variants file comes near this; an alias bomb (9 anchors of 9 aliases each: 9^9 values)
# passes it in its first levels and would otherwise hang whatever walks or prints the value.
MAX_EXPANDED_VALUES = 100_000

_LOADER = None


def _expanded_values(root: Any) -> int:
    """How many values the composed document holds once every alias is expanded (capped just
    above the limit); each node is counted once however many aliases point to it, so this
    is linear in the file."""

    memo: dict[int, int] = {}

    def size(node: Any) -> int:
        if id(node) in memo:
            return memo[id(node)]
        memo[id(node)] = 1  # a recursive alias counts once
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(key) + size(value) for key, value in node.value)
        else:
            total = 1
        memo[id(node)] = min(total, MAX_EXPANDED_VALUES + 1)
        return memo[id(node)]

    return size(root) if root is not None else 0


def _strict_loader():
    """A yaml.SafeLoader that refuses a key given twice in one mapping (merge keys, `<<`, may
    still be overridden, as YAML intends), records each mapping's line, and refuses a document
    that expands through aliases beyond `MAX_EXPANDED_VALUES` before anything is constructed."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER

    class StrictSafeLoader(yaml.SafeLoader):
        def compose_document(self):
            node = super().compose_document()
            if _expanded_values(node) > MAX_EXPANDED_VALUES:
                raise _TooLarge()
            return node

    def construct_map(loader, node):
        data = _Mapping()
        data.line = node.start_mark.line + 1
        yield data
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: construct_mapping reports it
                continue
            if first is not None:
                raise _DuplicateKey(key, key_node.start_mark.line + 1, first)
            seen[key] = key_node.start_mark.line + 1
        data.update(loader.construct_mapping(node))

    StrictSafeLoader.add_constructor("tag:yaml.org,2002:map", construct_map)
    _LOADER = StrictSafeLoader
    return _LOADER


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
        line = getattr(item, "line", None)
        v = parse_variant(item, f"{source}:{line}: variant {index}" if line else f"{source}: variant {index}")
        if v.key in seen:
            raise VariantConfigError(
                f"{source}: variant {index} has the key {v.key!r} of variant {seen[v.key]}; give one of them a 'name'"
            )
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
                       tuning=_tuning(data.get("tuning"), [v for v in variants if v.tune], source))


DEFAULT_TUNING = (0.3, 0)


def _tuning(raw: Any, tuned: list[Variant], source: str) -> tuple[float, int] | None:
    """`tuning: {fraction, seed}`, the split of fusion tuning (default 0.3 and 0); None when no
    variant tunes (a `tuning:` section that nothing uses is an error, not silently ignored)."""

    where = f"{source}:{raw.line}" if getattr(raw, "line", None) else source
    if raw is None:
        return DEFAULT_TUNING if tuned else None
    if not tuned:
        raise VariantConfigError(f"{where}: tuning is set but no variant has `tune: rrf_k` or `tune: weights`; "
                                 "remove it, or tune a hybrid variant")
    if not isinstance(raw, dict) or set(raw) - {"fraction", "seed"}:
        raise VariantConfigError(f"{where}: tuning must be a mapping with 'fraction' and/or 'seed'")
    fraction, seed = raw.get("fraction", DEFAULT_TUNING[0]), raw.get("seed", DEFAULT_TUNING[1])
    if isinstance(fraction, bool) or not is_finite(fraction) or not 0 < float(fraction) < 1:
        raise VariantConfigError(f"{where}: tuning.fraction must be a number strictly between 0 and 1, got "
                                 f"{fraction!r}")
    if not is_integer(seed) or seed < 0:
        raise VariantConfigError(f"{where}: tuning.seed must be an integer >= 0, got {seed!r}")
    return float(fraction), int(seed)


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

    where = f"{source}:{raw.line}" if getattr(raw, "line", None) else source
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
    line = getattr(raw, "line", None)
    try:
        return AuditThresholds.from_mapping(raw, f"{source}:{line}" if line else source)
    except ValueError as exc:
        raise VariantConfigError(str(exc)) from None


def _gate(raw: Any, source: str) -> tuple[dict[str, float], bool, float]:
    if raw is None:
        return dict(DEFAULT_TOLERANCES), False, DEFAULT_EFFECT
    if not isinstance(raw, dict) or set(raw) - {"tolerances", "strict", "effect"}:
        raise VariantConfigError(f"{source}: gate must be a mapping with 'tolerances', 'strict' and/or 'effect'")
    strict = raw.get("strict", False)
    if not isinstance(strict, bool):
        raise VariantConfigError(f"{source}: gate.strict must be true or false, got {strict!r}")
    effect = raw.get("effect", DEFAULT_EFFECT)
    if isinstance(effect, bool) or not is_finite(effect) or not 0 < float(effect) <= 1:
        raise VariantConfigError(f"{source}: gate.effect must be a number in (0, 1], got {effect!r}")
    tolerances = raw.get("tolerances", DEFAULT_TOLERANCES)
    if not isinstance(tolerances, dict):
        raise VariantConfigError(f"{source}: gate.tolerances must map metric names to numbers")
    try:
        return validate_tolerances(tolerances), strict, float(effect)
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
