package chaos

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the expectation table in doc.go from matrix.go")

// The table has one row per strategy and topology and one cell per column,
// and marks exactly the faults that do not apply.
func TestExpectationTableIsComplete(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, row := range expectations {
		key := row.strategy + "/" + string(row.topology)
		require.False(t, seen[key], "row %s twice", key)
		seen[key] = true
		require.Len(t, row.cells, len(columns()), key)
		for i, fault := range columns() {
			sc := scenarios.Scenario{Strategy: row.strategy, Topology: scenarios.Topology{Kind: row.topology}}
			applies := fault == scenarios.NoFault
			if !applies {
				f, err := LookupFault(fault)
				require.NoError(t, err)
				applies = f.Available(sc)
			}
			require.Equal(t, applies, row.cells[i] != na, "%s/%s: the table and Available disagree", key, fault)
		}
	}
	require.Len(t, seen, len(Strategies)*len(Topologies))
}

// doc.go shows the table rendered from matrix.go; `go test ./chaos -run
// TestDocTableIsCurrent -update-doc` rewrites it.
func TestDocTableIsCurrent(t *testing.T) {
	data, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "//\tDIRECT ") })
	require.GreaterOrEqual(t, start, 0, "doc.go has no rendered table (a line starting with the DIRECT block)")
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "//\t") {
		end++
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSuffix(ExpectationTable(), "\n"), "\n") {
		want = append(want, "//\t"+l)
	}
	if *updateDoc {
		lines = slices.Concat(lines[:start], want, lines[end:])
		require.NoError(t, os.WriteFile("doc.go", []byte(strings.Join(lines, "\n")), 0o644))
		return
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(lines[start:end], "\n"),
		"doc.go's table is out of date; run go test ./chaos -run TestDocTableIsCurrent -update-doc")
}

func TestMatrix(t *testing.T) {
	t.Parallel()
	all := Matrix()
	names := map[string]bool{}
	for _, sc := range all {
		require.False(t, names[sc.Name], sc.Name)
		names[sc.Name] = true
		require.NoError(t, sc.Validate(), sc.Name)
		require.Equal(t, CellName(sc.Strategy, sc.Topology.Kind, sc.Fault), sc.Name)
		// The fault comes at a third; what is left holds the fault and a
		// TTL plus a second after it.
		require.GreaterOrEqual(t, sc.Duration-sc.Duration/3, sc.WithDefaults().TTL+1000*1e6, sc.Name)
	}
	tx := Matrix(scenarios.Transaction)
	require.Len(t, tx, 35, "3 strategies × 12 columns, less TERMINATE_LEADER_BACKEND for fenced")
	require.Equal(t, "advisory/transaction/none", tx[0].Name)
	require.Equal(t, len(all), len(Matrix(Topologies...)))

	sc, err := Cell("fenced", scenarios.Transaction, "KILL_LEADER")
	require.NoError(t, err)
	require.Equal(t, "fenced/transaction/KILL_LEADER", sc.Name)
	require.Equal(t, 1, sc.Topology.PoolSize)
	for _, tc := range []struct{ strategy, topology, fault, want string }{
		{"zookeeper", "transaction", "KILL_LEADER", `unknown strategy "zookeeper"; valid: advisory, advisory-unguarded, fenced`},
		{"fenced", "mesh", "KILL_LEADER", `unknown topology "mesh"; valid: direct, session, transaction, pinned`},
		{"fenced", "transaction", "METEOR", `unknown fault "METEOR"; valid: none, TERMINATE_LEADER_BACKEND, `},
		{"fenced", "transaction", "TERMINATE_LEADER_BACKEND", "fault TERMINATE_LEADER_BACKEND does not apply to strategy fenced on topology transaction"},
		{"advisory", "direct", "PGBOUNCER_KILL", "fault PGBOUNCER_KILL does not apply to strategy advisory on topology direct"},
	} {
		_, err := Cell(tc.strategy, scenarios.TopologyKind(tc.topology), tc.fault)
		require.ErrorContains(t, err, tc.want)
	}
	ts, err := ParseTopologies(" pinned,direct,pinned ")
	require.NoError(t, err)
	require.Equal(t, []scenarios.TopologyKind{scenarios.Pinned, scenarios.Direct}, ts)
	_, err = ParseTopologies("direct,mesh")
	require.EqualError(t, err, `unknown topology "mesh"; valid: direct, session, transaction, pinned`)
}
