"""Golden prompt sets: the prompts an answer-quality evaluation generates answers for and grades.

File format (JSONL, UTF-8)::

    {"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "demo.handbook",
     "corpus_signature": "91865b2c803deb64", "fingerprint": "...", "description": "..."}
    {"id": "h001", "prompt": "...", "assertions": [{"type": "contains", "value": "30 days"}],
     "reference": "...", "gold": ["expense-reimbursement-policy"], "form": "MATCH", "tags": ["finance"]}
    ...

The header's `set` is a namespaced identifier, `team.set` (lowercase letters, digits, `_` and
`-` on each side of one dot), so that two teams' sets cannot collide in the results.
`corpus_signature` is optional: a set written for one corpus says so, and loading it against
another corpus is an error; a set without one (generic prompts) can be used with any corpus.
`fingerprint` is an order-independent hash of the prompts (`golden_fingerprint`): a hand edit
without re-stamping is caught.  `description` and `source` are optional free text; any other
header key is an error.

Each prompt line has an `id` (unique in the set), the `prompt`, a list of `assertions` and an
optional `reference` answer, and needs at least one assertion or a reference.  Optional:
`gold` (the documents the prompt is about; checked against the corpus when doc ids are given),
`form` (MATCH or GAP, as in question sets), `tags` (free labels for slicing the results) and,
for prompts asking for code, `static` options: `{"allowed_imports": [...], "symbols": [...]}`
(the modules beyond the standard library that the code may import, `[]` for the standard
library only, absent for any; and the names the answer must mention; at least one of the two).
Unknown fields are errors naming them.

Assertion specs (the graders implement them; this module only checks the specs):

- `{"type": "exact", "value": str}`: the answer, trimmed, equals the value, trimmed.
- `{"type": "contains", "value": str, "case_sensitive": bool}`: the answer contains the value
  (`case_sensitive` defaults to false).
- `{"type": "regex", "pattern": str, "flags": ["i", "m", "s"]}`: a search finds the pattern
  (Python `re` syntax, flags optional), bounded in time (`eval_pipeline.common.patterns`).  The
  pattern is compiled and probed at load, so a bad one is a load error; so is one that
  backtracks catastrophically, and one not in Unicode NFC (answers are NFC-normalised before
  they are matched).
- `{"type": "json_schema", "schema": {...}}`: the answer parses as JSON matching a structural
  subset of JSON Schema: `type` (a name, or a list of names, among object, array, string,
  number, integer, boolean, null), `required` and `properties` (beside an object type),
  `items` (beside an array type, one schema for every item), nested at most `MAX_SCHEMA_DEPTH`
  (32) levels (a deeper one is a load error naming the path).  The top-level schema must have a
  `type`.  Any other keyword is a load error naming it (a grader that silently ignored `enum` or
  `minimum` would pass wrong answers).

A set is loaded strictly: any problem is a `GoldenPromptError` (a `QuestionSetError`) naming
the file, the line and the field, before any model is called.  Text Postgres cannot store (NUL,
lone surrogates) is refused as in question sets.

The retrieval question set can serve as a golden set (`golden_from_question_set`): each
question with a `gist` becomes a prompt whose reference is the gist, with no assertions.
Abstention questions (no gold document, so no gist) are skipped by default: a question set
says nothing about how an abstaining answer should read, and a made-up reference would put a
grading policy into the data.  `include_abstentions=True` keeps them, tagged `abstention`, with
`ABSTENTION_REFERENCE` as the reference, for a grader that checks abstention.

The demo set (`demo_data/golden_prompts.jsonl`, set `demo.handbook`) asks about the demo
corpus; every prompt's facts are in its gold document.  The demo grades deterministically on
*extractive* answers (the retrieved chunks' sentences closest to the prompt), so its `contains`
values and `regex` patterns are words and figures its gold documents literally contain
(tests/test_golden.py checks this): an extractive answer from the right chunk can pass them,
and a variant that retrieves the right chunk more often scores higher.  Its `json_schema` and
`exact` assertions (answer as JSON, answer only yes or no) will mostly fail on extractive
answers; that is honest, not a bug: an extractive answer is not JSON and is not one word.  A
few prompts ask for code (Python for the Beacon API and the fuel surcharge) with `static`
options, and two have no gold document (the corpus does not answer them) and only a reference.

Stamp a hand-written file (with or without a header) with
`python -m eval_pipeline.questions.golden stamp FILE --set team.set`.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.common.patterns import (
    REGEX_FLAGS,
    CompiledPattern,
    PatternTimeout,
    check_bounded,
    compile_pattern,
)
from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.questions.sets import (
    FORMS,
    QuestionSetError,
    check_length,
    check_text,
    input_error,
    json_object_line,
    question_list,
    read_jsonl,
)

__all__ = [
    "ABSTENTION_REFERENCE",
    "ASSERTION_TYPES",
    "FORMAT_VERSION",
    "HEADER_KIND",
    "MAX_SCHEMA_DEPTH",
    "SCHEMA_KEYWORDS",
    "SCHEMA_TYPES",
    "SET_ID_PATTERN",
    "Assertion",
    "GoldenPrompt",
    "GoldenPromptError",
    "GoldenPromptSet",
    "StaticOptions",
    "golden_fingerprint",
    "golden_from_question_set",
    "load_golden_prompts",
    "stamp_golden_file",
    "write_golden_prompts",
]

HEADER_KIND = "eval-pipeline/golden-prompts"
FORMAT_VERSION = 1
SET_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*\.[a-z0-9][a-z0-9_-]*$")
HEADER_FIELDS = ("kind", "version", "set", "corpus_signature", "fingerprint", "description", "source")
PROMPT_FIELDS = ("id", "prompt", "assertions", "reference", "gold", "form", "tags", "static")
ASSERTION_TYPES = ("exact", "contains", "regex", "json_schema")
_ASSERTION_FIELDS = {  # type -> (required, optional)
    "exact": (("value",), ()),
    "contains": (("value",), ("case_sensitive",)),
    "regex": (("pattern",), ("flags",)),
    "json_schema": (("schema",), ()),
}
SCHEMA_KEYWORDS = ("type", "required", "properties", "items")
SCHEMA_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# The deepest json_schema accepted (the top-level schema is level 1; each `properties` or `items`
# adds one): a structural check of an answer needs no more, and a deeper one would exhaust the
# interpreter's stack (RecursionError) in the loader and the grader.
MAX_SCHEMA_DEPTH = 32
STATIC_FIELDS = ("allowed_imports", "symbols")
_DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
ABSTENTION_REFERENCE = "The documents do not answer this question."


class GoldenPromptError(QuestionSetError):
    """A golden prompt set that cannot be used; the message names the file, line and field."""


def _error(loc: str, field_name: str | None, message: str) -> GoldenPromptError:
    where = f"{loc}: field {field_name!r}" if field_name else loc
    return GoldenPromptError(f"{where}: {message}")


def _check_text(loc: str, field_name: str, value: Any, *, searched: bool = False) -> None:
    """check_text's test (and check_length's, for a text the engines search with), in this
    module's error format ("loc: field 'name': why")."""
    try:
        check_text(loc, field_name, value)
        if searched:
            check_length(loc, field_name, value)
    except QuestionSetError as exc:
        why = str(exc).removeprefix(f"{loc}: field {field_name!r} ")
        raise _error(loc, field_name, why) from None


