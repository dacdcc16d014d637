#!/usr/bin/env bash
# Run one job of the project as `dagster job execute -m definitions -j <job> [options]` does, with
# its output streamed, then print the verdict's summary table again at the end and exit with
# the verdict's code (documented in the README, "Exit codes"):
#   0  every gate passed (or the job decides no verdict and succeeded)
#   1  a gate failed: a regression, or a variant that could not be compared
#   2  the run broke before a verdict (a bad setting, a crashed step): nothing was decided
# `dagster job execute` itself exits 1 for both of the last two; the verdict asset's log line
# `eval-pipeline verdict: PASSED|FAILED (...)` tells them apart.
# Usage: scripts/run_job.sh <job> [dagster job execute options, e.g. -c run_config.yaml]
# DAGSTER names the dagster command (default: the one on PATH).
set -uo pipefail
job=${1:?usage: scripts/run_job.sh <job> [dagster job execute options]}
shift
log=$(mktemp "${TMPDIR:-/tmp}/eval-pipeline-run.XXXXXX")
trap 'rm -f "$log"' EXIT
"${DAGSTER:-dagster}" job execute -m definitions -j "$job" "$@" 2>&1 | tee "$log"
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
