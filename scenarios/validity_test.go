package scenarios_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// envTestDiesOnceWorkBegins makes the replica of this test binary whose
// id it names wait for the run's first piece of work and die at once.
const envTestDiesOnceWorkBegins = "SCENARIOS_TEST_DIES_ONCE_WORK_BEGINS"

// dieOnceWorkBegins is such a replica: it polls the oracle's work table
// over oracleDSN until a piece of work is logged (retrying while the
// table does not exist yet), then says what a lease that raced its own
// CREATE TABLE says, and exits 1. Any other error ends it with 2 and the
// error as its last line, which the test's assertions then show.
func dieOnceWorkBegins(oracleDSN string) int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, oracleDSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect to the oracle:", err)
		return 2
	}
	defer conn.Close(ctx)
	for {
		var work bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM doublerun_oracle_work)`).Scan(&work)
		var pgErr *pgconn.PgError
		switch {
		case err == nil && work:
			fmt.Fprintln(os.Stderr, `UniqueViolation: duplicate key value violates unique constraint "pg_type_typname_nsp_index"`)
			return 1
		case err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P01"): // undefined_table
			fmt.Fprintln(os.Stderr, "wait for work:", err)
			return 2
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Each run below is invalid on purpose, as a user's mistake makes one: it
// could not have shown a double-run, so its verdict is INCONCLUSIVE and
// names the condition that failed, never PASS.

func requireInconclusive(t *testing.T, rep *Report, condition string, says ...string) {
	t.Helper()
	v := rep.Verdict
	require.False(t, v.Pass, v.Reason)
	require.True(t, v.Inconclusive, "%s: %s", v.Status(), v.Reason)
	require.True(t, strings.HasPrefix(v.Reason, condition+": "), v.Reason)
	for _, s := range says {
		require.Contains(t, v.Reason, s)
	}
	require.False(t, rep.Metrics.Validity.Valid)
}

// One replica: nobody to contend with.
func TestOneReplicaIsInconclusive(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, Scenario{Name: "one-replica", Strategy: strategy.Advisory, Replicas: 1,
		Topology: Topology{Kind: Direct}, Expect: ExpectSafe, Duration: 2 * time.Second})
	requireInconclusive(t, rep, oracle.ConditionContention, "only 1 replica ran")
}

// r1 dies at its start, after the run began, as a lease that races its
// own CREATE TABLE does: r2 ran alone. Its exit is an event with its
// status and its last line.
func TestAReplicaThatExitsIsAnEvent(t *testing.T) {
	t.Parallel()
	// r1 waits until r2 works, so that the run has begun, then dies. It is
	// this test binary (dieOnceWorkBegins), not a shell loop around psql:
	// the host's psql is no part of what make test needs, and where it
	// was missing (make test from nothing, while another package's test
	// was installing it) the loop failed at every try unseen, r1 outlived
	// the 2 s run and the run was judged on the path r1 never dials.
	sc := Scenario{Name: "exits-at-start", Strategy: strategy.Advisory, Topology: Topology{Kind: Session}, Expect: ExpectSafe,
		Duration: 2 * time.Second,
		Replica: &replica.Command{Command: []string{os.Args[0], "-test.run=^$"},
			Env: map[string]string{envTestCommandStrategy: strategy.Advisory, envTestDiesOnceWorkBegins: "r1"}}}
	rep, err := runCommand(t, sc, RunOptions{})
	require.NoError(t, err)
	requireInconclusive(t, rep, oracle.ConditionContention, "only 1 replica left contending", "r1 replica-stopped", "exit status 1", "pg_type_typname_nsp_index")
	var exit oracle.Event
	for _, e := range rep.History.Events {
		if e.Kind == oracle.EventReplicaStopped && e.Replica == "r1" {
			exit = e
			break
		}
	}
	require.Contains(t, exit.Detail, "exit status 1", "the exit is an event with its status")
	require.Contains(t, exit.Detail, "its last line", "and its last line")
	require.True(t, exit.At.Before(rep.History.End), "before the run ended")
}

// A service that dials its usual database URL instead of
// DOUBLERUN_LEASE_DSN: no proxy or bouncer fault reaches it.
func TestADirectDialIsInconclusive(t *testing.T) {
	t.Parallel()
	// The direct DSN, with the replica's application_name, in place of
	// the lease and work DSNs.
	script := `D=$(printf %s "$DOUBLERUN_ORACLE_DSN" | sed 's/doublerun-oracle-/doublerun-/')