# --- assertions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assertion:
    """One check of an answer: `type` (see ASSERTION_TYPES) and its parameters, validated and
    normalised on construction (defaults dropped, regex flags sorted), so an invalid spec
    cannot exist.  Build one with `Assertion.from_json` or the named constructors."""

    type: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.params, Mapping) or "type" in self.params:
            raise _error("assertion", "params", "must be a mapping of the assertion's fields, without 'type'")
        object.__setattr__(self, "params", _assertion_params({"type": self.type, **self.params}, "assertion", ""))

    @classmethod
    def from_json(cls, obj: Any, *, loc: str = "assertion", field_name: str = "") -> Assertion:
        """An assertion from its JSON object; a bad spec is a GoldenPromptError naming `loc` and
        the field (`field_name` is the prefix, e.g. 'assertions[0]')."""
        params = _assertion_params(obj, loc, field_name)
        return cls(obj["type"], params)

    @classmethod
    def exact(cls, value: str) -> Assertion:
        return cls("exact", {"value": value})

    @classmethod
    def contains(cls, value: str, *, case_sensitive: bool = False) -> Assertion:
        return cls("contains", {"value": value, "case_sensitive": case_sensitive})

    @classmethod
    def regex(cls, pattern: str, flags: Iterable[str] = ()) -> Assertion:
        return cls("regex", {"pattern": pattern, "flags": list(flags)})

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any]) -> Assertion:
        return cls("json_schema", {"schema": schema})

    @property
    def value(self) -> str | None:
        """The value of an exact or contains assertion."""
        return self.params.get("value")

    @property
    def case_sensitive(self) -> bool:
        return bool(self.params.get("case_sensitive", False))

    @property
    def pattern(self) -> str | None:
        return self.params.get("pattern")

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(self.params.get("flags", ()))

    @property
    def schema(self) -> dict[str, Any] | None:
        """A copy of a json_schema assertion's schema."""
        schema = self.params.get("schema")
        return copy.deepcopy(schema) if schema is not None else None

    def compiled(self) -> CompiledPattern:
        """The compiled pattern of a regex assertion (with its flags); search it with
        `eval_pipeline.common.patterns.bounded_search`."""
        if self.type != "regex":
            raise ValueError(f"a {self.type} assertion has no pattern")
        return compile_pattern(self.params["pattern"], self.flags)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **copy.deepcopy(dict(self.params))}


