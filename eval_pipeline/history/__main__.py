"""The history's command line: ``python -m eval_pipeline.history runs`` lists the latest runs
with their eligibility; ``python -m eval_pipeline.history accept RUN_ID`` (or ``latest``) pins a run as the
reference of its variants, retrieval and answers alike (the Dagster job ``accept_reference``
does the same from the UI).
"""

from __future__ import annotations

import argparse
import sys

from eval_pipeline.common.state import default_state_dir
from eval_pipeline.history.answers import RunAcceptance, accept_run
from eval_pipeline.history.runs import (
    LATEST,
    NameTheRun,
    gate_in_force,
    recent_runs,
    resolve_run_id,
    table_names,
)
from eval_pipeline.store.database import (
    DATABASE_KIND_ENV,
    DATABASE_URL_ENV,
    CommandLineParser,
    DatabaseError,
    command_line_database_url,
)


def main(argv: list[str] | None = None) -> int:
    """`runs`: the latest runs with their eligibility; `accept RUN_ID`: pin a run as the
    reference of its variants (the Dagster job `accept_reference` does the same from the UI)."""
    parser = CommandLineParser(prog="python -m eval_pipeline.history", description=main.__doc__)
    parser.add_argument("--state-dir", default=str(default_state_dir()),
                        help="the embedded database's state dir (default: $EVAL_PIPELINE_STATE_DIR, else the "
                        "checkout's .eval_state)")
    parser.add_argument("--database", default="eval", help="the database on that server (default: eval, the jobs')")
    parser.add_argument("--url-env", default=None, help="read the database URL from this environment variable "
                        f"(default: {DATABASE_URL_ENV} when {DATABASE_KIND_ENV}=external, as the jobs; else the "
                        "embedded server)")
    parser.add_argument("--prefix", default="eval", help="the history tables' prefix (default: eval, the jobs')")
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs", help="list the latest runs")
    runs.add_argument("--limit", type=_count, default=20, help="how many of the latest runs (default 20)")
    accept = sub.add_parser("accept", help="accept a run as the pinned reference of its variants")
    accept.add_argument("run_id", help=f"the run to accept, or '{LATEST}' for the newest recorded run (not with "
                        "--variant: a variant is accepted by name with its run's id)")
    accept.add_argument("--variant", action="append", dest="variants",
                        help="only this variant (repeatable); a variant that failed its gate against a comparable "
                        "yardstick (a measured regression) is accepted only when named")
    accept.add_argument("--answers-only", action="store_true",
                        help="accept only the answer rows (what a failed answer gate offers): the variants' "
                        "retrieval reference stays where it is")
    accept.add_argument("--note", default="", help="why it was accepted (kept with the reference)")
    accept.add_argument("--by", default=None, help="who accepts (default: $USER)")
    args = parser.parse_args(argv)
    try:  # a refusal (a bad run id, a history only its owner can repair first) is an error line, not a traceback
        connection_string = command_line_database_url(args.url_env, args.state_dir, args.database)
        if args.command == "runs":
            return _runs(args, connection_string)
        run_id, accepted = _accept(args, connection_string)
    except NameTheRun as exc:  # the command it names, for the history this command line was given
        told = exc.told(_history_options(args, parser), answers_only=getattr(args, "answers_only", False))
        print(f"error: {told}", file=sys.stderr)
        return 2
    except (ValueError, DatabaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the acceptance is committed: what follows only reports. A whole acceptance that pinned no retrieval (a
    # run that ranked nothing) took none of its settings either
    read, line = gate_in_force(connection_string, run_id, prefix=args.prefix, answers_only=not accepted.retrieval)
    print(line if read else f"warning: {line}", file=sys.stdout if read else sys.stderr)
    return 0


def _history_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """This command line's options that chose the history (those not at their defaults), to repeat
    in a command it prints: without them the command reads another history, or none. With a
    URL's variable, the state dir and database are not read (`command_line_database_url`)."""
    chose = ("url_env", "prefix") if args.url_env else ("state_dir", "database", "prefix")
    return [part for name in chose if getattr(args, name) != parser.get_default(name)
            for part in (f"--{name.replace('_', '-')}", getattr(args, name))]


def _count(text: str) -> int:
    """A positive whole number for ``--limit`` (the database refuses a negative LIMIT with a traceback)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of runs, 1 or more, got {text!r}")
    return value


def _runs(args: argparse.Namespace, connection_string: str) -> int:
    listed = recent_runs(connection_string, limit=args.limit, prefix=args.prefix)
    if not listed:  # an empty history and a mistyped --prefix look alike: say which table it read
        print(f"no run recorded in {table_names(args.prefix)['runs']} (--prefix {args.prefix})", file=sys.stderr)
    for r in listed:
        flags = ["limited"] if r["limited"] else []
        flags += ["eligible" if r["eligible"] else "not eligible"]
        if r["gate_failed"]:
            flags.append(f"gate failed: {', '.join(r['gate_failed'])}")
        if r["accepted"]:
            flags.append(f"accepted: {', '.join(r['accepted'])}")
        print(f"{r['run_id']}  {r['created_at']:%Y-%m-%d %H:%M:%S}  {'; '.join(flags)}")
    return 0


def _accept(args: argparse.Namespace, connection_string: str) -> tuple[str, RunAcceptance]:
    """Accept the run (all of what it prints, in one transaction, or nothing); its id and what was accepted."""
    run_id = resolve_run_id(connection_string, args.run_id, prefix=args.prefix, naming=args.variants)
    if run_id != args.run_id:
        print(f"{LATEST}: the newest recorded run, {run_id}")
    accepted = accept_run(connection_string, run_id, variants=args.variants, note=args.note, accepted_by=args.by,
                          prefix=args.prefix, answers_only=args.answers_only)
    print("\n".join(accepted.summary(run_id)))
    for reason in accepted.refused:
        print(f"answers not accepted: {reason}")
    return run_id, accepted


if __name__ == "__main__":
    raise SystemExit(main())
