"""Attacks on accepting a run by name (94ce5d1, 99e3ec8): ``latest`` beside named variants is
refused (``resolve_run_id(..., naming=...)``, ``NameTheRun``), in the command line and the
``accept_reference`` job; a failed gate check's metadata carries ``accept`` (the Launchpad's config
and the command naming the run) and every gate check ``decided_by``.

Holes (each a strict xfail as found, most severe first, each with a passing control). Fixed since,
their tests plain: 1 (`acceptable_failures` leaves out what `retrieval_to_accept` refuses), 3, 6
and 7 (`launchpad_accept` is one YAML flow mapping of JSON strings), 4 (the command line's refusal
repeats its own history options); 2 is answered by words (`accept` says the report must have
recorded the run; before, its command is refused naming the run). Left, a strict xfail: 5.


1. ``accept`` OFFERED FOR A RUN NO ACCEPTANCE CAN TAKE: ``RunVerdict.acceptable_failures`` (the "one
   rule for what an acceptance can take") leaves out what ``runs.retrieval_to_accept`` refuses: a
   variant with reranker fallbacks, a variant with errored questions, and any variant of a run whose
   gate says another variant may be a vanished one renamed (such a run cannot be accepted at all).
   The failed check tells the user to launch / run an acceptance that is then refused.
2. ``accept`` OFFERED FOR A RUN NOT RECORDED: the gate checks read the verdict, recorded later by the
   report asset and only with ``record_history: true``; with ``record_history: false`` (or a report
   that failed) the offered command is refused ("no recorded run").
3. THE LAUNCHPAD CONFIG IS NOT YAML: ``launchpad_accept`` gives ``run_id: R, variants: ["a"]`` on one
   line; typed into the Launchpad (or a ``dagster job execute -c`` file) as given it is a YAML error
   ("mapping values are not allowed here"). ``{run_id: R, variants: ["a"]}`` would be one.
4. THE REFUSAL'S COMMAND DROPS ``--prefix``: ``accept latest --variant a`` under ``--prefix atk`` is
   refused naming ``python -m eval_pipeline.history accept r2 --variant a``, which reads the default
   ``eval`` history: refused there, or another history's run of that id accepted.
5. A RUN RECORDED AS ``latest`` (any case, padded) CANNOT BE ACCEPTED BY NAME: the check's ``accept``
   and the refusal both say ``accept latest --variant a``, which is refused again (a loop).
6. THE RUN ID IS NOT QUOTED IN THE LAUNCHPAD CONFIG: a run id YAML reads otherwise (" r1", "r1 #2",
   "no", "0123") names another run, or no string. Library-recorded ids only (the jobs' ids are UUIDs).
7. A NON-BMP VARIANT KEY: ``json.dumps`` writes it as a surrogate pair, which PyYAML (the ``-c`` path)
   reads as two lone surrogates, another name. Library-recorded variants only (variant keys are ASCII).

Held (plain tests): ``latest`` in any case, padded with ASCII or Unicode whitespace, with variants,
refused in the command line and the job (also from a YAML ``-c`` config), naming the newest run,
nothing written; look-alikes (fullwidth, Cyrillic, zero-width space) are run ids: not found, nothing
written; ``variants: []`` and ``--variant ''`` beside ``latest`` refused, nothing written; the library
entry points (``answers.accept_run``, ``runs.accept_reference``) take ``latest`` literally (not found);
the named run id accepts (control); the offered command and the JSON list round-trip pipeline keys with
``|``, ``+``, ``.``, ``@``, ``-``; a limited run and an unmeasured variant get no ``accept``; every gate
check carries ``decided_by``.
"""

from __future__ import annotations

import shlex
import uuid

import psycopg
import pytest
import yaml

from tests.history_schema import fresh_history_uri
from tests.unit.verdict import test_verdict_attacks_thirtyfifth as thirtyfifth

pytestmark = pytest.mark.integration

N = 40
URL_ENV = "ATK16_URL"