def _assertion_params(obj: Any, loc: str, where: str) -> dict[str, Any]:
    """The normalised parameters of an assertion spec, or a GoldenPromptError naming the field."""
    def name(key: str) -> str:
        return f"{where}.{key}" if where else key

    if not isinstance(obj, dict):
        raise _error(loc, where or "assertion", f"an assertion must be an object with a 'type', got {obj!r:.60}")
    if "type" not in obj:
        raise _error(loc, name("type"), f"missing; valid types: {', '.join(ASSERTION_TYPES)}")
    typ = obj["type"]
    if typ not in ASSERTION_TYPES:
        raise _error(loc, name("type"), f"unknown assertion type {typ!r}; valid: {', '.join(ASSERTION_TYPES)}")
    required, optional = _ASSERTION_FIELDS[typ]
    unknown = [k for k in obj if k != "type" and k not in required + optional]
    if unknown:
        raise _error(loc, name(unknown[0]), f"unknown field(s) {unknown} for a {typ} assertion; "
                                            f"allowed: {', '.join(required + optional)}")
    for key in required:
        if key not in obj:
            raise _error(loc, name(key), f"missing (a {typ} assertion needs {', '.join(required)})")
    out: dict[str, Any] = {}
    if typ in ("exact", "contains"):
        value = obj["value"]
        if not isinstance(value, str) or not value.strip():
            raise _error(loc, name("value"), f"must be a non-empty string, got {value!r:.60}")
        _check_text(loc, name("value"), value)
        out["value"] = value
        if typ == "contains":
            cs = obj.get("case_sensitive", False)
            if not isinstance(cs, bool):
                raise _error(loc, name("case_sensitive"), f"must be true or false, got {cs!r:.60}")
            if cs:
                out["case_sensitive"] = True
    elif typ == "regex":
        pattern = obj["pattern"]
        if not isinstance(pattern, str) or not pattern:
            raise _error(loc, name("pattern"), f"must be a non-empty string, got {pattern!r:.60}")
        _check_text(loc, name("pattern"), pattern)
        if unicodedata.normalize("NFC", pattern) != pattern:
            raise _error(loc, name("pattern"), "is not in Unicode NFC form; answers are NFC-normalised before they "
                                               "are matched, so a decomposed literal would never match")
        flags = obj.get("flags", [])
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise _error(loc, name("flags"), f"must be a list of flag letters ({', '.join(REGEX_FLAGS)}), "
                                             f"got {flags!r:.60}")
        bad = [f for f in flags if f not in REGEX_FLAGS]
        if bad:
            raise _error(loc, name("flags"), f"unknown flag(s) {bad}; valid: {', '.join(REGEX_FLAGS)}")
        try:
            check_bounded(compile_pattern(pattern, flags), pattern)
        except PatternTimeout as exc:
            raise _error(loc, name("pattern"), str(exc)) from None
        except ValueError as exc:
            raise _error(loc, name("pattern"), f"invalid regular expression {pattern!r}: {exc}") from None
        out["pattern"] = pattern
        if flags:
            out["flags"] = sorted(set(flags))
    else:
        schema = obj["schema"]
        _check_schema(schema, loc, name("schema"), top=True)
        out["schema"] = copy.deepcopy(schema)
    return out


