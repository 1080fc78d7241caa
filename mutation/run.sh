#!/usr/bin/env bash
# make mutation: gremlins on every mutant of lease, worker and
# scenarios/oracle on one shared stack, each mutant compared with
# testdata/mutation/record.json's (equivalents.json excused); a pass on a clean
# working tree writes testdata/mutation/record.json, the base of the
# per-submission gate (make mutation-ci). It is `doublerun mutation full
# --write-record`; see `doublerun mutation --help`.
#
#   mutation/run.sh [flags of doublerun mutation full...]
#
# Environment:
#   MUTATION_PACKAGES  packages to mutate, space-separated (default: the three)
#   MUTATION_OUT       where the gremlins reports go (default out/mutation)
#   MUTATION_SHARD     K/N: only shard K of N of the lines (a nightly job);
#                      writes reports, gates nothing
#   DOUBLERUN_PROVIDER the shared stack's provider (default: native, else auto)
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ -n "${MUTATION_PACKAGES:-}" ]; then
  args+=(--packages "$(echo "$MUTATION_PACKAGES" | tr -s ' ' ',')")
fi
if [ -n "${MUTATION_OUT:-}" ]; then
  args+=(--out "$MUTATION_OUT")
fi
if [ -n "${MUTATION_SHARD:-}" ]; then
  args+=(--shard "$MUTATION_SHARD")
else
  args+=(--write-record)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/doublerun" ./cmd/doublerun
"$tmp/doublerun" mutation full "${args[@]}" "$@"
