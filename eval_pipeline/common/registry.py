"""One registry per extension point (issue #24): engines and legs, rerankers, graders, report
sections each have one `Registry`, and each kind in it declares its name, its options, what it
needs and how it is built. Adding a kind is one new file that defines it and calls
``REGISTRY.register(...)``, plus one line that gets the file imported:

- a kind inside the package: its module in the registry's `modules` (imported the first time
  the registry is read, so nothing heavy is imported before it is used);
- a kind outside the package (a team's own engine, the toys of tests/toys/): its module in
  the environment variable ``EVAL_PIPELINE_PLUGINS`` (comma-separated module names), imported
  before any registry is read, in every process that reads one (the code server, each step
  process, each worker), so a variants file may name it.

``EVAL_PIPELINE_PLUGINS`` is also the hook for kinds whose registry lives elsewhere (a metric
for the measure registry, eval_pipeline.metrics.retrieval): `load_plugins` imports the module,
and the module registers itself where it belongs.

Options are checked when the variants file is loaded: `Option.check` returns the value or
raises ValueError with a message that names the setting, what it got and what is valid; the
loader puts the file, line and variant in front (`path:line: variant N: ...`).
"""

from __future__ import annotations

import importlib
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

from eval_pipeline.common.checks import is_integer, is_real

PLUGINS_ENV = "EVAL_PIPELINE_PLUGINS"

_loaded: set[str] = set()
_lock = threading.RLock()


def plugin_modules() -> tuple[str, ...]:
    """The modules `EVAL_PIPELINE_PLUGINS` names, in order."""
    return tuple(m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip())


def load_plugins(modules: Sequence[str] | None = None) -> None:
    """Import every module of `modules` (default: `plugin_modules()`) not imported yet by this
    function; each registers its kinds. An import error names the variable and the module."""
    with _lock:
        for name in plugin_modules() if modules is None else modules:
            if name in _loaded:
                continue
            _loaded.add(name)  # before the import: a module that reads a registry does not re-enter
            try:
                importlib.import_module(name)
            except ImportError as exc:
                _loaded.discard(name)
                raise ImportError(f"{PLUGINS_ENV}: cannot import {name!r}: {exc}") from exc


class Named(Protocol):
    @property
    def name(self) -> str: ...


K = TypeVar("K", bound=Named)


class Registry(Generic[K]):
    """The kinds of one extension point, by name, in registration order.

    Reading it (`names`, `in`, `[name]`, iteration) first imports its built-in `modules` and the
    plugins. It behaves like the tuple of its names for `in`, `len`, iteration and `", ".join`,
    so the lists of valid names other modules hold (``GRADERS``...) are live views of it."""

    def __init__(self, what: str, plural: str | None = None, *, modules: Sequence[str] = ()):
        self.what, self.plural = what, plural or f"{what}s"
        self._modules = tuple(modules)
        self._kinds: dict[str, K] = {}

    def register(self, kind: K, *, replace: bool = False) -> K:
        """Add `kind`; a second kind under a registered name is refused unless `replace`."""
        name = kind.name
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a non-empty name, got {name!r}")
        load_plugins(self._modules)  # the built-in kinds first, whoever registers first
        with _lock:
            if name in self._kinds and not replace and self._kinds[name] is not kind:
                raise ValueError(f"{self.what} {name!r} is registered already")
            self._kinds[name] = kind
        return kind

    def unregister(self, name: str) -> None:
        """Remove a kind (tests that register a toy undo it)."""
        with _lock:
            self._kinds.pop(name, None)

    def _ready(self) -> dict[str, K]:
        load_plugins(self._modules)
        load_plugins()
        return self._kinds

    def names(self) -> tuple[str, ...]:
        return tuple(self._ready())

    def kinds(self) -> tuple[K, ...]:
        return tuple(self._ready().values())

    def get(self, name: Any) -> K | None:
        return self._ready().get(name) if isinstance(name, str) else None

    def __getitem__(self, name: str) -> K:
        kind = self.get(name)
        if kind is None:
            raise ValueError(self.unknown(name))
        return kind

    def unknown(self, name: Any) -> str:
        """The message for a name that is not registered, listing the valid ones."""
        return f"{self.what} {name!r} is not valid; valid {self.plural}: {', '.join(self.names())}"

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._ready()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._ready())

    def __repr__(self) -> str:
        return f"Registry({self.what}: {', '.join(self.names())})"