def _frame(variant: str, hits: int, *, errored: int = 0, fallback: int = 0):
    from tests.verdict_frames import scored_frame

    df = scored_frame(variant, hits, N)
    if errored:  # the last `errored` questions (misses) errored
        df.loc[df.index[-errored:], "errored"] = True
    if fallback:  # the reranker fell back on the first `fallback` questions
        df.loc[df.index[:fallback], "rerank_fallback"] = True
    return df


@pytest.fixture
def history(embedded_pg, tmp_path_factory):
    """A fresh database; `history(run_id, {variant: hits})` judges and records a run (as the verdict
    asset does, `judge_run`), returning its verdict."""
    from eval_pipeline.history.runs import SCORING_PROTOCOL
    from eval_pipeline.verdict.retrieval import judge_run

    uri = fresh_history_uri(embedded_pg, "atk16")  # a schema of its own (tests/history_schema.py)
    statistics = tmp_path_factory.getbasetemp() / "statistics_cache"  # one a session, as the asset's is its state dir's

    def record(run_id: str, hits: dict[str, int], *, prefix: str = "eval", frames: dict | None = None,
               sweep_keys=None, record: bool = True, limited: bool = False):
        provenance = {"corpus_signature": "corpus-1", "question_set_fingerprint": "qs-1", "labels_fingerprint": "l-1",
                      "benchmark_fingerprint": "bench-1", "embedder": "minilm", "embedder_revision": "rev-1",
                      "chunking": {"split_length": 150}, "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
                      "variants": {v: {"engine": "pg-dense", "knob": v} for v in hits}}
        per_variant = {v: (frames or {}).get(v, _frame(v, h)) for v, h in hits.items()}
        return judge_run(per_variant, baseline=next(iter(hits)), provenance=provenance,
                         tolerances={"hit@1": 0.05, "mrr": 0.05}, strict=False, run_id=run_id, limited=limited,
                         connection_string=uri, sweep_keys=sweep_keys or list(hits), history_prefix=prefix,
                         record=record, statistics_cache=statistics)

    record.uri = uri
    return record


def _cli(history, monkeypatch, *arguments: str, prefix: str | None = None) -> int:
    from eval_pipeline.history.__main__ import main

    monkeypatch.setenv(URL_ENV, history.uri)
    return main(["--url-env", URL_ENV, *(["--prefix", prefix] if prefix else []), *arguments])


def _job(history, **config):
    """The ``accept_reference`` job in-process against the history's database."""
    return thirtyfifth._job(history.uri, **config)


def _log(history, prefix: str = "eval") -> list[tuple[str, str, str]]:
    with psycopg.connect(history.uri, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (f"{prefix}_references",)).fetchone()[0]
        if exists is None:
            return []
        return conn.execute(f"SELECT run_id, variant, aspect FROM {prefix}_references ORDER BY seq").fetchall()


def _checks(verdict) -> dict[str, dict]:
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    return {k: m for k, (_, m) in variant_gate_checks(verdict_output(verdict), list(verdict.gates)).items()}


def _offered(verdict, variant: str) -> tuple[str, list[str]]:
    """The failed check's `accept`: (its Launchpad text, the command's arguments after the module)."""
    text = _checks(verdict)[variant]["accept"]
    launchpad = text.split(" launch accept_reference with ", 1)[1].split("; or: ", 1)[0]
    command = shlex.split(text.split("; or: ", 1)[1])
    assert command[:3] == ["python", "-m", "eval_pipeline.history"], command
    return launchpad, command[3:]


def _launchpad_config(launchpad: str) -> dict:
    """The Launchpad text as YAML reads it (one flow mapping since hole 3 was fixed)."""
    return yaml.safe_load(launchpad)


def _regressed(history, run_id: str = "r1", **frames):
    """r0: a 40/40, b 40/40; `run_id`: a 20/40 (a measured regression), b 40/40."""
    history("r0", {"a": 40, "b": 40})
    verdict = history(run_id, {"a": 20, "b": 40}, frames=frames or None)
    assert not verdict.gates["a"].passed and verdict.gates["b"].passed
    return verdict


# --------------------------------------------------------------------------------------------
# held: `latest` beside named variants, however spelled, and the entry points
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["latest", "Latest", "LATEST", " latest", "latest ", "\tlatest\n",
                                      "latest\u00a0", "\u2003LaTeSt\u3000"])
