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

import dataclasses
import functools
import hashlib
import importlib
import inspect
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

from eval_pipeline.common.checks import is_integer, is_real
from eval_pipeline.common.versions import code_digest_of_file

PLUGINS_ENV = "EVAL_PIPELINE_PLUGINS"

_loaded: set[str] = set()
_lock = threading.RLock()
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # eval_pipeline/
_REGISTRIES: list[Registry] = []  # every registry made, for `plugin_code_digest`


def _outside_package(path: str) -> bool:
    return not os.path.abspath(path).startswith(_PACKAGE + os.sep)


def _module_file(module_name: object) -> tuple[str, str] | None:
    """(module name, its source file) of a loaded module with a `.py` file, else None."""
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    path = getattr(module, "__file__", None)
    return (str(module_name), os.path.abspath(path)) if isinstance(path, str) and path.endswith(".py") else None


def _defining_modules(kind: Any, caller: tuple[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The modules (name, source file) that define `kind`: the module that registered it
    (`caller`) and those of the callables and classes it holds (its dataclass fields or
    attributes, the function of a partial); only those outside the package, whose code the
    package's source digest does not cover."""
    values: list[Any] = [kind]
    if dataclasses.is_dataclass(kind) and not isinstance(kind, type):
        values += [getattr(kind, f.name, None) for f in dataclasses.fields(kind)]
    else:
        values += list(getattr(kind, "__dict__", {}).values())
    found = [caller]
    for value in values:
        while isinstance(value, functools.partial):
            value = value.func
        if callable(value) or isinstance(value, type):
            module = getattr(value, "__module__", None) or getattr(type(value), "__module__", None)
            found.append(_module_file(module))
    return _with_helpers([m for m in found if m is not None and _outside_package(m[1])])


def _installed(path: str) -> bool:
    """Whether ``path`` belongs to the interpreter or an installed package (their versions are in
    the identities already), not to the user's own code."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return "site-packages" in path.split(os.sep) or any(os.path.abspath(path).startswith(
        os.path.abspath(root) + os.sep) for root in roots if root)


def _with_helpers(modules: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``modules`` and, followed through each module's globals (the modules it imports, the
    modules of the functions and classes it imports), every module of the user's own code they
    use: outside this package, the interpreter and the installed packages. A helper module a
    plugin imports changes results as its own file does. Deterministic: it follows the code, not
    which other modules this process happens to have loaded."""
    seen: dict[str, str] = {}
    todo = list(modules)
    while todo:
        name, path = todo.pop()
        if name in seen:
            continue
        seen[name] = path
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else ():
            other = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None) \
                if (inspect.isfunction(value) or inspect.isclass(value)) else None
            found = _module_file(other)
            if found is not None and found[0] not in seen and _outside_package(found[1]) \
                    and not _installed(found[1]):
                todo.append(found)
    return tuple(sorted(seen.items()))


def modules_code_digest(modules: Sequence[tuple[str, str]]) -> str:
    """A digest of the code of ``modules`` ((name, source file at any absolute path)), each
    file read as code (`eval_pipeline.common.versions.code_digest_of_file`) under its module
    name (not its path: the same plugin checked out elsewhere is the same code); '' for none."""
    if not modules:
        return ""
    digest = hashlib.sha256()
    for name, path in sorted(set(modules)):
        digest.update(name.encode() + b"\0" + code_digest_of_file(path).encode() + b"\0")
    return digest.hexdigest()[:12]


def plugin_code_digest(*whats: str) -> str:
    """A digest of the code of every kind registered from outside the package, in the
    registries named ``whats`` (their `what`: "engine", "reranker", "measure"...); '' when
    there is none, so the identities of a project without plugins are what they were. The
    plugins named by `EVAL_PIPELINE_PLUGINS` are imported first."""
    load_plugins()
    parts = [f"{r.what}={r.code_digest()}" for r in _REGISTRIES if r.what in whats and r.code_digest()]
    # the modules EVAL_PIPELINE_PLUGINS names run in every process whether or not they register
    # a kind (one may patch a built-in): their code, and their helpers', read now
    named = [m for m in (_module_file(name) for name in plugin_modules()) if m is not None]
    if named:
        parts.append(f"plugins={modules_code_digest(_with_helpers(named))}")
    if not parts:
        return ""
    return hashlib.sha256(";".join(sorted(parts)).encode()).hexdigest()[:12]


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
        # name -> (source files outside the package, the digest of their code when registered)
        self._sources: dict[str, tuple[tuple[str, ...], str]] = {}
        self._order: dict[str, tuple[int, int]] = {}  # name -> (its module's place in `modules`, then arrival)
        self._arrivals = 0
        _REGISTRIES.append(self)

    def register(self, kind: K, *, replace: bool = False) -> K:
        """Add `kind`; a second kind under a registered name is refused unless `replace`.

        A kind defined outside the package (a plugin) has its source files and a digest of
        their code recorded (`code_digest`): the identities that use the kind (the engine's,
        the results cache's, the scoring protocol, a grader's yardstick) change with its code,
        as they change with the package's own (`eval_pipeline.common.versions.source_digest`)."""
        name = kind.name
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a non-empty name, got {name!r}")
        frame = inspect.currentframe()
        caller = frame.f_back.f_globals.get("__name__") if frame is not None and frame.f_back is not None else None
        del frame
        modules = _defining_modules(kind, _module_file(caller))
        load_plugins(self._modules)  # the built-in kinds first, whoever registers first
        with _lock:
            if name in self._kinds and not replace and self._kinds[name] is not kind:
                raise ValueError(f"{self.what} {name!r} is registered already")
            self._kinds[name] = kind
            # The built-in kinds in the order of their modules, whichever module was imported
            # first (importing one imports the others from inside its first registration);
            # plugins after them, in arrival order.
            rank = self._modules.index(caller) if caller in self._modules else len(self._modules)
            self._arrivals += 1
            self._order.setdefault(name, (rank, self._arrivals))
            self._kinds = dict(sorted(self._kinds.items(), key=lambda item: self._order.get(item[0], (-1, 0))))
            if modules:
                self._sources[name] = (tuple(path for _, path in modules), modules_code_digest(modules))
            else:
                self._sources.pop(name, None)
        return kind

    def unregister(self, name: str) -> None:
        """Remove a kind (tests that register a toy undo it)."""
        with _lock:
            self._kinds.pop(name, None)
            self._sources.pop(name, None)
            self._order.pop(name, None)

    def external_sources(self, names: Sequence[str] | None = None) -> dict[str, tuple[str, ...]]:
        """name -> the source files outside the package that define it, for the kinds registered
        from plugins (of ``names``, default every one); built-in kinds are not listed."""
        return {n: files for n, (files, _) in self._sources.items() if names is None or n in names}

    def code_digest(self, names: Sequence[str] | None = None) -> str:
        """A digest of the code of the plugin kinds (of ``names``, default every one), as it
        was when each registered; '' when none is a plugin."""
        chosen = sorted((n, d) for n, (_, d) in self._sources.items() if names is None or n in names)
        if not chosen:
            return ""
        return hashlib.sha256(repr(chosen).encode()).hexdigest()[:12]

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
