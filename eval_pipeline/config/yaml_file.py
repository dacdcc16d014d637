"""The variants file's YAML, read strictly: a key given twice in one mapping is an error naming
both lines (YAML would silently keep the last), each mapping remembers its line and the line of
each of its keys (for the messages of eval_pipeline.config.sweep: `line_of`, `line_at`), and a
document that expands through aliases beyond `MAX_EXPANDED_VALUES` is refused before anything is
constructed. Every failure to read is a `VariantConfigError` naming the file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from eval_pipeline.ranking.variants import VariantConfigError

# No real variants file comes near this; an alias bomb (9 anchors of 9 aliases each: 9^9 values)
# passes it in its first levels and would otherwise hang whatever walks or prints the value.
MAX_EXPANDED_VALUES = 100_000


def read_yaml(path: Path) -> Any:
    """The file's one YAML document, its mappings carrying their line (`line_of`) and their
    settings' lines (`line_at`)."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=strict_loader())  # noqa: S506 - a SafeLoader
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


def line_of(value: Any) -> int | None:
    """The line a mapping read by `strict_loader` starts on (None for anything else)."""
    return getattr(value, "line", None)


def line_at(value: Any, path: Sequence[Any]) -> int | None:
    """The line of the setting at `path` (its keys, outermost first: `("reranker", "model")`) in a
    mapping read by `strict_loader`: the line of its key, or, for a key the mapping takes through
    a merge (`<<: *base`), the line of that `<<`. None when it is not known: not a mapping read
    from a file, a key it does not have, or a path that goes on into a mapping written elsewhere
    (an alias, `reranker: *shared`, or a merge), whose lines belong to another part of the file."""
    line, outer = None, None
    for key in path:
        if not isinstance(value, _Mapping) or not _written_in(value, outer):
            return None
        try:
            line = value.key_lines.get(key)
        except TypeError:  # an unhashable key
            return None
        if line is None:
            return None
        outer, value = value, value.get(key)
    return line


def located(source: str, value: Any) -> str:
    """`source:line` of a mapping read by `strict_loader` (where a message about it points), or
    `source` alone when its line is not known."""
    line = line_of(value)
    return f"{source}:{line}" if line else source


class _Mapping(dict):
    """A YAML mapping that remembers the line it starts on, the line of each of its keys (a merged
    key: the line of its `<<`) and the characters it spans in the file (for messages)."""

    line: int | None = None
    key_lines: dict[Any, int]
    span: tuple[int, int] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.key_lines = {}


def _written_in(inner: _Mapping, outer: _Mapping | None) -> bool:
    """Whether `inner` is written inside `outer` (not an alias of a mapping written elsewhere)."""
    if outer is None:
        return True
    if inner.span is None or outer.span is None:
        return False
    return outer.span[0] <= inner.span[0] and inner.span[1] <= outer.span[1]


def _merged_lines(loader: Any, node: yaml.MappingNode, merges: list[tuple[int, Any]]) -> dict[Any, int]:
    """The line of the `<<` through which each merged key of `node` comes, read once
    `construct_mapping` has flattened `node` (its merged pairs first, in the order in which a
    later one wins, as it wins the value)."""
    through: dict[int, int] = {}
    for line, value in merges:
        for source in value.value if isinstance(value, yaml.SequenceNode) else [value]:
            if isinstance(source, yaml.MappingNode):
                through.update((id(key_node), line) for key_node, _ in source.value)
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        if id(key_node) in through:
            try:
                lines[loader.construct_object(key_node, deep=True)] = through[id(key_node)]
            except TypeError:  # an unhashable key: construct_mapping has reported it
                continue
    return lines


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int):
        super().__init__(f"duplicate key {key!r} at line {line} (first at line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


class _TooLarge(Exception):
    """The document expands, through aliases, to more values than a variants file can hold."""


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


def strict_loader():
    """A yaml.SafeLoader that refuses a key given twice in one mapping (merge keys, `<<`, may
    still be overridden, as YAML intends), records each mapping's line and its keys' lines, and
    refuses a document that expands through aliases beyond `MAX_EXPANDED_VALUES` before anything
    is constructed."""
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
        data.span = (node.start_mark.index, node.end_mark.index)
        yield data
        seen: dict[Any, int] = {}
        merges: list[tuple[int, Any]] = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                merges.append((key_node.start_mark.line + 1, value_node))
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
        data.key_lines = {**_merged_lines(loader, node, merges), **seen} if merges else seen

    StrictSafeLoader.add_constructor("tag:yaml.org,2002:map", construct_map)
    _LOADER = StrictSafeLoader
    return _LOADER
