#!/usr/bin/env bash
# Reproduce a known limitation in the etcd style: loop its Go test with
# -count N -failfast until it reproduces.
#
# Usage: chaos/run.sh repro NAME [COUNT]
#   NAME   556 | backend-loss | paused-holder   (see chaos/repro_test.go)
#   COUNT  how many runs at most; default 20 (REPRO_COUNT)
#
# Prints "Successful reproduction" and exits 0 when a run reproduced it,
# "Failed to reproduce" and exits 1 when none did, and exits 2 when the
# test could not run at all (no stack, a build error): such a failure is
# not a reproduction. Reports go to reports/repro-NAME.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ "${1:-}" = repro ] || usage
name=${2:-}
count=${3:-${REPRO_COUNT:-20}}
case "$name" in
  556) test=TestReproduceIssue556 ;;
  backend-loss) test=TestReproduceBackendLoss ;;
  paused-holder) test=TestReproducePausedHolder ;;
  *) echo "unknown limitation \"$name\"; valid: 556, backend-loss, paused-holder" >&2; exit 2 ;;
esac

log=$(mktemp)
trap 'rm -f "$log"' EXIT
DOUBLERUN_REPRO=1 DOUBLERUN_REPRO_OUT="$PWD/reports/repro-$name" \
  ${GO:-go} test ./chaos/ -run "^${test}\$" -count "$count" -failfast -v -timeout 60m 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

if grep -q "REPRODUCED:" "$log"; then
  echo "Successful reproduction"
  exit 0
elif [ "$status" -eq 0 ]; then
  echo "Failed to reproduce"
  exit 1
fi
echo "The reproduction could not run (go test exit $status); see the output above" >&2
exit 2