def _check_schema(schema: Any, loc: str, where: str, *, top: bool = False, depth: int = 1) -> None:
    """The structural JSON Schema subset: type / required / properties / items, nothing else,
    nested at most MAX_SCHEMA_DEPTH levels."""
    if depth > MAX_SCHEMA_DEPTH:
        raise _error(loc, where, f"the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels (MAX_SCHEMA_DEPTH)")
    if not isinstance(schema, dict):
        raise _error(loc, where, f"a schema must be an object, got {schema!r:.60}")
    unknown = [k for k in schema if k not in SCHEMA_KEYWORDS]
    if unknown:
        raise _error(loc, f"{where}.{unknown[0]}", f"unsupported schema keyword {unknown[0]!r}; "
                                                  f"the subset allows only {', '.join(SCHEMA_KEYWORDS)}")
    typ = schema.get("type")
    if top and "type" not in schema:
        raise _error(loc, f"{where}.type", "the top-level schema needs a 'type'")
    names = [typ] if isinstance(typ, str) else typ
    if "type" in schema:
        if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names):
            raise _error(loc, f"{where}.type", f"must be a type name or a non-empty list of distinct names, "
                                               f"got {typ!r:.60}")
        bad = [n for n in names if n not in SCHEMA_TYPES]
        if bad:
            raise _error(loc, f"{where}.type", f"unsupported type {bad[0]!r}; valid: {', '.join(SCHEMA_TYPES)}")
    for key, needs in (("required", "object"), ("properties", "object"), ("items", "array")):
        if key in schema and needs not in (names or ()):
            raise _error(loc, f"{where}.{key}", f"{key!r} needs \"type\": \"{needs}\" beside it, got type {typ!r}")
    if "required" in schema:
        req = schema["required"]
        if not isinstance(req, list) or not all(isinstance(k, str) and k for k in req):
            raise _error(loc, f"{where}.required", f"must be a list of property names, got {req!r:.60}")
        if len(set(req)) != len(req):
            raise _error(loc, f"{where}.required", f"lists a property twice: {req!r:.80}")
        for k in req:
            _check_text(loc, f"{where}.required", k)
    if "properties" in schema:
        props = schema["properties"]
        if not isinstance(props, dict):
            raise _error(loc, f"{where}.properties", f"must map property names to schemas, got {props!r:.60}")
        for k, sub in props.items():
            _check_text(loc, f"{where}.properties", k)
            _check_schema(sub, loc, f"{where}.properties.{k}", depth=depth + 1)
    if "items" in schema:
        _check_schema(schema["items"], loc, f"{where}.items", depth=depth + 1)


# --- prompts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StaticOptions:
    """Static checks of a code answer: the modules beyond the standard library it may import
    (() : the standard library only; None: any) and the names the answer must mention."""

    allowed_imports: tuple[str, ...] | None = None
    symbols: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.allowed_imports is not None:
            out["allowed_imports"] = list(self.allowed_imports)
        if self.symbols:
            out["symbols"] = list(self.symbols)
        return out


@dataclass(frozen=True)
class GoldenPrompt:
    id: str
    prompt: str
    assertions: tuple[Assertion, ...] = ()
    reference: str | None = None
    gold: tuple[str, ...] = ()
    form: str | None = None
    tags: tuple[str, ...] = ()
    static: StaticOptions | None = None

    def to_json(self) -> dict[str, Any]:
        """The prompt's line: id, prompt and assertions always, the optional fields when set."""
        out: dict[str, Any] = {"id": self.id, "prompt": self.prompt,
                               "assertions": [a.to_json() for a in self.assertions]}
        if self.reference is not None:
            out["reference"] = self.reference
        if self.gold:
            out["gold"] = list(self.gold)
        if self.form is not None:
            out["form"] = self.form
        if self.tags:
            out["tags"] = list(self.tags)
        if self.static is not None:
            out["static"] = self.static.to_json()
        return out