class Names(Sequence[str]):
    """A live tuple of names: a registry's, or those of its kinds `where` holds for (the graders
    that spend tokens...), or another name of each (`key`: a leg's). Compares equal to the tuple
    of its names."""

    def __init__(self, registry: Registry, where: Callable[[Any], bool] | None = None,
                 key: Callable[[Any], str] | None = None):
        self._registry, self._where, self._key = registry, where, key

    def _names(self) -> tuple[str, ...]:
        if self._where is None and self._key is None:
            return self._registry.names()
        key = self._key or (lambda k: k.name)
        return tuple(key(k) for k in self._registry.kinds() if self._where is None or self._where(k))

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, list, Names)):
            return tuple(self) == tuple(other)
        if isinstance(other, (set, frozenset)):
            return set(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


# --- options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option of a kind, as a variants file gives it: what it must be (`expected`, for the
    message) and its check (`test(value)` true when valid; `convert` the value kept)."""

    name: str
    expected: str
    test: Callable[[Any], bool] = field(default=lambda value: True, compare=False)
    convert: Callable[[Any], Any] = field(default=lambda value: value, compare=False)
    description: str = ""

    def check(self, value: Any) -> Any:
        """The value as kept, or ValueError: `{name} must be {expected}, got {value!r}`."""
        if not self.test(value):
            raise ValueError(f"{self.name} must be {self.expected}, got {value!r}")
        return self.convert(value)


def choice(name: str, choices: Sequence[str] | Callable[[], Sequence[str]], description: str = "") -> Option:
    """One of fixed strings; the message lists them (`{name} 'x' is not valid; valid: a, b`)."""
    listed = choices if callable(choices) else (lambda: tuple(choices))
    return _Choice(name, "one of the listed values", test=lambda v: v in listed(), description=description,
                   listed=listed)


@dataclass(frozen=True)
class _Choice(Option):
    listed: Callable[[], Sequence[str]] = field(default=tuple, compare=False)

    def check(self, value: Any) -> Any:
        valid = tuple(self.listed())
        if value not in valid:
            raise ValueError(f"{self.name} {value!r} is not valid; valid: {', '.join(valid)}")
        return value


def integer(name: str, lo: int, hi: int, description: str = "") -> Option:
    return Option(name, f"an integer in [{lo}, {hi}]", test=lambda v: is_integer(v) and lo <= v <= hi,
                  description=description)


def number(name: str, lo: float = -math.inf, hi: float = math.inf, description: str = "") -> Option:
    def ok(v: Any) -> bool:
        return is_real(v) and math.isfinite(v) and lo <= v <= hi

    bounds = "" if (lo, hi) == (-math.inf, math.inf) else f" in [{lo:g}, {hi:g}]"
    return Option(name, f"a finite number{bounds}", test=ok, convert=float, description=description)


def boolean(name: str, description: str = "") -> Option:
    return Option(name, "true or false", test=lambda v: isinstance(v, bool), description=description)


def string(name: str, *, non_empty: bool = False, description: str = "") -> Option:
    if non_empty:
        return Option(name, "a non-empty string (a model name or local path)",
                      test=lambda v: isinstance(v, str) and bool(v.strip()), description=description)
    return Option(name, "a string", test=lambda v: isinstance(v, str), description=description)


def check_options(options: Mapping[str, Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """The given options checked one by one (ValueError from the first bad one); unknown names
    are the caller's to refuse (its message knows the kind)."""
    return {name: options[name].check(value) for name, value in given.items() if name in options}
