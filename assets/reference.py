"""The `accept_reference` job: pin a recorded run as the reference its variants are gated
against, retrieval and answers, from the Launchpad (the same as
`python -m eval_pipeline.history accept RUN_ID`).

After a deliberate trade-off (say, a little nDCG for half the latency) the gate fails until
the team accepts the new numbers; accepting makes that run the pinned reference and the
previous run of the next one.

The Launchpad opens with the job's own config, `run_id: latest` and a `note`, and nothing else:
without it Dagster fills in every resource default the op reaches (the database's container
image, the state directory's path), none of which an acceptance sets. `latest` is the newest
recorded run (the first line of `python -m eval_pipeline.history runs`); the run's page and the
step's log name the run it took. Accepting it is refused, as for any run id, when one of its
variants failed against a comparable yardstick, unless `variants` names it; and `variants` is
taken with a run id only, never with `latest` (the Launchpad reopens with the config last
launched: a `variants` kept beside `latest` would accept the next run's regression unseen)."""

from typing import Optional

from dagster import Config, Failure, OpExecutionContext, job, op
from pydantic import Field

from assets.metadata import to_metadata
from eval_pipeline.history.answers import accept_run
from eval_pipeline.history.runs import LATEST, NameTheRun, gate_in_force, launchpad_accept, resolve_run_id
from eval_pipeline.store.database import DatabaseError
from resources import DatabaseResource


class AcceptConfig(Config):
    run_id: str = Field(description=f"the run to accept: its Dagster run id, as recorded in eval_runs, or '{LATEST}' "
                                    "for the newest recorded run")
    variants: Optional[list[str]] = Field(default=None, description="only these variants (default: all of the run's; "
                                          "a variant that failed against a comparable yardstick must be named)")
    answers_only: bool = Field(default=False, description="accept only the answer rows (what a failed answer gate "
                               "offers): the variants' retrieval reference stays where it is")
    note: str = Field(default="", description="why it was accepted; kept with the reference")
    accepted_by: str = Field(default="", description="who accepts (default: the launching user's name, or $USER)")


@op
def accept_reference_run(context: OpExecutionContext, config: AcceptConfig, database: DatabaseResource) -> list:
    """Refuses a limited run or variants with errored questions or reranker fallbacks, naming
    why, and, unless `variants` names them, variants that failed their gate against a comparable
    yardstick (a measured regression is accepted only deliberately, by name); records who
    accepted, when and why (eval_references)."""
    who = config.accepted_by or context.run.tags.get("dagster/user") or None
    connection_string = database.connection_string()
    try:
        run_id = resolve_run_id(connection_string, config.run_id, naming=config.variants)
        asked_for = config.run_id if run_id == config.run_id else f"{LATEST}: the newest recorded run, {run_id}"
        context.log.info(f"accepting run {run_id}" + (f" ({asked_for})" if run_id != config.run_id else ""))
        accepted = accept_run(connection_string, run_id, variants=config.variants, note=config.note,
                              accepted_by=who, answers_only=config.answers_only)
    except NameTheRun as exc:  # refused until named: say it in the Launchpad's words too
        launchpad = launchpad_accept(exc.run_id, exc.variants, answers_only=config.answers_only)
        raise Failure(description=f"{exc.told(answers_only=config.answers_only)}; from the Launchpad: "
                                  f"{launchpad}") from None
    except (ValueError, DatabaseError) as exc:  # refused, or not written at all (one transaction)
        raise Failure(description=str(exc)) from None
    context.log.info("; ".join(accepted.summary(run_id)))
    for reason in accepted.refused:
        context.log.warning(f"answers not accepted: {reason}")
    read, line = gate_in_force(connection_string, run_id, answers_only=not accepted.retrieval)  # as the CLI's
    (context.log.info if read else context.log.warning)(line)
    context.add_output_metadata(to_metadata(accepted.metadata(run_id, asked_for)))
    return accepted.retrieval or []


@job(name="accept_reference",
     description="Accept a recorded run (run_id: latest, the newest) as the pinned reference of its variants "
                 "(see README: the gate).",
     config={"ops": {"accept_reference_run": {"config": {"run_id": LATEST, "note": ""}}}})
def accept_reference_job():
    accept_reference_run()
