#!/usr/bin/env bash
# Regenerates the gremlins v0.6.0 reports the gate's tests read, from a real
# run on the fixture's clamp package. Paths must be absolute: gremlins
# changes into the module root before it writes --output.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."   # the doublerun module, whose go.mod has the gremlins tool
export GOFLAGS=-count=1
go tool gremlins unleash --timeout-coefficient 10 --output "$here/clamp.json" "$here/../fixture/clamp"
go tool gremlins unleash --dry-run --output "$here/clamp-dry-run.json" "$here/../fixture/clamp"
# lease-dry-run.json is not regenerated here: it is the dry run
# `doublerun mutation ci` made of three mutants on one changed line of
# lease (a branch no test covered), kept as gremlins wrote it.
