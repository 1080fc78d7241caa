package failover_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/chaos/failover"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack/stacktest"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	require.Equal(t, failover.Stats{}, failover.Summarize(nil))
	var twenty []int
	for i := 20; i >= 1; i-- {
		twenty = append(twenty, i)
	}
	require.Equal(t, failover.Stats{N: 20, P50: 10 * time.Millisecond, P99: 20 * time.Millisecond, Max: 20 * time.Millisecond},
		failover.Summarize(ms(twenty...)), "nearest rank: with 20 trials p99 is the worst")
	var hundred []int
	for i := 1; i <= 200; i++ {
		hundred = append(hundred, i)
	}
	require.Equal(t, failover.Stats{N: 200, P50: 100 * time.Millisecond, P99: 198 * time.Millisecond, Max: 200 * time.Millisecond},
		failover.Summarize(ms(hundred...)))
	require.Equal(t, failover.Stats{N: 1, P50: time.Millisecond, P99: time.Millisecond, Max: time.Millisecond}, failover.Summarize(ms(1)))
}

func TestMs(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                       "0.0 ms",
		3240 * time.Microsecond: "3.2 ms",
		3250 * time.Microsecond: "3.3 ms",
		1962*time.Millisecond + 440*time.Microsecond: "1,962.4 ms",
		1234567 * time.Millisecond:                   "1,234,567.0 ms",
	} {
		require.Equal(t, want, failover.Ms(d), d)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := failover.Config{Admin: "postgres://x", Endpoints: []failover.Endpoint{{Name: "direct", DSN: "postgres://x"}}}
	require.NoError(t, ok.Validate())
	bad := ok
	bad.Strategies = []string{"zookeeper"}
	bad.Faults = []fault.Fault{fault.PartitionLeader}
	bad.Trials = -1
	err := bad.Validate()
	require.ErrorContains(t, err, `unknown strategy "zookeeper"; valid: advisory, advisory-unguarded, advisory-wait, fenced, fenced-epoch, fenced-wait`)
	require.ErrorContains(t, err, `fault PARTITION_LEADER: a trial injects only KILL_LEADER, TERMINATE_LEADER_BACKEND, GRACEFUL_HANDOVER`)
	require.ErrorContains(t, err, "trials -1: need at least 1")
	require.ErrorContains(t, failover.Config{}.Validate(), "no admin DSN")
}

// Measure measures each fault against real servers: one trial per cell on a
// direct endpoint, with the waiting advisory lease, which fails over in
// far less than a poll, and the polled one. The table has a row per cell.
func TestMeasureCoversEveryFault(t *testing.T) {
	t.Parallel()
	db := stacktest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress []string
	cells, err := failover.Measure(ctx, failover.Config{
		Admin:      db.Postgres.DSN,
		Endpoints:  []failover.Endpoint{{Name: "direct", DSN: db.Postgres.DSN}},
		Strategies: []string{strategy.AdvisoryWait, strategy.Advisory},
		Trials:     2,
		Progress:   func(done, total int, c failover.Measurement) { progress = append(progress, c.Line()) },
	})
	require.NoError(t, err)
	require.Len(t, cells, 6)
	require.Len(t, progress, 6)
	for _, c := range cells {
		require.Equal(t, 2, c.Stats.N, c.Line())
		require.Positive(t, c.Stats.P50, c.Line())
		if c.Strategy == strategy.AdvisoryWait && c.Fault != fault.TerminateLeaderBackend.Name() {
			// The server hands the lease to the survivor waiting in
			// pg_advisory_lock: its new term comes from a call already
			// under way at the fault, not from a later poll. (A bound
			// on time could not tell the two apart on a loaded host.)
			// Between two waits the survivor is off the lock for a
			// moment, so one trial of two may land there.
			require.GreaterOrEqual(t, c.Woken, 1, c.Line())
		}
	}
	table := failover.Table(cells)
	require.Equal(t, 2+6, strings.Count(table, "\n"), table)
	require.Contains(t, table, "| direct | advisory-wait | KILL_LEADER | ")
}

// A cancelled measurement stops at once and leaves no leader process behind. Not
// parallel: another test's leader is this process's child too.
func TestMeasureStopsWhenCancelled(t *testing.T) {
	db := stacktest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	begin := time.Now()
	_, err := failover.Measure(ctx, failover.Config{
		Admin:      db.Postgres.DSN,
		Endpoints:  []failover.Endpoint{{Name: "direct", DSN: db.Postgres.DSN}},
		Strategies: []string{strategy.Fenced},
		Faults:     []fault.Fault{fault.KillLeader},
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(begin), 10*time.Second)
	require.Empty(t, children(t), "no leader process outlives the run")
}

// children lists the processes whose parent is this one and that run
// this binary (the stack's servers are children too).
func children(t *testing.T) []string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var out []string
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) S ppid ...": comm may hold spaces, so count from
		// the last ')'.
		fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		exe, _ := os.Readlink(filepath.Join(filepath.Dir(p), "exe"))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) && exe == self {
			out = append(out, string(data))
		}
	}
	return out
}