def golden_fingerprint(prompts: Iterable[GoldenPrompt]) -> str:
    """Order-independent fingerprint of the prompts, their assertions and references."""
    lines = sorted(json.dumps(p.to_json(), sort_keys=True, ensure_ascii=False) for p in prompts)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class GoldenPromptSet:
    set_id: str
    prompts: tuple[GoldenPrompt, ...]
    path: str
    header: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def fingerprint(self) -> str:
        return golden_fingerprint(self.prompts)

    @property
    def corpus_signature(self) -> str | None:
        value = self.header.get("corpus_signature")
        return value if isinstance(value, str) else None

    def by_id(self) -> dict[str, GoldenPrompt]:
        return {p.id: p for p in self.prompts}

    def counts(self) -> dict[str, int]:
        """Prompts, those with a reference / with no assertion / with static options, and the
        assertions of each type."""
        c = {
            "prompts": len(self.prompts),
            "with_reference": sum(p.reference is not None for p in self.prompts),
            "reference_only": sum(not p.assertions for p in self.prompts),
            "with_static": sum(p.static is not None for p in self.prompts),
        }
        for typ in ASSERTION_TYPES:
            c[f"assertions_{typ}"] = sum(a.type == typ for p in self.prompts for a in p.assertions)
        return c


def _string_list(value: Any, loc: str, field_name: str, *, what: str,
                 pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    """A list of distinct non-empty strings (None: empty), or an error naming the field."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _error(loc, field_name, f"must be a list of {what} (non-empty strings), got {value!r:.80}")
    for v in value:
        _check_text(loc, field_name, v)
        if pattern is not None and not pattern.match(v):
            raise _error(loc, field_name, f"{v!r} is not a dotted Python name")
    dupes = sorted({v for v in value if value.count(v) > 1})
    if dupes:
        raise _error(loc, field_name, f"lists {dupes[0]!r} more than once")
    return tuple(value)


def _static_from(value: Any, loc: str) -> StaticOptions | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _error(loc, "static", f"must be an object with {' and/or '.join(STATIC_FIELDS)}, got {value!r:.60}")
    unknown = [k for k in value if k not in STATIC_FIELDS]
    if unknown:
        raise _error(loc, f"static.{unknown[0]}", f"unknown field(s) {unknown}; allowed: {', '.join(STATIC_FIELDS)}")
    if not value:
        raise _error(loc, "static", f"names nothing to check; give {' and/or '.join(STATIC_FIELDS)}")
    for key in STATIC_FIELDS:
        if key in value and not isinstance(value[key], list):
            raise _error(loc, f"static.{key}", f"must be a list of names, got {value[key]!r:.60}")
    allowed = value.get("allowed_imports")  # []: the standard library only; absent: any import
    options = StaticOptions(
        allowed_imports=None if allowed is None else _string_list(allowed, loc, "static.allowed_imports",
                                                                  what="module names", pattern=_DOTTED_NAME),
        symbols=_string_list(value.get("symbols"), loc, "static.symbols", what="names", pattern=_DOTTED_NAME),
    )
    if options.allowed_imports is None and not options.symbols:
        raise _error(loc, "static.symbols", "is empty and allowed_imports is absent, so nothing would be checked")
    return options


def _prompt_from(obj: Any, loc: str) -> GoldenPrompt:
    """A prompt from its JSON line, strictly: a GoldenPromptError naming `loc` and the field."""
    if not isinstance(obj, dict):
        raise _error(loc, None, "expected a JSON object")
    unknown = [k for k in obj if k not in PROMPT_FIELDS]
    if unknown:
        raise _error(loc, unknown[0], f"unknown field(s) {unknown}; allowed: {', '.join(PROMPT_FIELDS)}")
    for key in ("id", "prompt"):
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            raise _error(loc, key, "missing" if key not in obj else f"must be a non-empty string, got {value!r:.60}")
        _check_text(loc, key, value, searched=key == "prompt")  # each variant retrieves the prompt
    if "assertions" not in obj:
        raise _error(loc, "assertions", "missing (a list of assertions; [] when the prompt has a reference)")
    raw = obj["assertions"]
    if not isinstance(raw, list):
        raise _error(loc, "assertions", f"must be a list, got {raw!r:.60}")
    assertions = tuple(Assertion.from_json(a, loc=loc, field_name=f"assertions[{i}]") for i, a in enumerate(raw))
    reference = obj.get("reference")
    if reference is not None:
        if not isinstance(reference, str) or not reference.strip():
            raise _error(loc, "reference", f"must be a non-empty string or null, got {reference!r:.60}")
        _check_text(loc, "reference", reference)
    if not assertions and reference is None:
        raise _error(loc, "assertions", "the prompt has no assertion and no reference; it needs at least one of them")
    form = obj.get("form")
    if form is not None and form not in FORMS:
        raise _error(loc, "form", f"is {form!r}; valid: {', '.join(FORMS)} or null")
    return GoldenPrompt(
        id=obj["id"],
        prompt=obj["prompt"],
        assertions=assertions,
        reference=reference,
        gold=_string_list(obj.get("gold"), loc, "gold", what="document ids"),
        form=form,
        tags=_string_list(obj.get("tags"), loc, "tags", what="tags"),
        static=_static_from(obj.get("static"), loc),
    )


# --- files ------------------------------------------------------------------------------------


def _parse_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    return json_object_line(path, lineno, line, GoldenPromptError)


def _read_lines(path: Path) -> list[str]:
    """The set's JSONL lines, split on "\n" only: U+2028 and the other separators str.splitlines
    breaks on are text inside a prompt or a reference."""
    return read_jsonl(path, "golden prompt set", GoldenPromptError)


def _check_set_id(loc: str, set_id: Any) -> str:
    if not isinstance(set_id, str) or not SET_ID_PATTERN.match(set_id):
        raise _error(loc, "set", f"{set_id!r} is not a namespaced set id: 'team.set', lowercase letters, digits, "
                                 f"'_' or '-' on each side of one dot (e.g. 'support.refunds')")
    return set_id


def _check_header(path: Path, header: Any) -> dict[str, Any]:
    loc = f"{path}:1"
    if not isinstance(header, dict) or header.get("kind") != HEADER_KIND:
        hint = ""
        if isinstance(header, dict) and header.get("kind") == "eval-pipeline/question-set":
            hint = " (this is a retrieval question set: use it through golden_from_question_set)"
        raise _error(loc, "kind", f"missing header: expected an object with kind={HEADER_KIND!r}{hint}; to write one "
                                  f"for a hand-written set: python -m eval_pipeline.questions.golden stamp {path} "
                                  f"--set team.set")
    unknown = [k for k in header if k not in HEADER_FIELDS]
    if unknown:
        raise _error(loc, unknown[0], f"unknown header field(s) {unknown}; allowed: {', '.join(HEADER_FIELDS)}")
    if header.get("version") != FORMAT_VERSION:
        raise _error(loc, "version", f"unsupported version {header.get('version')!r} (expected {FORMAT_VERSION})")
    _check_set_id(loc, header.get("set"))
    for key in ("corpus_signature", "fingerprint", "description", "source"):
        value = header.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise _error(loc, key, f"must be a non-empty string or null, got {value!r:.60}")
        _check_text(loc, key, value)
    return header


def _read_prompts(path: Path, numbered: Iterable[tuple[int, str]], known: set[str] | None) -> list[GoldenPrompt]:
    prompts: list[GoldenPrompt] = []
    seen: dict[str, int] = {}
    for lineno, line in numbered:
        loc = f"{path}:{lineno}"
        p = _prompt_from(_parse_line(path, lineno, line), loc)
        if p.id in seen:
            raise _error(loc, "id", f"duplicate id {p.id!r} (first at line {seen[p.id]})")
        seen[p.id] = lineno
        if known is not None:
            missing = [d for d in p.gold if d not in known]
            if missing:
                raise _error(loc, "gold", f"document id(s) not in the corpus: {missing}")
        prompts.append(p)
    if not prompts:
        raise GoldenPromptError(f"{path}: the golden prompt set has no prompts")
    return prompts


def load_golden_prompts(
    path: str | Path,
    *,
    corpus_signature: str | None = None,
    doc_ids: Iterable[str] | None = None,
    require_fingerprint: bool = True,
) -> GoldenPromptSet:
    """Read and validate a golden prompt set, strictly.

    With `corpus_signature`, a header written for another corpus is an error (a header without
    one fits any corpus); with `doc_ids`, so is a gold id not among them.  The header's
    fingerprint must match the prompts; with `require_fingerprint` (the default) a header
    without one is an error saying how to stamp the file.
    """
    path = Path(path)
    lines = _read_lines(path)
    if not lines:
        raise GoldenPromptError(f"{path}: empty file (expected a header line)")
    header = _check_header(path, _parse_line(path, 1, lines[0]))
    written_for = header.get("corpus_signature")
    if corpus_signature is not None and written_for is not None and written_for != corpus_signature:
        raise _error(f"{path}:1", "corpus_signature",
                     f"the set was written for corpus {written_for!r}, but the corpus being evaluated is "
                     f"{corpus_signature!r}; its gold documents and references are about other documents")
    known = set(doc_ids) if doc_ids is not None else None
    numbered = [(n, line) for n, line in enumerate(lines[1:], start=2) if line.strip()]
    prompts = _read_prompts(path, numbered, known)
    gs = GoldenPromptSet(set_id=header["set"], prompts=tuple(prompts), path=str(path), header=header)
    stated = header.get("fingerprint")
    if stated is None and require_fingerprint:
        raise _error(f"{path}:1", "fingerprint",
                     f"the header has no fingerprint (a hash of the prompts, so that a hand edit is caught); check "
                     f"the prompts, then write one with: python -m eval_pipeline.questions.golden stamp {path}")
    if stated is not None and stated != gs.fingerprint:
        raise _error(f"{path}:1", "fingerprint",
                     f"mismatch: the header says {stated!r}, the prompts hash to {gs.fingerprint!r}; the file was "
                     f"edited after it was written (re-stamp it once the edit is checked)")
    return gs


def write_golden_prompts(path: str | Path, golden_set: GoldenPromptSet) -> str:
    """Write a golden prompt set atomically (temp file + rename) with its header and
    fingerprint; returns the fingerprint.  Every prompt is checked as the loader would check
    it, so a written set always loads.  The header keeps the set's corpus signature and its
    `description` and `source`."""
    path = Path(path)
    set_id = _check_set_id(f"{path}", golden_set.set_id)
    prompts = list(golden_set.prompts)
    seen: set[str] = set()
    for p in prompts:
        if not isinstance(p, GoldenPrompt):
            raise GoldenPromptError(f"{path}: prompts must be GoldenPrompt objects, got {type(p).__name__}")
        loc = f"{path}: prompt {p.id!a}"
        _prompt_from(p.to_json(), loc)
        if p.id in seen:
            raise _error(loc, "id", f"duplicate id {p.id!r}")
        seen.add(p.id)
    if not prompts:
        raise GoldenPromptError(f"{path}: the golden prompt set has no prompts")
    fingerprint = golden_fingerprint(prompts)
    header: dict[str, Any] = {"kind": HEADER_KIND, "version": FORMAT_VERSION, "set": set_id}
    if golden_set.corpus_signature is not None:
        header["corpus_signature"] = golden_set.corpus_signature
    header["fingerprint"] = fingerprint
    for key in ("description", "source"):
        if golden_set.header.get(key) is not None:
            header[key] = golden_set.header[key]
    _check_header(path, header)
    body = [json.dumps(header, ensure_ascii=False)] + [json.dumps(p.to_json(), ensure_ascii=False) for p in prompts]
    atomic_write_text(path, "\n".join(body) + "\n")
    return fingerprint


def stamp_golden_file(
    path: str | Path,
    *,
    set_id: str | None = None,
    corpus_signature: str | None = None,
    doc_ids: Iterable[str] | None = None,
) -> str:
    """(Re)write a hand-written golden prompt file with a header and fingerprint.

    Accepts a file with or without a header (without one, `set_id` is required; with one,
    `set_id` renames the set).  Every prompt is validated first (gold ids against `doc_ids`
    when given).  The header records `corpus_signature` (none: the set fits any corpus) and
    keeps the old header's description and source.  Returns the new fingerprint.
    """
    path = Path(path)
    numbered = [(n, line) for n, line in enumerate(_read_lines(path), start=1) if line.strip()]
    old: dict[str, Any] = {}
    if numbered:
        first = _parse_line(path, *numbered[0])
        if isinstance(first, dict) and first.get("kind") == HEADER_KIND:
            old = _check_header(path, first)
            numbered = numbered[1:]
    set_id = set_id if set_id is not None else old.get("set")
    if set_id is None:
        raise _error(f"{path}", "set", "the file has no header, so the set id must be given (team.set)")
    _check_set_id(f"{path}", set_id)
    prompts = _read_prompts(path, numbered, set(doc_ids) if doc_ids is not None else None)
    header = {"corpus_signature": corpus_signature, "description": old.get("description"),
              "source": old.get("source", "hand-written")}
    return write_golden_prompts(path, GoldenPromptSet(set_id=set_id, prompts=tuple(prompts), path=str(path),
                                                      header=header))


def golden_from_question_set(question_set: Any, *, set_id: str, include_abstentions: bool = False) -> GoldenPromptSet:
    """The retrieval question set used as a golden set.

    Each question with a non-empty `gist` becomes a prompt (id = qid, prompt = question text)
    with `reference=gist`, no assertions, its gold documents and form, and its hard class as a
    tag.  Answerable questions without a gist (BEIR sets, say) have nothing to grade against
    and are skipped.  Abstention questions are skipped too, unless `include_abstentions`: then
    each becomes a prompt tagged 'abstention' with ABSTENTION_REFERENCE as its reference.  A set
    left with no prompt is an error.
    """
    where = getattr(question_set, "path", "question set")
    _check_set_id(f"{where}", set_id)
    questions = question_list(question_set)
    prompts: list[GoldenPrompt] = []
    seen: set[str] = set()
    for q in questions:
        if q.qid in seen:
            raise _error(f"{where}: question {q.qid!a}", "id", f"duplicate qid {q.qid!r}")
        seen.add(q.qid)
        tags = (q.hard_class,) if q.hard_class else ()
        if q.answerable and q.gist.strip():
            p = GoldenPrompt(id=q.qid, prompt=q.question, reference=q.gist, gold=q.gold, form=q.form, tags=tags)
        elif not q.answerable and include_abstentions:
            tags = tags if "abstention" in tags else (*tags, "abstention")
            p = GoldenPrompt(id=q.qid, prompt=q.question, reference=ABSTENTION_REFERENCE, form=q.form, tags=tags)
        else:
            continue
        _prompt_from(p.to_json(), f"{where}: question {q.qid!a}")
        prompts.append(p)
    if not prompts:
        raise GoldenPromptError(f"{where}: no question has a gist to serve as a reference answer, so the set has no "
                                f"prompt to grade")
    corpus = getattr(question_set, "corpus_signature", None)
    header = {"kind": HEADER_KIND, "version": FORMAT_VERSION, "set": set_id, "corpus_signature": corpus,
              "fingerprint": golden_fingerprint(prompts), "source": f"question-set:{where}"}
    return GoldenPromptSet(set_id=set_id, prompts=tuple(prompts), path=f"{where}", header=header)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval_pipeline.questions.golden")
    sub = parser.add_subparsers(dest="command", required=True)
    stamp = sub.add_parser("stamp", help="write the header and fingerprint of a hand-written golden prompt set")
    stamp.add_argument("prompts")
    stamp.add_argument("--set", dest="set_id", default=None, help="the namespaced set id (team.set)")
    stamp.add_argument("--corpus-kind", default="demo", choices=["demo", "folder", "jsonl", "beir", "none"],
                       help="the corpus the gold ids are checked against ('none': a set for any corpus)")
    stamp.add_argument("--corpus", default=None, help="corpus path (not needed for demo)")
    args = parser.parse_args(argv)
    signature, doc_ids = None, None
    try:
        if args.corpus_kind != "none":
            snapshot = load_corpus(args.corpus_kind, args.corpus)
            signature, doc_ids = snapshot.signature, [d.doc_id for d in snapshot.documents]
        fingerprint = stamp_golden_file(args.prompts, set_id=args.set_id, corpus_signature=signature, doc_ids=doc_ids)
    except ValueError as exc:  # GoldenPromptError, CorpusError: they name the file and line
        return input_error(parser.prog, exc)
    print(f"{args.prompts}: corpus {signature}, fingerprint {fingerprint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