DOUBLERUN_LEASE_DSN=$D DOUBLERUN_WORK_DSN=$D exec "$0" -test.run='^$'`
	sc := Scenario{Name: "direct-dial", Strategy: strategy.Advisory, Topology: Topology{Kind: Session}, Expect: ExpectSafe,
		Duration: 2 * time.Second,
		Replica:  &replica.Command{Command: []string{"sh", "-c", script, os.Args[0]}, Env: map[string]string{envTestCommandStrategy: strategy.Advisory}}}
	rep, err := runCommand(t, sc, RunOptions{})
	require.NoError(t, err)
	requireInconclusive(t, rep, oracle.ConditionPath, "s backends ", "connect from ", "not through its proxy: connect with `DOUBLERUN_LEASE_DSN`")
}

// A fault whose target makes no lease calls: the leader only prints that
// it works, so a partition of its proxies cannot stall it.
func TestAFaultThatReachesNothingIsInconclusive(t *testing.T) {
	t.Parallel()
	script := `if [ "$DOUBLERUN_REPLICA_ID" = r1 ]; then
while true; do echo work; sleep 0.1; echo done; sleep 0.05; done
fi
exec sleep 600`
	sc := Scenario{Name: "fault-reaches-nothing", Strategy: strategy.Advisory, Topology: Topology{Kind: Direct}, Expect: ExpectSafe,
		// A poll interval of 500ms gives the replica's pauses a tolerance
		// of 1.1s (2 polls and 100ms), far above its 150ms cycle.
		Duration: 2 * time.Second, TTL: time.Second, PollInterval: 500 * time.Millisecond, Fault: fault.PartitionLeader.Name(),
		Replica: &replica.Command{Command: []string{"sh", "-c", script}, Log: &replica.LogPatterns{WorkStarted: "^work$", WorkEnded: "^done$"}}}
	rep, err := runCommand(t, sc, RunOptions{})
	require.NoError(t, err)
	requireInconclusive(t, rep, oracle.ConditionStruck, "PARTITION_LEADER on r1's proxies never stalled its work", "DOUBLERUN_LEASE_DSN")
}

// What the oracle's newer-term condition needs travels in the analysis
// options a report names, so `doublerun check` judges by the same: a run
// judged by its stale writes alone (fenced), and how long its fault holds
// the leader out (a TTL and a half for the held faults, none for a fault
// that acts once).
func TestAnalysisCarriesTheExpectationAndTheFaultsHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expect Expectation
		fault  string
		ttl    time.Duration
		stale  bool
		hold   time.Duration
	}{
		{ExpectFenced, fault.FreezeLeader.Name(), 0, true, 3 * time.Second},
		{ExpectFenced, fault.PgBouncerPause.Name(), 16 * time.Second, true, 24 * time.Second},
		{ExpectFenced, fault.PostgresRestart.Name(), 0, true, 0},
		{ExpectFenced, fault.None, 0, true, 0},
		{ExpectSafe, fault.DelayLeader.Name(), 0, false, 3 * time.Second},
	} {
		rep := Report{Scenario: Scenario{Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Expect: tc.expect, Fault: tc.fault, TTL: tc.ttl}}
		opts := rep.Analysis()
		require.Equal(t, tc.stale, opts.StaleWritesOnly, "%s %s", tc.expect, tc.fault)
		require.Equal(t, tc.hold, opts.FaultHold, "%s %s", tc.expect, tc.fault)
	}
}
