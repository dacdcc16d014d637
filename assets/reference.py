"""The `accept_reference` job: pin a recorded run as the reference its variants are gated
against, retrieval and answers, from the Launchpad (the same as
`python -m eval_pipeline.history accept RUN_ID`).

After a deliberate trade-off (say, a little nDCG for half the latency) the gate fails until
the team accepts the new numbers; accepting makes that run the pinned reference and the
previous run of the next one."""

from typing import Optional

from dagster import Config, OpExecutionContext, job, op
from pydantic import Field

from eval_pipeline.history.answers import accept_answer_run
from eval_pipeline.history.runs import accept_reference
from resources import DatabaseResource


class AcceptConfig(Config):
    run_id: str = Field(description="the run to accept (its Dagster run id, as recorded in eval_runs)")
    variants: Optional[list[str]] = Field(default=None, description="only these variants (default: all of the run's; "
                                          "a variant that failed against a comparable yardstick must be named)")
    note: str = Field(default="", description="why it was accepted; kept with the reference")
    accepted_by: str = Field(default="", description="who accepts (default: the launching user's name, or $USER)")


@op
def accept_reference_run(context: OpExecutionContext, config: AcceptConfig, database: DatabaseResource) -> list:
    """Refuses a limited run or variants with errored questions or reranker fallbacks, naming
    why, and, unless `variants` names them, variants that failed their gate against a comparable
    yardstick (a measured regression is accepted only deliberately, by name); records who
    accepted, when and why (eval_references)."""
    who = config.accepted_by or context.run.tags.get("dagster/user") or None
    accepted = accept_reference(database.connection_string(), config.run_id, variants=config.variants,
                                note=config.note, accepted_by=who)
    answers, refused = accept_answer_run(database.connection_string(), config.run_id, variants=config.variants,
                                         note=config.note, accepted_by=who)
    context.log.info(f"run {config.run_id} is now the pinned reference of: {', '.join(accepted)}; answers: "
                     f"{', '.join(f'{v} {g}' for v, g in answers) or 'none'}")
    for reason in refused:
        context.log.warning(f"answers not accepted: {reason}")
    context.add_output_metadata({"run_id": config.run_id, "variants": ", ".join(accepted),
                                 "answers": ", ".join(f"{v} {g}" for v, g in answers) or "none",
                                 "answers not accepted": "; ".join(refused) or "none"})
    return accepted


@job(name="accept_reference", description="Accept a recorded run as the pinned reference of its variants (see README: the gate).")
def accept_reference_job():
    accept_reference_run()
