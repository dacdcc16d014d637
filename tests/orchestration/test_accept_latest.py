"""The `accept_reference` job as the Launchpad offers it (issue #28, item 10): it opens with
`run_id: latest` and a `note`, nothing else (no container image, no state path from the
resources' defaults), and `latest` accepts the newest recorded run, naming which one it took. A
measured regression is still refused unless its variant is named."""

import uuid

import pytest

from assets.reference import LATEST, accept_reference_job

DEFAULT = {"ops": {"accept_reference_run": {"config": {"run_id": LATEST, "note": ""}}}}


def test_the_launchpad_opens_with_the_run_to_accept_and_a_note_only():
    assert accept_reference_job.run_config == DEFAULT


def test_the_code_location_s_job_keeps_that_default():
    import definitions

    job = definitions.defs.get_repository_def().get_job("accept_reference")
    assert job.run_config == DEFAULT


# --- against a real history (embedded Postgres) -------------------------------------------------

N = 40


def _frame(variant: str, hits: int):
    from tests.verdict_frames import scored_frame

    return scored_frame(variant, hits, N)


@pytest.fixture
def history(embedded_pg):
    """A fresh database whose history (the default `eval` tables the job reads) gets runs by
    `record(run_id, hits_per_variant)`; the job runs against it as the `database` resource."""
    from eval_pipeline.history.runs import SCORING_PROTOCOL
    from eval_pipeline.verdict.retrieval import judge_run
    from resources import DatabaseResource, StateResource

    uri = embedded_pg.uri(f"accept_latest_{uuid.uuid4().hex[:10]}")

    def record(run_id: str, hits: dict[str, int]):
        provenance = {"corpus_signature": "corpus-1", "question_set_fingerprint": "qs-1", "labels_fingerprint": "l-1",
                      "benchmark_fingerprint": "bench-1", "embedder": "minilm", "embedder_revision": "rev-1",
                      "chunking": {"split_length": 150}, "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
                      "variants": {v: {"engine": "pg-dense", "knob": v} for v in hits}}
        return judge_run({v: _frame(v, h) for v, h in hits.items()}, baseline=next(iter(hits)), provenance=provenance,
                         tolerances={"hit@1": 0.05, "mrr": 0.05}, strict=False, run_id=run_id, limited=False,
                         connection_string=uri, sweep_keys=list(hits))

    def accept(**config):
        from dagster import DagsterInstance

        run_config = {"ops": {"accept_reference_run": {"config": config}}} if config else None
        instance = DagsterInstance.ephemeral()
        database = DatabaseResource(kind="external", url=uri, state=StateResource())
        result = accept_reference_job.execute_in_process(run_config=run_config, resources={"database": database},
                                                         raise_on_error=False, instance=instance)
        result.log_lines = [e.user_message for e in instance.all_logs(result.run_id)]
        return result

    record.uri, record.accept = uri, accept
    return record


def _pinned(uri: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(uri) as conn:
        rows = conn.execute("SELECT variant, run_id FROM eval_references WHERE aspect = 'retrieval' "
                            "ORDER BY accepted_at, variant").fetchall()
    return dict(rows)


def _outcome(result):
    (materialization,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return materialization.step_output_data.metadata


def _failure(result) -> str:
    """The message of the run's one step failure."""
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failure.step_failure_data.error.message


@pytest.mark.integration
def test_latest_accepts_the_newest_recorded_run_and_names_it(history):
    history("r0", {"a": 40, "b": 40})
    assert history("r1", {"a": 40, "b": 38}).gate_passed  # inside the tolerance
    result = history.accept()  # the Launchpad's default: run_id latest
    assert result.success
    assert _pinned(history.uri) == {"a": "r1", "b": "r1"}
    metadata = _outcome(result)
    assert metadata["run_id"].value == "r1"  # a link to the run it took
    assert metadata["asked for"].value == "latest: the newest recorded run, r1"
    assert "accepting run r1 (latest: the newest recorded run, r1)" in result.log_lines, result.log_lines


@pytest.mark.integration
def test_latest_refuses_a_measured_regression_unless_its_variant_is_named(history):
    history("r0", {"a": 40, "b": 40})
    regressed = history("r1", {"a": 20, "b": 40})
    assert not regressed.gates["a"].passed and regressed.gates["b"].passed
    refused = history.accept()
    assert not refused.success
    message = _failure(refused)
    assert "r1" in message and "--variant a" in message, message
    # the Launchpad's own words for it, the run named by its id
    assert 'from the Launchpad: {run_id: "r1", variants: ["a"]}' in message, message
    assert _pinned(history.uri) == {}  # nothing accepted

    accepted = history.accept(run_id="r1", variants=["a"], note="a deliberate trade-off")
    assert accepted.success
    assert _pinned(history.uri) == {"a": "r1"}


@pytest.mark.integration
def test_latest_with_named_variants_is_refused_naming_the_newest_run(history):
    """Dagster's Launchpad reopens with the config last launched: `run_id: latest` beside a
    `variants: [a]` typed for one regression would accept the next run's regression of `a`
    unseen. Naming a variant (how a measured regression is accepted) needs the run's id."""
    history("r0", {"a": 40, "b": 40})
    history("r1", {"a": 20, "b": 40})
    history("r2", {"a": 10, "b": 40})  # a newer regression of `a` nobody has looked at
    refused = history.accept(run_id="latest", variants=["a"], note="depth 1 is intended")
    assert not refused.success
    message = _failure(refused)
    assert "'latest'" in message and "--variant a" in message, message
    assert 'from the Launchpad: {run_id: "r2", variants: ["a"]}' in message, message
    assert _pinned(history.uri) == {}  # nothing accepted


@pytest.mark.integration
def test_a_run_id_is_still_taken_as_given(history):
    history("r0", {"a": 40})
    history("r1", {"a": 40})
    assert history.accept(run_id="r0").success
    assert _pinned(history.uri) == {"a": "r0"}
    assert _outcome(history.accept(run_id="r0"))["asked for"].value == "r0"


@pytest.mark.integration
def test_latest_with_no_recorded_run_says_so(history):
    result = history.accept()
    assert not result.success
    assert "no recorded run" in _failure(result)
