"""Graders of generated answers that spend no tokens: ``deterministic`` and ``static``.

One pure function per assertion type, plus one grader per kind. No function mutates its
inputs, and **no code in an answer is ever run**: python blocks are only handed to
:func:`ast.parse`, and imports are judged by their names (nothing is imported, looked up with
``importlib`` or executed).

Assertion specs are plain mappings (what the golden prompt file holds)::

    {"type": "exact", "value": str}
    {"type": "contains", "value": str, "case_sensitive": bool}      # default False
    {"type": "regex", "pattern": str, "flags": ["i", "m", "s"]}     # flags optional
    {"type": "json_schema", "schema": {...}}

Rules
-----
The answer, before every deterministic check
    Normalised to Unicode NFC once (so a composed ``é`` U+00E9 and a decomposed ``e`` +
    U+0301 are the same text; NFC, not NFKC: ligatures and full-width forms are *not*
    folded), then stripped of surrounding whitespace (``str.strip``: Unicode whitespace,
    NBSP included; a zero-width space is not whitespace). An empty answer is graded like
    any other (every assertion is evaluated on ``""``), never an exception. ``answer`` must
    be a ``str`` (``TypeError`` otherwise).

``exact``
    The trimmed answer equals ``value`` NFC-normalised and trimmed; no case folding. A
    blank ``value`` is allowed and asserts an empty answer.

``contains``
    ``value`` (NFC, *not* trimmed: ``" no "`` keeps its spaces) is a substring of the
    answer. Case-insensitive by default: both sides are ``casefold``-ed (``"STRASSE"``
    contains ``"straße"``) and re-normalised to NFC. An empty ``value`` always holds, so it
    is rejected (``ValueError``), here as in the golden file loader.

``regex``
    ``re.search(pattern, answer, flags)``. ``flags`` are ``"i"`` (IGNORECASE), ``"m"``
    (MULTILINE), ``"s"`` (DOTALL). The pattern is used as written (not NFC-normalised:
    write literals in NFC). Patterns come from the golden file and are trusted: there is no
    guard against catastrophic backtracking.

``json_schema``
    The JSON document is the whole trimmed answer if it parses; otherwise the body of the
    first fence tagged ``json`` (case-insensitive), or, when there is no such fence, the
    first untagged fence. No other heuristics: JSON inside prose without a fence does not
    count. ``NaN``/``Infinity`` are rejected (not JSON); duplicate keys keep the last value
    (Python's ``json``). Then a structural check, not a JSON Schema validator:

    * ``type``: a name or a non-empty list of names from ``object``, ``array``, ``string``,
      ``number``, ``integer``, ``boolean``, ``null``. ``integer`` is a JSON number written
      without a fraction or exponent (``3``; ``3.0`` and ``1e2`` are numbers, not integers,
      unlike JSON Schema draft 6+); ``number`` accepts integers and floats; a boolean is
      never a number or an integer.
    * ``required`` (list of key names) applies to objects: each key must be present (a
      ``null`` value is present). ``properties`` (name -> schema) applies to objects,
      recursively, to the keys that are present. ``items`` (one schema) applies to every
      element of an array, recursively. Keywords that do not apply to the value's kind are
      ignored (``type`` catches the mismatch). Extra keys are allowed.
    * The annotation keywords ``title``, ``description``, ``$comment`` and ``$schema`` are
      ignored; any other keyword, an unknown type name or a malformed keyword raises
      ``ValueError`` naming where it is (the whole schema is checked before the answer, so
      a bad schema fails whatever the answer). A schema nested deeper than ``MAX_SCHEMA_DEPTH``
      (32) levels is malformed; an answer nested too deeply to read or check fails with a reason.

    :func:`json_schema_problems` says why an answer fails, one line per problem, at a path
    such as ``$.approver`` or ``$.steps[1].id`` (keys that are not identifiers are quoted:
    ``$["first name"]``).

Scoring a prompt (:func:`grade_deterministic`)
    ``passed`` is True when every assertion holds and ``score`` is the fraction that hold.
    A prompt with no assertions (reference answer only) is *not gradable deterministically*:
    ``passed`` and ``score`` are ``None``. An unknown assertion type, a missing or unknown
    field, or a field of the wrong type raises ``ValueError`` naming it (the loader refuses
    these earlier; the grader refuses them too, so a typo such as ``case_sensitve`` cannot
    silently change a check).

Code blocks (shared by ``json_schema`` and ``static``)
    A fence is a line of three or more backticks or tildes, then an info string whose first
    word (lower-cased) is the block's tag; it closes at a line of the same character, at
    least as long, with nothing else on it. Unlike CommonMark, fences indented by any amount
    are recognised (answers nest them in list items); the opening fence's indentation is
    removed from the block's lines. A backtick fence whose info string holds a backtick is
    inline code, not a fence. An unclosed fence runs to the end of the answer (CommonMark).
    The *prose* is every line outside a fence (fence lines included in the fence).

``static`` (:func:`grade_static`), for answers with code
    * Python blocks (:func:`python_blocks`) are fences tagged ``python``, ``py`` or
      ``python3`` (case-insensitive). Untagged fences and other tags (``pycon``, ``bash``)
      are skipped, and so is a python block that is a ``>>>`` session (its first non-empty
      line starts with ``>>>``).
    * One ``parses`` check per python block: :func:`ast.parse` with the running
      interpreter's grammar; a failure reports the line in the block and in the answer.
    * One ``import`` check per distinct imported module (first occurrence; ``import a.b``,
      ``from a.b import c``, nested in functions or ``try`` blocks alike) of the blocks that
      parse: it holds when the module or one of its parent packages is in
      ``allowed_imports`` (component-wise: ``torch`` allows ``torch.nn`` but not
      ``torchvision``) or its root is in the standard library (``sys.stdlib_module_names``
      of the running interpreter). ``allowed_imports=None`` lifts the restriction (every
      absolute import holds; the golden file's ``StaticOptions`` uses None for "any"); the
      default ``()`` allows the standard library only. Relative imports (``from . import x``)
      never hold, whatever is allowed.
      Dynamic imports (``importlib.import_module``, ``__import__``) are not seen. Whether a
      package is installed is not checked.
    * One ``symbol`` check per declared symbol: it appears in the prose, case-sensitively,
      not flanked by a letter, digit or underscore. A dotted symbol also counts when a
      dotted suffix of two or more parts appears (``nn.Linear`` for ``torch.nn.Linear``);
      the last part alone (``Linear``) does not: a bare class name is too easily a common
      word. Inline code in the prose counts (backticks are not word characters).
    * ``score`` is the fraction of checks that hold and ``passed`` is True when all hold.
      An answer with no python block and no declared symbols has no checks: *not
      applicable*, ``passed`` and ``score`` are ``None``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from eval_pipeline.common.patterns import bounded_search, compile_pattern
from eval_pipeline.questions.golden import MAX_SCHEMA_DEPTH

__all__ = [
    "ASSERTION_TYPES",
    "JSON_TYPES",
    "PYTHON_TAGS",
    "AssertionResult",
    "DeterministicGrade",
    "StaticCheck",
    "StaticGrade",
    "check_contains",
    "check_exact",
    "check_json_schema",
    "check_regex",
    "grade_deterministic",
    "grade_static",
    "json_schema_problems",
    "python_blocks",
]

ASSERTION_TYPES = ("exact", "contains", "regex", "json_schema")
# The graders' rule versions, part of their yardsticks (`deterministic:v1`): bump one when a
# rule above changes, so runs graded under the old rules are never compared with new ones.
DETERMINISTIC_VERSION = 1
STATIC_VERSION = 2  # 2: a prompt with static options whose answer has no code fails (it was not applicable)
JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
PYTHON_TAGS = frozenset({"python", "py", "python3"})

_SCHEMA_KEYWORDS = frozenset({"type", "required", "properties", "items"})
_SCHEMA_ANNOTATIONS = frozenset({"title", "description", "$comment", "$schema"})
_SPEC_FIELDS = {
    "exact": ({"value"}, set()),
    "contains": ({"value"}, {"case_sensitive"}),
    "regex": ({"pattern"}, {"flags"}),
    "json_schema": ({"schema"}, set()),
}
_MAX_REASON_PROBLEMS = 5


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------


class AssertionResult(NamedTuple):
    """One assertion of a prompt: its type, whether it held, and why not ("" when it held)."""

    type: str
    held: bool
    reason: str


@dataclass(frozen=True)
class DeterministicGrade:
    """``passed``: every assertion held; ``score``: the fraction that held. Both ``None`` when
    the prompt has no assertions (not gradable deterministically)."""

    passed: bool | None
    score: float | None
    results: tuple[AssertionResult, ...]


class StaticCheck(NamedTuple):
    """One static check: ``kind`` is ``parses``, ``import`` or ``symbol``; ``subject`` the
    block (``block 1``), module (``requests``, ``.utils``) or symbol; ``reason`` "" when held."""

    kind: str
    subject: str
    held: bool
    reason: str


@dataclass(frozen=True)
class StaticGrade:
    """``passed``: every check held; ``score``: the fraction that held. Both ``None`` when the
    answer has no python block and no symbols were declared (not applicable)."""

    passed: bool | None
    score: float | None
    checks: tuple[StaticCheck, ...]


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _check_answer(answer: object) -> str:
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str, got {type(answer).__name__}")
    return answer


def _prepared(answer: object) -> str:
    """The answer as every deterministic check sees it: NFC, trimmed."""
    return _nfc(_check_answer(answer)).strip()


def _fold(text: str) -> str:
    return _nfc(_nfc(text).casefold())


def _preview(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _string_list(values: object, name: str) -> list[str]:
    """A list of the strings in ``values``; a bare str is a TypeError (it would be read as a
    list of characters), a non-string element a ValueError naming ``name``."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, not a single string: {values!r}")
    if isinstance(values, Mapping) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of strings, got {type(values).__name__}")
    out = list(values)
    for item in out:
        if not isinstance(item, str):
            raise ValueError(f"{name} must hold strings, got {item!r}")
    return out


