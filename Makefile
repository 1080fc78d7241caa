# doublerun — see README.md. Every target honours DOUBLERUN_PROVIDER and the
# other DOUBLERUN_* variables described there.

GO       ?= go
PKGS     ?= ./...
# Packages whose tests are about the stack itself: make test-stack runs
# only these, for a quick check of a provider (DOUBLERUN_PROVIDER=...).
STACK_PKGS := ./scenarios/stack/... ./pgbouncer/... ./cmd/...
# -p 2: two test binaries at once. The tests are CPU-bound on a two-core
# machine: warm, with -p 4 and with -p 2 make test took the same 8 min, but
# with four binaries at once six tests failed by starvation (claims and
# logins running past a lease's trust or a login timeout) and with two one
# did. Each binary still runs its own tests two at a time (-parallel is
# GOMAXPROCS).
# -vet=off: make lint runs go vet on every package, tests included, so
# go test's own subset would only be run twice. -ldflags=-w: no DWARF in the
# test binaries (a stack trace needs none), the bulk of their link time.
TEST_FLAGS ?= -race -count=1 -timeout 30m -p 2 -vet=off -ldflags=-w

# The packages whose tests take longest go first. go test starts the test
# binaries in the order it is given the packages, two at a time (-p 2), so
# ./...'s alphabetical order left the longest, scenarios/stack (133 s),
# to start last and run alone for the final minute of a run. Each package
# is tested once however often it is named.
TEST_FIRST ?= ./scenarios/stack ./scenarios ./cmd/doublerun ./chaos ./worker ./lease

.PHONY: all build test test-stack bench images stack lint repro-556 repro-failover mutation mutation-ci mutation-guards chaos failover repro-backend-loss repro-paused-holder

all: lint build test

build:
	$(GO) build -o bin/doublerun ./cmd/doublerun

# The tests that produce reports keep them here (scenarios/report/reporttest),
# and make test then recomputes every figure of each with doublerun check.
TEST_REPORTS ?= $(CURDIR)/reports/test

## test: every test, race detector on, nothing cached. The stack route is
## picked (and images built or packages installed) once, up front, and one
## stack is shared by every test binary (scenarios/stack/internal/prepare);
## tests of the providers and tests that restart servers start their own.
## While the stack starts, the tests and the library replica programs
## (make replicas) are compiled, so no compile lands on a running scenario.
## The built-in strategies' replicas the tests start, and the CLI that
## cmd/doublerun's tests run, are one doublerun binary built without the
## race detector (DOUBLERUN_CHILD_BINARY); the test binaries themselves
## keep it.
## Then every report the tests wrote is checked: each figure recomputed
## from its history (all of the packages must write some; a narrower PKGS
## checks those it wrote).
# -trimpath: the build cache keys the module's packages by import path,
# not by the checkout's directory, so a fresh clone (CI's, or a second
# worktree) reuses what an earlier one compiled: without it a warm make
# test on a new clone compiled 100 packages again (39 core-seconds,
# process accounting at efc4e1b). Every go command of the recipe gets it.
test: export GOFLAGS := $(strip -trimpath $(GOFLAGS))
# GORACE=atexit_sleep_ms=0: a race-instrumented binary otherwise sleeps
# 1 s before it exits, so that a goroutine still running at the exit can
# report a race. Every test binary and every race-built child the tests
# start (the CLI's, the worker's failover children) paid that second on
# its test's clock. A race found while the tests run is reported as
# before; a GORACE of the caller's own comes after and wins.
test: export GORACE := $(strip atexit_sleep_ms=0 $(GORACE))
test:
	rm -rf $(TEST_REPORTS)
	DOUBLERUN_TEST_REPORTS=$(TEST_REPORTS) $(GO) run ./scenarios/stack/internal/prepare -child-binary ./cmd/doublerun -warm "$(GO) list -race -deps -test -export $(PKGS)" -warm "$(MAKE) -s replicas GO=$(GO)" -- $(GO) test $(TEST_FLAGS) $(if $(filter ./...,$(PKGS)),$(TEST_FIRST)) $(PKGS)
	$(if $(filter ./...,$(PKGS)),,@find $(TEST_REPORTS) -name report.json 2>/dev/null | grep -q . || exit 0; )$(GO) run ./cmd/doublerun check $(TEST_REPORTS)

## test-stack: the stack, pgbouncer and CLI tests only.
test-stack:
	$(GO) run ./scenarios/stack/internal/prepare -- $(GO) test $(TEST_FLAGS) $(STACK_PKGS)

BENCH_FLAGS ?=
## bench: the worker's throughput, jobs/s and jobs per CPU-second, for batch
## sizes 10, 100, 1000 x backlogs 10^4, 10^5, 10^6 x direct and transaction
## pooling, medians of 3 runs, on a native stack (about 10 min; not part of
## make test). BENCH_FLAGS="--help" lists the knobs, --history and --explain among them.
bench:
	$(GO) run ./cmd/doublerun bench $(BENCH_FLAGS)