def test_held_latest_with_a_named_variant_is_refused_however_spelled_cli(history, monkeypatch, capsys, spelling):
    _regressed(history, "r1")
    history("r2", {"a": 10, "b": 40})  # a newer regression nobody looked at
    capsys.readouterr()
    assert _cli(history, monkeypatch, "accept", spelling, "--variant", "a") == 2
    err = capsys.readouterr().err
    assert "the newest recorded run is r2" in err and "accept r2 --variant a" in err, err
    assert _log(history) == []


@pytest.mark.parametrize("spelling", ["\uff4c\uff41\uff54\uff45\uff53\uff54", "l\u0430test", "latest\u200b",
                                      "\u200blatest", "lat\u0435st"])
def test_held_look_alikes_of_latest_are_run_ids_not_found(history, monkeypatch, capsys, spelling):
    _regressed(history, "r1")
    capsys.readouterr()
    assert _cli(history, monkeypatch, "accept", spelling, "--variant", "a") == 2
    assert "no recorded run" in capsys.readouterr().err
    assert _cli(history, monkeypatch, "accept", spelling) == 2
    assert _log(history) == []


def test_held_an_empty_variant_beside_latest_is_refused_cli(history, monkeypatch, capsys):
    _regressed(history, "r1")
    assert _cli(history, monkeypatch, "accept", "latest", "--variant", "") == 2
    assert _log(history) == []


@pytest.mark.parametrize("config_yaml", [
    "run_id: LATEST\nvariants: [a]",
    "run_id: ' latest '\nvariants: [a]",
    "run_id: \"Latest\\t\"\nvariants: [\"a\", \"b\"]",
    "run_id: latest\nvariants: []",  # an emptied list: not a whole acceptance either
    "run_id: latest\nvariants: ['']",
])
def test_held_the_job_refuses_latest_with_variants_from_a_yaml_config(history, config_yaml):
    """As `dagster job execute -c` reads it (PyYAML) and as the Launchpad sends it: the same op."""
    _regressed(history, "r1")
    result = _job(history, **yaml.safe_load(config_yaml))
    assert not result.success, result.text
    assert _log(history) == []


def test_held_the_job_s_refusal_names_the_newest_run_in_the_launchpad_s_words(history):
    _regressed(history, "r1")
    history("r2", {"a": 10, "b": 40})
    result = _job(history, run_id="latest", variants=["a"])
    assert not result.success
    assert 'from the Launchpad: {run_id: "r2", variants: ["a"]}' in result.text, result.text
    assert _log(history) == []


def test_held_the_library_entry_points_take_latest_literally(history):
    from eval_pipeline.history.answers import accept_run
    from eval_pipeline.history.runs import accept_reference

    _regressed(history, "r1")
    for spelling in ("latest", "LATEST"):
        with pytest.raises(ValueError, match="no recorded run"):
            accept_run(history.uri, spelling, variants=["a"])
        with pytest.raises(ValueError, match="no recorded run"):
            accept_reference(history.uri, spelling, variants=["a"])
    assert _log(history) == []


def test_held_control_the_run_named_by_its_id_accepts_the_regression(history, monkeypatch):
    verdict = _regressed(history, "r1")
    launchpad, command = _offered(verdict, "a")
    assert command == ["accept", "r1", "--variant", "a"]
    assert _cli(history, monkeypatch, *command) == 0
    assert _log(history) == [("r1", "a", "retrieval")]


def test_held_control_the_offered_launchpad_config_accepts_through_the_job(history):
    verdict = _regressed(history, "r1")
    launchpad, _ = _offered(verdict, "a")
    result = _job(history, **_launchpad_config(launchpad))
    assert result.success, result.text
    assert _log(history) == [("r1", "a", "retrieval")]


@pytest.mark.parametrize("key", ["idx|dense", "hy+mmr", "a.b@c-d", "0"])
def test_held_the_offered_forms_round_trip_a_pipeline_key(history, monkeypatch, key):
    history("r0", {key: 40})
    verdict = history("r1", {key: 20})
    launchpad, command = _offered(verdict, key)
    assert _launchpad_config(launchpad)["variants"] == [key]
    assert command == ["accept", "r1", "--variant", key]
    assert _cli(history, monkeypatch, *command) == 0
    assert _log(history) == [("r1", key, "retrieval")]


