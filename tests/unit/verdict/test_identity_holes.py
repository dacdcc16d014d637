"""The fourth review of the verdict, the holes that need no database: plugin code that is in no
identity, grading code missing from the code-graded yardsticks, plugin graders whose yardstick
was never comparable, and a history that cannot be read taken for an empty one.

Each test names the hole it closes; they call the library directly (no Dagster, no Postgres).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from eval_pipeline.common.registry import Registry
from eval_pipeline.grading.registry import GRADER_KINDS, GraderKind
from eval_pipeline.history.answers import answer_comparable


@dataclass(frozen=True)
class Thing:
    name: str
    build: Callable[..., Any] | None = None


def _plugin(tmp_path, body: str) -> tuple[Any, Any]:
    """A module outside the package, importable under a fresh name (a team's plugin file)."""
    name = f"plugin_{uuid.uuid4().hex[:10]}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    return module, path


def _reload(module, path, body: str):
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    importlib.invalidate_caches()
    sys.path.insert(0, str(path.parent))
    try:
        return importlib.reload(module)
    finally:
        sys.path.remove(str(path.parent))


# --- hole 3: plugin code in the identities --------------------------------------------------


def test_a_plugin_kinds_code_is_in_its_registrys_digest(tmp_path):
    """HOLE 3. A kind registered from a module outside the package had no code digest: its file
    changed without changing any identity."""
    registry: Registry[Thing] = Registry("thing")
    module, path = _plugin(tmp_path, "def build():\n    return 1\n")
    registry.register(Thing("mine", module.build))
    before = registry.code_digest()
    assert before and str(path) in registry.external_sources()["mine"]
    module = _reload(module, path, "def build():\n    return 2\n")
    registry.register(Thing("mine", module.build), replace=True)
    assert registry.code_digest() != before
    # a reformatted or re-documented file is the same code
    again = registry.code_digest()
    module = _reload(module, path, '"""Doc."""\n\n\ndef build():\n    return  2  # same\n')
    registry.register(Thing("mine", module.build), replace=True)
    assert registry.code_digest() == again


def test_a_built_in_kind_adds_nothing_to_the_digest():
    """Built-in kinds are covered by the source digest of the package: none is listed as a
    plugin, so the identities of a project without plugins do not move."""
    from eval_pipeline.metrics.retrieval import MEASURES
    from eval_pipeline.ranking.engines import ENGINES
    from eval_pipeline.ranking.rerankers import RERANKERS

    for registry in (ENGINES, RERANKERS, MEASURES, GRADER_KINDS):
        builtin = set(registry.names()) - set(registry.external_sources())
        assert builtin, registry
    assert not {"deterministic", "static", "grounding", "judge", "decision"} & set(GRADER_KINDS.external_sources())
    assert "hit@1" not in MEASURES.external_sources()


def test_the_engine_identity_and_result_environment_follow_a_plugin_reranker(tmp_path):
    """HOLE 3. A plugin reranker's code changed; the engine identity and the results cache's
    environment did not, so cached results were replayed and history compared across it."""
    from eval_pipeline.ranking.caches import engine_identity, result_environment
    from eval_pipeline.ranking.rerankers import RERANKERS

    base_identity, base_environment = engine_identity(), result_environment()
    module, path = _plugin(tmp_path, "class Rerank:\n    def go(self):\n        return 1\n")
    name = f"toy_{uuid.uuid4().hex[:6]}"
    try:
        RERANKERS.register(Thing(name, module.Rerank))  # type: ignore[arg-type]
        first = engine_identity()
        assert first != base_identity and result_environment() != base_environment
        module = _reload(module, path, "class Rerank:\n    def go(self):\n        return 2\n")
        RERANKERS.register(Thing(name, module.Rerank), replace=True)  # type: ignore[arg-type]
        assert engine_identity() != first
    finally:
        RERANKERS.unregister(name)
    assert engine_identity() == base_identity


def test_the_scoring_protocol_follows_a_plugin_metric(tmp_path):
    """HOLE 3. A plugin metric's code is part of how the benchmark is scored."""
    from eval_pipeline.history.identity import scoring_protocol
    from eval_pipeline.metrics.retrieval import MEASURES

    base = scoring_protocol("v1")
    module, path = _plugin(tmp_path, "def score(ranking, gold):\n    return 1.0\n")
    name = f"toy_{uuid.uuid4().hex[:6]}"
    try:
        MEASURES.register(Thing(name, module.score))  # type: ignore[arg-type]
        assert scoring_protocol("v1") != base
    finally:
        MEASURES.unregister(name)
    assert scoring_protocol("v1") == base


def test_a_plugin_graders_code_is_in_the_yardstick_the_verdict_records(tmp_path):
    """HOLE 3. A plugin grader's yardstick is what it says (``toy:v1``): its code changed under
    the same yardstick and its grades were compared across the change."""
    from eval_pipeline.verdict.answers import recorded_yardstick

    module, path = _plugin(tmp_path, "def grade(answer):\n    return {}\n")
    name = f"toy_{uuid.uuid4().hex[:6]}"
    try:
        GRADER_KINDS.register(GraderKind(name, grade_one=module.grade, yardstick=lambda: f"{name}:v1"))
        first = recorded_yardstick(name, f"{name}:v1")
        assert first.startswith(f"{name}:v1+") and answer_comparable(_row(name, first))[0]
        module = _reload(module, path, "def grade(answer):\n    return {'x': 1}\n")
        GRADER_KINDS.register(GraderKind(name, grade_one=module.grade, yardstick=lambda: f"{name}:v1"), replace=True)
        assert recorded_yardstick(name, f"{name}:v1") != first
    finally:
        GRADER_KINDS.unregister(name)
    assert recorded_yardstick("deterministic", "deterministic:v1+abc") == "deterministic:v1+abc"


# --- hole 4: the grading code ----------------------------------------------------------------


def test_grading_code_covers_what_decides_a_grade(monkeypatch):
    """HOLE 4. The code-graded yardsticks hashed only assertions.py and answer_metrics.py: the
    pattern engine (common/patterns.py, the `regex` package's version), the golden set's
    limits (questions/golden.py), grading/run.py and the Python that parses the static checks
    also decide a pass."""
    from eval_pipeline.grading import run
    from tests.unit.grading.test_grading_code import hashed_files

    files = hashed_files(monkeypatch)
    code = run.grading_code()
    assert {"eval_pipeline/grading/assertions.py", "eval_pipeline/grading/answer_metrics.py",
            "eval_pipeline/grading/run.py", "eval_pipeline/common/patterns.py",
            "eval_pipeline/questions/golden.py"} <= files
    import regex

    monkeypatch.setattr(regex, "__version__", "0.0.0-other")
    assert run.grading_code() != code


# --- hole 5: plugin and grounding yardsticks -------------------------------------------------


def _row(grader: str, yardstick: str) -> dict[str, Any]:
    return {"limited": False, "generator": "openai:gpt", "grader": grader, "yardstick": yardstick,
            "set_id": "s", "set_fingerprint": "f", "corpus_signature": "c"}


def test_grounding_and_offline_plugin_yardsticks_are_comparable():
    """HOLE 5. ``grounding:v1+…`` and a plugin's ``toy_length:v1+60`` were "no single grader":
    never compared, so a regression of those grades passed."""
    import tests.toys.toy_grader as toy  # registers toy_length on its first import

    if "toy_length" not in GRADER_KINDS:  # imported and unregistered by an earlier test
        importlib.reload(toy)
    try:
        assert answer_comparable(_row("grounding", "grounding:v1+abc123+corpus")) [0]
        assert answer_comparable(_row("toy_length", "toy_length:v1+60"))[0]
        # another grader's yardstick, or an unregistered grader's, is still never compared
        assert not answer_comparable(_row("toy_length", "grounding:v1+abc"))[0]
        assert not answer_comparable(_row("nobody", "nobody:v1"))[0]
    finally:
        GRADER_KINDS.unregister("toy_length")


def test_a_token_spending_plugin_grader_needs_a_single_grading_model():
    """HOLE 5. A grader that calls a model is compared only under ``<name>:<provider>:<model>:v<N>``."""
    name = f"toy_llm_{uuid.uuid4().hex[:6]}"
    GRADER_KINDS.register(GraderKind(name, needs=frozenset({"llm"}), grade_all=lambda todo, context: ({}, {})))
    try:
        assert answer_comparable(_row(name, f"{name}:openai:gpt-4o:v2"))[0]
        assert answer_comparable(_row(name, f"{name}:openai:gpt-4o:v2@t0.0"))[0]
        for bad in (f"{name}:v2", f"{name}", f"{name}:failed", f"{name}:openai:v2", f"{name}::gpt:v2"):
            assert not answer_comparable(_row(name, bad))[0], bad
    finally:
        GRADER_KINDS.unregister(name)
    # the built-in model graders keep their rule
    assert answer_comparable(_row("judge", "judge:openai:gpt-4o:v3"))[0]
    assert not answer_comparable(_row("judge", "judge"))[0]
    assert answer_comparable(_row("deterministic", "deterministic:v1+abc"))[0]


# --- hole 6: a history that cannot be read ---------------------------------------------------


def test_a_history_that_cannot_be_read_fails_closed():
    """HOLE 6. The history's database refused the connection: the verdict must not pass (nor
    call it a first run), it is ``not_compared`` with the reason."""
    from eval_pipeline.metrics.retrieval import score_queries
    from eval_pipeline.verdict.retrieval import judge_run

    qrels = {f"q{i}": {f"d{i}": 1} for i in range(5)}
    frame = score_queries({q: [next(iter(g))] for q, g in qrels.items()}, qrels, errored=[])
    frame.insert(0, "variant", "A")
    frame["doc_ids"] = [[d] for d in frame["qid"]]
    frame["latency_ms"] = 1.0
    frame["miss_class"] = None
    provenance = {"corpus_signature": "c", "question_set_fingerprint": "q", "labels_fingerprint": "l",
                  "benchmark_fingerprint": "b", "embedder": "e", "embedder_revision": "r", "chunking": {},
                  "code_version": "x", "engine_identity": "E", "variants": {"A": {"engine": "pg-dense"}}}
    verdict = judge_run({"A": frame}, baseline="A", provenance=provenance, tolerances={"hit@1": 0.05},
                        strict=False, run_id="r1", limited=False, record=False,
                        connection_string="postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    gate = verdict.gates["A"]
    assert (gate.state, gate.passed) == ("not_compared", False)
    assert "history could not be read" in gate.message
    assert not verdict.passed and not verdict.eligible
    assert isinstance(verdict.summary, pd.DataFrame)


def test_the_scoring_protocol_covers_every_built_in_measure_module(monkeypatch):
    """HOLE 3 (built-in side). The selective measures (refusal rates, risk-coverage: gated
    metrics) live in eval_pipeline/metrics/selective.py, which the scoring protocol did not
    hash: their code changed under the same benchmark identity."""
    from eval_pipeline.history import identity
    from eval_pipeline.metrics.retrieval import BUILTIN_MEASURE_MODULES

    seen: list[tuple[str, ...]] = []
    real = identity.source_digest

    def spy(*paths: str) -> str:
        seen.append(paths)
        return real(*paths)

    monkeypatch.setattr(identity, "source_digest", spy)
    identity.scoring_protocol("v1")
    files = {p for paths in seen for p in paths}
    for module in BUILTIN_MEASURE_MODULES:
        assert module.replace(".", "/") + ".py" in files