# --------------------------------------------------------------------------
# fences
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fence:
    tag: str  # first word of the info string, lower-cased; "" when untagged
    body: str
    first_line: int  # 1-based answer line of the block's first body line


_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def _dedent(line: str, width: int) -> str:
    removed = 0
    while removed < width and removed < len(line) and line[removed] in " \t":
        removed += 1
    return line[removed:]


def _split_fences(answer: str) -> tuple[list[_Fence], str]:
    """The answer's fenced blocks in order, and its prose (the lines outside every fence)."""
    lines = answer.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start another
    fences: list[_Fence] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opening = _FENCE_OPEN.match(lines[i])
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            prose.append(lines[i])
            i += 1
            continue
        char, length, indent = opening["fence"][0], len(opening["fence"]), len(opening["indent"])
        closing = re.compile(rf"^[ \t]*{re.escape(char)}{{{length},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and closing.match(lines[j]) is None:
            body.append(_dedent(lines[j], indent))
            j += 1
        words = opening["info"].split()
        fences.append(_Fence(words[0].lower() if words else "", "\n".join(body), i + 2))
        i = j + 1  # past the closing fence (or the end, for an unclosed fence)
    return fences, "\n".join(prose)


def _is_session(body: str) -> bool:
    for line in body.split("\n"):
        if line.strip():
            return line.lstrip().startswith(">>>")
    return False


def _python_fences(fences: Sequence[_Fence]) -> list[_Fence]:
    return [f for f in fences if f.tag in PYTHON_TAGS and not _is_session(f.body)]


def python_blocks(answer: str) -> list[str]:
    """The bodies of the answer's python blocks, in order: fences tagged ``python``, ``py``
    or ``python3`` (case-insensitive) that are not ``>>>`` sessions. Untagged fences are
    skipped."""
    fences, _ = _split_fences(_nfc(_check_answer(answer)))
    return [f.body for f in _python_fences(fences)]


# --------------------------------------------------------------------------
# exact, contains, regex
# --------------------------------------------------------------------------


def _check_value(value: object, name: str = "value") -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, got {value!r}")
    return value


def check_exact(answer: str, value: str) -> bool:
    """The trimmed answer equals the trimmed ``value`` (both NFC; no case folding)."""
    value = _check_value(value)
    return _prepared(answer) == _nfc(value).strip()


def check_contains(answer: str, value: str, *, case_sensitive: bool = False) -> bool:
    """``value`` is a substring of the answer; both casefolded unless ``case_sensitive``."""
    value = _check_value(value)
    if value == "":
        raise ValueError("value must not be empty: a contains assertion with value '' always holds")
    if not isinstance(case_sensitive, bool):
        raise ValueError(f"case_sensitive must be a bool, got {case_sensitive!r}")
    text = _prepared(answer)
    if case_sensitive:
        return _nfc(value) in text
    return _fold(value) in _fold(text)


def check_regex(answer: str, pattern: str, flags: Sequence[str] = ()) -> bool:
    """A bounded search of ``pattern`` in the trimmed NFC answer; ``flags`` from ``i``, ``m``, ``s``.
    A pattern that runs over its time bound raises `PatternTimeout` (a golden set refuses such
    patterns at load; one given here directly is stopped, never left to hang)."""
    pattern = _check_value(pattern, "pattern")
    return bounded_search(compile_pattern(pattern, _string_list(flags, "flags")), _prepared(answer))


# --------------------------------------------------------------------------
# json_schema
# --------------------------------------------------------------------------


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _type_names(schema: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    if "type" not in schema:
        return None
    declared = schema["type"]
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError(f"schema at {where}: type must be a type name or a non-empty list of them, got {declared!r}")
    for name in names:
        if name not in JSON_TYPES:
            raise ValueError(f"schema at {where}: unknown type {name!r} (known: {', '.join(JSON_TYPES)})")
    return tuple(names)


def _check_schema(schema: object, where: str = "$", depth: int = 1) -> None:
    """Raise ValueError naming the place of the first malformed part of ``schema``, or of the
    first part nested deeper than MAX_SCHEMA_DEPTH levels (the golden file loader's limit)."""
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError(f"schema at {where}: nested deeper than {MAX_SCHEMA_DEPTH} levels")
    if not isinstance(schema, Mapping):
        raise ValueError(f"schema at {where} must be a mapping, got {schema!r}")
    for keyword in schema:
        if keyword not in _SCHEMA_KEYWORDS and keyword not in _SCHEMA_ANNOTATIONS:
            raise ValueError(
                f"schema at {where}: unsupported keyword {keyword!r} "
                f"(supported: {', '.join(sorted(_SCHEMA_KEYWORDS))})"
            )
    _type_names(schema, where)
    if "required" in schema:
        required = schema["required"]
        if not isinstance(required, (list, tuple)) or not all(isinstance(k, str) for k in required):
            raise ValueError(f"schema at {where}: required must be a list of key names, got {required!r}")
    if "properties" in schema:
        properties = schema["properties"]
        if not isinstance(properties, Mapping):
            raise ValueError(f"schema at {where}: properties must be a mapping of key -> schema")
        for key, sub in properties.items():
            if not isinstance(key, str):
                raise ValueError(f"schema at {where}: property names must be strings, got {key!r}")
            _check_schema(sub, _child(where, key), depth + 1)
    if "items" in schema:
        _check_schema(schema["items"], f"{where}[*]", depth + 1)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _is_type(value: object, name: str) -> bool:
    actual = _json_type(value)
    return actual == name or (name == "number" and actual == "integer")


def _shown(value: object) -> str:
    if isinstance(value, (dict, list)):
        return ""
    return f" ({json.dumps(value, ensure_ascii=False)[:40]})"


def _validate(value: object, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    names = _type_names(schema, path)
    if names is not None and not any(_is_type(value, name) for name in names):
        expected = " or ".join(names)
        problems.append(f"{path}: expected {expected}, got {_json_type(value)}{_shown(value)}")
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                problems.append(f"{_child(path, key)}: required key is missing")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _validate(value[key], sub, _child(path, key), problems)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _validate(item, schema["items"], f"{path}[{index}]", problems)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _loads(text: str) -> object:
    return json.loads(text, parse_constant=_reject_constant)


def _answer_json(text: str) -> tuple[bool, object, str]:
    """(found, document, problem): the whole trimmed answer, else the first json (or untagged)
    fence. ``text`` is the NFC answer, untrimmed (so fence line numbers are the answer's)."""
    try:
        return True, _loads(text.strip()), ""
    except RecursionError:
        return False, None, "$: the answer's JSON is too deeply nested to read"
    except ValueError:
        pass
    fences, _ = _split_fences(text)
    chosen = next((f for f in fences if f.tag == "json"), None)
    if chosen is None:
        chosen = next((f for f in fences if f.tag == ""), None)
    if chosen is None:
        return False, None, "$: the answer is not JSON and has no ```json or untagged fence"
    label = "```json" if chosen.tag == "json" else "untagged"
    try:
        return True, _loads(chosen.body), ""
    except RecursionError:
        return False, None, f"$: the {label} block at line {chosen.first_line - 1} is too deeply nested to read"
    except ValueError as exc:
        return False, None, f"$: the {label} block at line {chosen.first_line - 1} is not valid JSON: {exc}"


def json_schema_problems(answer: str, schema: Mapping[str, Any]) -> list[str]:
    """Why the answer fails ``schema``, one human-readable line per problem (``$.approver:
    required key is missing``); an empty list when it passes. See the module docstring for
    where the JSON is taken from and what is checked."""
    _check_schema(schema)
    found, document, problem = _answer_json(_nfc(_check_answer(answer)))
    if not found:
        return [problem]
    problems: list[str] = []
    try:
        _validate(document, schema, "$", problems)  # as deep as the schema, at most MAX_SCHEMA_DEPTH
    except RecursionError:  # a caller's stack already deep: a failed check, never a crash
        return ["$: the answer's JSON is too deeply nested to check"]
    return problems


def check_json_schema(answer: str, schema: Mapping[str, Any]) -> bool:
    """The answer's JSON matches ``schema`` structurally (see :func:`json_schema_problems`)."""
    return not json_schema_problems(answer, schema)


# --------------------------------------------------------------------------
# grading a prompt
# --------------------------------------------------------------------------


def _assertion_list(assertions: object) -> list[Mapping[str, Any]]:
    if isinstance(assertions, (str, bytes, Mapping)) or not isinstance(assertions, Iterable):
        raise TypeError(f"assertions must be a sequence of assertion mappings, got {type(assertions).__name__}")
    out = list(assertions)
    for index, spec in enumerate(out):
        if not isinstance(spec, Mapping):
            raise ValueError(f"assertions[{index}] must be a mapping, got {spec!r}")
        kind = spec.get("type")
        if not isinstance(kind, str) or kind not in _SPEC_FIELDS:
            raise ValueError(
                f"assertions[{index}]: unknown assertion type {kind!r} (known: {', '.join(ASSERTION_TYPES)})"
            )
        required, optional = _SPEC_FIELDS[kind]
        missing = sorted(required - set(spec))
        if missing:
            raise ValueError(f"assertions[{index}] ({kind}): missing field(s) {missing}")
        unknown = sorted(set(spec) - required - optional - {"type"}, key=str)
        if unknown:
            raise ValueError(f"assertions[{index}] ({kind}): unknown field(s) {unknown}")
    return out


def _grade_one(text: str, spec: Mapping[str, Any]) -> AssertionResult:
    kind = spec["type"]
    if kind == "exact":
        held = check_exact(text, spec["value"])
        reason = "" if held else f"trimmed answer {_preview(_prepared(text))} is not exactly {_preview(spec['value'])}"
    elif kind == "contains":
        sensitive = spec.get("case_sensitive", False)
        held = check_contains(text, spec["value"], case_sensitive=sensitive)
        mode = "case-sensitive" if sensitive else "case-insensitive"
        reason = "" if held else f"answer does not contain {_preview(spec['value'])} ({mode})"
    elif kind == "regex":
        flags = spec.get("flags", ())
        held = check_regex(text, spec["pattern"], flags)
        shown = "".join(flags)
        reason = "" if held else f"no match for /{spec['pattern']}/{shown}"
    else:
        problems = json_schema_problems(text, spec["schema"])
        held = not problems
        more = len(problems) - _MAX_REASON_PROBLEMS
        reason = "; ".join(problems[:_MAX_REASON_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
    return AssertionResult(kind, held, reason)


def grade_deterministic(answer: str, assertions: Iterable[Mapping[str, Any]]) -> DeterministicGrade:
    """Grade ``answer`` against every assertion of one prompt (no model call, no tokens).

    A malformed spec raises ``ValueError`` naming its position and the type or field (no
    partial grade is returned). No assertions -> ``passed`` and ``score`` are ``None``.
    """
    _check_answer(answer)
    specs = _assertion_list(assertions)
    results = []
    for index, spec in enumerate(specs):
        try:
            results.append(_grade_one(answer, spec))
        except ValueError as exc:  # a malformed value, pattern, flag or schema
            raise ValueError(f"assertions[{index}] ({spec['type']}): {exc}") from exc
        except TypeError as exc:  # e.g. flags given as a bare string: it is data, so ValueError
            raise ValueError(f"assertions[{index}] ({spec['type']}): {exc}") from exc
    if not results:
        return DeterministicGrade(passed=None, score=None, results=())
    held = sum(1 for r in results if r.held)
    return DeterministicGrade(passed=held == len(results), score=held / len(results), results=tuple(results))


# --------------------------------------------------------------------------
# static
# --------------------------------------------------------------------------


def _check_module_names(values: object) -> tuple[str, ...]:
    names = _string_list(values, "allowed_imports")
    for name in names:
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"allowed_imports must hold module names such as 'numpy', got {name!r}")
    return tuple(names)


def _check_symbols(values: object) -> tuple[str, ...]:
    names = _string_list(values, "symbols")
    for name in names:
        if not name or any(ch.isspace() for ch in name):
            raise ValueError(f"symbols must hold non-empty names without whitespace, got {name!r}")
    return tuple(_nfc(name) for name in names)


def _import_allowed(module: str, allowed: frozenset[str] | None) -> bool:
    parts = module.split(".")
    if allowed is None or parts[0] in sys.stdlib_module_names:
        return True
    return any(".".join(parts[:n]) in allowed for n in range(1, len(parts) + 1))


def _imports(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(line, column, module) of every import in ``tree``, in source order; the module of a
    relative import starts with its dots (``from ..pkg import x`` -> ``..pkg``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, node.col_offset, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            shown = "." * node.level + (node.module or "")
            found.append((node.lineno, node.col_offset, shown))
    return sorted(found)


def _parse_block(fence: _Fence, number: int) -> tuple[ast.AST | None, StaticCheck]:
    subject = f"block {number}"
    try:
        tree = ast.parse(fence.body, filename=f"<{subject}>")
    except SyntaxError as exc:
        line = exc.lineno or 1
        where = f"line {line} of {subject} (answer line {fence.first_line + line - 1})"
        return None, StaticCheck("parses", subject, False, f"SyntaxError at {where}: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:
        return None, StaticCheck("parses", subject, False, f"{subject} cannot be parsed: {type(exc).__name__}: {exc}")
    return tree, StaticCheck("parses", subject, True, "")


def _symbol_forms(symbol: str) -> list[str]:
    parts = symbol.split(".")
    if len(parts) < 2 or not all(parts):
        return [symbol]
    return [".".join(parts[i:]) for i in range(len(parts) - 1)]  # full path down to two parts


def _symbol_present(symbol: str, prose: str) -> bool:
    return any(re.search(rf"(?<!\w){re.escape(form)}(?!\w)", prose) for form in _symbol_forms(symbol))


def grade_static(
    answer: str,
    *,
    allowed_imports: Iterable[str] | None = (),
    symbols: Iterable[str] = (),
) -> StaticGrade:
    """Static checks of an answer with code; nothing in it is ever run.

    Checks, in order: ``parses`` per python block, ``import`` per distinct module imported by
    the blocks that parse, ``symbol`` per declared symbol (see the module docstring). No
    python block and no symbols -> ``passed`` and ``score`` are ``None`` (not applicable).
    """
    text = _nfc(_check_answer(answer))
    allowed = None if allowed_imports is None else frozenset(_check_module_names(allowed_imports))
    declared = _check_symbols(symbols)
    fences, prose = _split_fences(text)
    checks: list[StaticCheck] = []
    import_checks: list[StaticCheck] = []
    seen: set[str] = set()
    for number, fence in enumerate(_python_fences(fences), start=1):
        tree, parsed = _parse_block(fence, number)
        checks.append(parsed)
        if tree is None:
            continue
        for line, _, module in _imports(tree):
            if module in seen:
                continue
            seen.add(module)
            where = f"block {number}, line {line}"
            if module.startswith("."):
                import_checks.append(StaticCheck("import", module, False, f"relative import of {module!r} ({where})"))
            elif _import_allowed(module, allowed):
                import_checks.append(StaticCheck("import", module, True, ""))
            else:
                reason = (f"{module!r} ({where}): root {module.split('.')[0]!r} is neither in "
                          "allowed_imports nor the standard library")
                import_checks.append(StaticCheck("import", module, False, reason))
    checks += import_checks
    for symbol in declared:
        held = _symbol_present(symbol, prose)
        reason = "" if held else f"{symbol!r} is not mentioned in the prose outside the code blocks"
        checks.append(StaticCheck("symbol", symbol, held, reason))
    if not checks:
        return StaticGrade(passed=None, score=None, checks=())
    n_held = sum(1 for c in checks if c.held)
    return StaticGrade(passed=n_held == len(checks), score=n_held / len(checks), checks=tuple(checks))