def test_held_no_accept_for_a_limited_run_or_an_unmeasured_variant_and_decided_by_everywhere(history):
    history("r0", {"a": 40, "b": 40})
    limited = history("r1", {"a": 20, "b": 40}, limited=True)
    assert not limited.gates["a"].passed
    assert "accept" not in _checks(limited)["a"]
    gone = history("r2", {"a": 40}, sweep_keys=["a", "b"])  # b in the file, not measured in this run
    assert not gone.gates["b"].passed and "b" in gone.unmeasured
    checks = _checks(gone)
    assert "accept" not in checks["b"]
    assert all("decided_by" in m for m in checks.values()), checks


# --------------------------------------------------------------------------------------------
# hole 1: `accept` offered for a run that no acceptance can take
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flaw", "refusal"), [({"fallback": 3}, "reranker fallbacks"),
                                               ({"errored": 2}, "errored questions")])
def test_accept_is_not_offered_for_a_variant_whose_numbers_are_not_its_configuration_s(
        history, monkeypatch, capsys, flaw, refusal):
    verdict = _regressed(history, "r1", a=_frame("a", 20, **flaw))
    offered = "accept" in _checks(verdict)["a"]
    if offered:  # what the user gets for following it
        capsys.readouterr()
        assert _cli(history, monkeypatch, *_offered(verdict, "a")[1]) == 2
        assert refusal in capsys.readouterr().err
        assert _log(history) == []
    assert not offered, _checks(verdict)["a"]["accept"]


def test_accept_is_not_offered_for_a_run_with_a_maybe_renamed_variant(history, monkeypatch, capsys):
    history("r0", {"a": 40, "b": 40})
    # b vanished from the variants file, c is new and was not measured: c may be b renamed
    verdict = history("r1", {"a": 20}, sweep_keys=["a", "c"])
    assert verdict.maybe_renamed and not verdict.gates["a"].passed, (verdict.maybe_renamed, verdict.gates)
    offered = "accept" in _checks(verdict)["a"]
    if offered:
        launchpad, command = _offered(verdict, "a")
        capsys.readouterr()
        assert _cli(history, monkeypatch, *command) == 2
        assert "renamed" in capsys.readouterr().err
        assert not _job(history, **_launchpad_config(launchpad)).success
        assert _log(history) == []
    assert not offered, _checks(verdict)["a"]["accept"]


def test_control_hole_1_the_same_regression_without_fallbacks_errors_or_renames_is_offered_and_accepted(
        history, monkeypatch):
    verdict = _regressed(history, "r1")
    assert "accept" in _checks(verdict)["a"]
    assert _cli(history, monkeypatch, *_offered(verdict, "a")[1]) == 0


# --------------------------------------------------------------------------------------------
# hole 2: offered for a run not recorded (record_history: false)
# --------------------------------------------------------------------------------------------


def test_accept_for_a_run_not_recorded_says_it_needs_the_record_and_its_command_refuses_clearly(
        history, monkeypatch, capsys):
    """Hole 2, answered by words: the verdict's checks come before the report records the run (and
    with record_history: false it never does), so `accept` says the run must be recorded first;
    followed before, its command is refused naming the run, and writes nothing."""
    history("r0", {"a": 40, "b": 40})
    verdict = history("r1", {"a": 20, "b": 40}, record=False)  # the report asset with record_history: false
    assert not verdict.gates["a"].passed
    assert "the report has recorded this run" in _checks(verdict)["a"]["accept"]
    capsys.readouterr()
    assert _cli(history, monkeypatch, *_offered(verdict, "a")[1]) == 2
    assert "no recorded run 'r1'" in capsys.readouterr().err
    assert _log(history) == []


# --------------------------------------------------------------------------------------------
# hole 3 / 6 / 7: the Launchpad config as given
# --------------------------------------------------------------------------------------------