## images: build the local Postgres and PgBouncer images of every version set
## from Debian packages (IMAGE_SETS=pg15-pgbouncer1.18 for one). The docker
## provider builds a missing pair on first use; this builds them ahead. Does
## nothing for a pair built from the current recipe.
IMAGE_SETS ?=
images:
	bash scenarios/stack/images/build.sh $(IMAGE_SETS)

## stack: start a stack and print export lines for the external provider.
stack:
	$(GO) run ./cmd/doublerun stack up

CHAOS_VERSIONS ?=
CHAOS_SHARD ?=
## chaos: the fault matrix on PgBouncer transaction pooling
## (CHAOS_TOPOLOGIES=direct,session,transaction,pinned,alias for more;
## CHAOS_POOL_SIZES=1,2,4 runs each pooled cell at those pool sizes) on the
## newest version set (CHAOS_VERSIONS=pg15-pgbouncer1.18, or all for one
## stack per set); CHAOS_SHARD=i/n runs a slice, and
## `doublerun chaos merge DIR...` joins the slices' reports. CHAOS_STANDBY=1 adds the
## failover faults' cells, each standby mode on a stack of its own (slow).
chaos:
	$(GO) run ./cmd/doublerun chaos --out reports/chaos --versions "$(CHAOS_VERSIONS)" $(if $(CHAOS_SHARD),--shard $(CHAOS_SHARD)) $(if $(filter 1 true,$(CHAOS_STANDBY)),--standby)

FAILOVER_TRIALS ?= 20
FAILOVER_FLAGS ?=
## failover: each lease's failover latency (p50, p99, max, n) after
## KILL_LEADER, TERMINATE_LEADER_BACKEND and GRACEFUL_HANDOVER, direct and
## through session pooling, FAILOVER_TRIALS trials per cell on one stack
## (about 6 min); writes reports/failover/failover.md. FAILOVER_FLAGS="-h"
## lists the knobs.
failover:
	$(GO) run ./cmd/doublerun failover --trials $(FAILOVER_TRIALS) $(FAILOVER_FLAGS)

REPRO_COUNT ?= 20
## repro-NAME: loop a limitation found by the chaos matrix (REPRO_COUNT runs
## at most) until it shows; prints Successful reproduction or Failed to reproduce.
repro-backend-loss repro-paused-holder:
	GO=$(GO) bash chaos/run.sh repro $(@:repro-%=%) $(REPRO_COUNT)

REPRO_VERSIONS ?=
## repro-556: reproduce issue #556 (two leaders through transaction pooling)
## and check its fixes on one version set (REPRO_VERSIONS, else
## DOUBLERUN_VERSIONS, else the newest); exits 0 only on "Successful
## reproduction".
repro-556:
	$(GO) run ./cmd/doublerun repro 556 --out reports/repro-556 --versions "$(REPRO_VERSIONS)"

## repro-failover: reproduce issue 32 (the fenced lease's token goes back
## across a promotion that lost its last grants) on a stack with an
## asynchronous standby, and check the epoch fence holds; exits 0 only on
## "Successful reproduction".
repro-failover:
	$(GO) run ./cmd/doublerun repro failover --out reports/repro-failover --versions "$(REPRO_VERSIONS)"

## mutation-ci: the gate of every submission (.ci/run runs it): gremlins on
## the lines changed since testdata/mutation/record.json's base and on one
## shard of lease, worker and scenarios/oracle in turn, each mutant compared
## with the record's (timed-out ones re-run alone), then the named guards
## the change touched and those of the shard, on one shared stack
## (doublerun mutation ci).
mutation-ci:
	$(GO) run ./cmd/doublerun mutation ci

## mutation-guards: every named guard mutant in testdata/mutation must be
## killed by its tests (go test -overlay; the tree is never touched).
mutation-guards:
	$(GO) run ./cmd/doublerun mutation guards

## mutation: gremlins on every mutant of lease, worker and scenarios/oracle,
## each compared with testdata/mutation/record.json's (equivalents.json
## excused); a pass on a clean tree writes a new record (mutation/run.sh).
mutation:
	bash mutation/run.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# The replica programs of the field's own libraries, each built in its own
# module as a user builds theirs, where their JSON files for
# `doublerun chaos --replica` (testdata/replicas/*/*.json) look for them.
REPLICAS_DIR ?= /tmp/doublerun-replicas
.PHONY: replicas
## replicas: build testdata/replicas/golang-migrate and testdata/replicas/river
## into REPLICAS_DIR, for `doublerun chaos --replica testdata/replicas/river/poll-only.json`
replicas:
	cd testdata/replicas/golang-migrate && GOWORK=off $(GO) build -o $(REPLICAS_DIR)/golang-migrate .
	cd testdata/replicas/river && GOWORK=off $(GO) build -o $(REPLICAS_DIR)/river .
