#!/usr/bin/env bash
# make mutation: gremlins over lease, worker and scenarios/oracle, then
# `doublerun mutation gate` on its reports. CI runs exactly this.
#
#   mutation/run.sh [gate flags...]      e.g. mutation/run.sh --write-baseline
#
# Environment:
#   MUTATION_PACKAGES      packages to mutate (default "lease worker scenarios/oracle")
#   MUTATION_SHARED        of those, the ones whose tests run against one
#                          shared stack (default: all of them when a
#                          pgbouncer binary is installed, else none). The
#                          others' tests start a stack per mutant with
#                          DOUBLERUN_PROVIDER. Tests that add a PgBouncer of
#                          their own run it as a local process in front of
#                          the shared Postgres, hence the binary.
#   MUTATION_OUT           where the gremlins reports go (default out/mutation)
#   MUTATION_MIN_EFFICACY  gate threshold per package, percent (default 0)
#   MUTATION_MIN_COVERAGE  gate threshold per package, percent (default 0)
#   DOUBLERUN_PROVIDER     which provider starts the stacks (default auto)
#   DOUBLERUN_BIN          a doublerun binary to use instead of building one
#
# A shared package's mutants reach the one stack through the external
# provider's variables instead of starting servers of their own. On exit,
# Ctrl-C included, the stack is stopped and the temp dir, which also holds
# gremlins' copies of the module, is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
begin=$(date +%s)
packages=${MUTATION_PACKAGES:-lease worker scenarios/oracle}
if [ -z "${MUTATION_SHARED+set}" ]; then
  # The search order of the stack's findPgBouncer.
  if [ -x "${DOUBLERUN_PGBOUNCER_BIN:-}" ] || command -v pgbouncer >/dev/null ||
    [ -x /usr/sbin/pgbouncer ] || [ -x /usr/local/sbin/pgbouncer ]; then
    MUTATION_SHARED=$packages
  else
    echo "mutation: no pgbouncer binary, so every test run starts a stack of its own (slower); apt-get install pgbouncer to share one" >&2
    MUTATION_SHARED=
  fi
fi
shared=" $MUTATION_SHARED "
out=${MUTATION_OUT:-out/mutation}
mkdir -p "$out"
out=$(cd "$out" && pwd) # gremlins changes directory before it writes --output

# Binaries, the stack's output and gremlins' work dirs live outside the
# repository: gremlins copies the whole module root, untracked files
# included. The native provider's servers run as the postgres user and
# must be able to reach their dirs under it.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/doublerun-mutation-XXXXXX")
chmod 755 "$tmp"
stack_pid=
cleanup() {
  if [ -n "$stack_pid" ] && kill -0 "$stack_pid" 2>/dev/null; then
    kill -INT "$stack_pid" 2>/dev/null || true
    wait "$stack_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ -n "${DOUBLERUN_BIN:-}" ]; then
  cp "$DOUBLERUN_BIN" "$tmp/doublerun"
else
  go build -o "$tmp/doublerun" ./cmd/doublerun
fi
# Run gremlins directly, not through `go tool`: the go command relays
# signals to the tool, so Ctrl-C would reach gremlins v0.6.0 twice, and
# its handler panics on the second one (send on closed channel), leaving
# its work dir behind.
go build -o "$tmp/gremlins" github.com/go-gremlins/gremlins/cmd/gremlins

need_stack=
for pkg in $packages; do
  case $shared in *" $pkg "*) need_stack=1 ;; esac
done
if [ -n "$need_stack" ]; then
  "$tmp/doublerun" stack up >"$tmp/stack.env" 2>"$tmp/stack.log" &
  stack_pid=$!
  # stack up logs "stack up" after it has printed every export line.
  for _ in $(seq 600); do
    grep -q 'msg="stack up"' "$tmp/stack.log" && break
    if ! kill -0 "$stack_pid" 2>/dev/null; then
      echo "mutation: doublerun stack up failed:" >&2
      cat "$tmp/stack.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  grep -q 'msg="stack up"' "$tmp/stack.log" || { echo "mutation: stack not up after 5 minutes" >&2; cat "$tmp/stack.log" >&2; exit 1; }
  echo "mutation: shared stack up ($(grep -o 'provider=[a-z]*' "$tmp/stack.log" | head -1))"
fi

# A cached coverage run makes every mutant time out (gremlins issue #267).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1"

# gremlins PKG REPORT
gremlins() {
  TMPDIR="$tmp" "$tmp/gremlins" unleash --config "$root/.gremlins.yaml" --output "$2" "$root/$1"
}

reports=()
for pkg in $packages; do
  report=$out/${pkg//\//-}.json
  # gremlins writes no report when interrupted; never gate a stale one.
  rm -f "$report"
  start=$(date +%s)
  case $shared in
    *" $pkg "*)
      echo "mutation: gremlins on ./$pkg, tests on the shared stack"
      # shellcheck disable=SC1091
      (. "$tmp/stack.env" && gremlins "$pkg" "$report")
      ;;
    *)
      echo "mutation: gremlins on ./$pkg, a stack per test run (DOUBLERUN_PROVIDER=${DOUBLERUN_PROVIDER:-auto})"
      gremlins "$pkg" "$report"
      ;;
  esac
  # Interrupted, gremlins exits 0 without a report (and bash, seeing its
  # child handle SIGINT, carries on): stop rather than start the next one.
  if [ ! -f "$report" ]; then
    echo "mutation: gremlins wrote no report for ./$pkg (interrupted, or no mutants found)" >&2
    exit 1
  fi
  echo "mutation: ./$pkg done in $(( $(date +%s) - start ))s"
  reports+=(--report "$pkg=$report")
done

status=0
"$tmp/doublerun" mutation gate "${reports[@]}" \
  --baseline testdata/mutation/baseline.json \
  --min-efficacy "${MUTATION_MIN_EFFICACY:-0}" \
  --min-coverage "${MUTATION_MIN_COVERAGE:-0}" "$@" || status=$?
echo "mutation: done in $(( $(date +%s) - begin ))s; reports in $out"
exit $status