def test_the_offered_launchpad_config_is_yaml_as_given(history):
    verdict = _regressed(history, "r1")
    launchpad, _ = _offered(verdict, "a")
    assert yaml.safe_load(launchpad) == {"run_id": "r1", "variants": ["a"]}


def test_control_hole_3_the_same_words_in_braces_are_yaml():
    assert yaml.safe_load('{run_id: r1, variants: ["a"]}') == {"run_id": "r1", "variants": ["a"]}


@pytest.mark.parametrize("run_id", [" r1", "r1 #2", "no", "0123"])
def test_the_launchpad_config_keeps_a_library_run_id(run_id):
    from eval_pipeline.history.runs import launchpad_accept

    text = launchpad_accept(run_id, ["a"])
    assert yaml.safe_load(text) == {"run_id": run_id, "variants": ["a"]}, text


def test_control_hole_6_a_dagster_run_id_is_kept():
    from eval_pipeline.history.runs import launchpad_accept

    run_id = str(uuid.uuid4())
    assert yaml.safe_load(launchpad_accept(run_id, ["a"]))["run_id"] == run_id


def test_the_launchpad_config_keeps_a_non_bmp_variant():
    from eval_pipeline.history.runs import launchpad_accept

    assert yaml.safe_load(launchpad_accept("r1", ["\U0001f600"]))["variants"] == ["\U0001f600"]


def test_control_hole_7_bmp_quotes_and_backslashes_round_trip():
    from eval_pipeline.history.runs import launchpad_accept

    keys = ["caf\u00e9", 'q"t', "b\\s", "sp ace", "x|y+z"]
    assert yaml.safe_load(launchpad_accept("r1", keys))["variants"] == keys


# --------------------------------------------------------------------------------------------
# hole 4: the refusal's command drops --prefix
# --------------------------------------------------------------------------------------------


def test_the_refusal_s_command_under_a_prefix_works_as_printed(history, monkeypatch, capsys):
    history("r0", {"a": 40}, prefix="atk")
    history("r2", {"a": 20}, prefix="atk")
    capsys.readouterr()
    assert _cli(history, monkeypatch, "accept", "latest", "--variant", "a", prefix="atk") == 2
    err = capsys.readouterr().err
    printed = shlex.split(err.rsplit("the newest recorded run is r2: ", 1)[1].strip())
    assert printed[:3] == ["python", "-m", "eval_pipeline.history"], printed
    code = _cli(history, monkeypatch, *printed[3:])  # as printed: no --prefix
    assert code == 0, capsys.readouterr().err
    assert _log(history, "atk") == [("r2", "a", "retrieval")]


def test_control_hole_4_with_the_prefix_added_it_accepts(history, monkeypatch):
    history("r0", {"a": 40}, prefix="atk")
    history("r2", {"a": 20}, prefix="atk")
    assert _cli(history, monkeypatch, "accept", "r2", "--variant", "a", prefix="atk") == 0
    assert _log(history, "atk") == [("r2", "a", "retrieval")]


# --------------------------------------------------------------------------------------------
# hole 5: a run recorded as `latest`
# --------------------------------------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="hole 5: a run recorded as 'latest' cannot be accepted by name: the check's "
                   "accept and the refusal both say `accept latest --variant a`, refused again")
@pytest.mark.parametrize("run_id", ["latest", "Latest "])
def test_a_run_recorded_as_latest_can_be_accepted_as_offered(history, monkeypatch, capsys, run_id):
    verdict = _regressed(history, run_id)
    launchpad, command = _offered(verdict, "a")
    capsys.readouterr()
    code = _cli(history, monkeypatch, *command)
    err = capsys.readouterr().err
    assert code == 0, err  # exits 2: "'latest' is not accepted with variants named ... accept latest --variant a"
    assert _log(history) == [(run_id, "a", "retrieval")]


def test_control_hole_5_a_run_recorded_as_latest_is_accepted_through_the_library(history):
    from eval_pipeline.history.answers import accept_run

    _regressed(history, "latest")
    assert accept_run(history.uri, "latest", variants=["a"]).retrieval == ["a"]
    assert _log(history) == [("latest", "a", "retrieval")]
