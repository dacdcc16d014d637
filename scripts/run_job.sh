#!/usr/bin/env bash
# Run one job of the project as `dagster job execute -m definitions -j <job> [options]` does, with
# its output streamed, then print the verdict's summary table again at the end and exit with
# the verdict's code (documented in the README, "Exit codes"):
#   0  every gate passed (or the job decides no verdict and succeeded)
#   1  a gate failed: a regression, or a variant that could not be compared
#   2  the run broke before a verdict (a bad setting, a crashed step): nothing was decided
# `dagster job execute` itself exits 1 for both of the last two; the verdict asset's log line
# `eval-pipeline verdict: PASSED|FAILED (...)` tells them apart.
# The console shows Dagster's events at EVAL_PIPELINE_LOG_LEVEL (default INFO: the run's own lines,
# warnings, errors and the verdict's summary, a few dozen lines; DEBUG adds Dagster's event lines,
# over 300 on the demo), through a run config file of `loggers:` given before the caller's own
# (a caller's `loggers:` wins). `dagster job execute` alone logs at DEBUG. The UI keeps every event.
# Usage: scripts/run_job.sh <job> [dagster job execute options, e.g. -c run_config.yaml]
# DAGSTER names the dagster command (default: the one on PATH).
set -uo pipefail
job=${1:?usage: scripts/run_job.sh <job> [dagster job execute options]}
shift
level=$(echo "${EVAL_PIPELINE_LOG_LEVEL:-INFO}" | tr '[:lower:]' '[:upper:]' | tr -d '[:space:]')
case "$level" in
    DEBUG|INFO|WARNING|ERROR|CRITICAL) ;;
    *) echo "eval-pipeline: EVAL_PIPELINE_LOG_LEVEL='${EVAL_PIPELINE_LOG_LEVEL}' is not a log level; use one of" \
            "DEBUG, INFO, WARNING, ERROR, CRITICAL" >&2
       exit 2 ;;
esac
log=$(mktemp "${TMPDIR:-/tmp}/eval-pipeline-run.XXXXXX")
loggers=$(mktemp "${TMPDIR:-/tmp}/eval-pipeline-loggers.XXXXXX")
trap 'rm -f "$log" "$loggers"' EXIT
printf 'loggers:\n  console:\n    config:\n      log_level: %s\n' "$level" > "$loggers"
"${DAGSTER:-dagster}" job execute -m definitions -j "$job" -c "$loggers" "$@" 2>&1 | tee "$log"
code=${PIPESTATUS[0]}
# The last summary block: from its first line (`eval-pipeline: N variant(s), run ...`, after the
# log line's prefix) to its `exit codes:` line.
summary=$(awk '/eval-pipeline: [0-9]+ variant\(s\), run /{block=""; on=1; sub(/.*eval-pipeline: /, "eval-pipeline: ")}
               on{block=block $0 "\n"} /^exit codes: /{on=0} END{printf "%s", block}' "$log")
verdict=$(grep -o 'eval-pipeline verdict: [A-Z]*' "$log" | tail -n 1 | awk '{print $3}')
if [ -n "$summary" ]; then
    printf '\n%s\n' "$summary"
fi
if [ "$code" -eq 0 ]; then
    [ "$verdict" = "FAILED" ] && exit 1  # never: a failed gate fails the run; kept as a guard
    exit 0
fi
if [ "$verdict" = "FAILED" ]; then
    exit 1
fi
echo "eval-pipeline: the run broke before a verdict (dagster exit code $code): see the errors above" >&2
exit 2
