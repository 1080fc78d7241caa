package chaos

import (
	"flag"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the expectation table in doc.go from matrix.go")

// The grid has a block per fault of the catalog and for no fault, a row
// per strategy in each, and in each row exactly the topologies where the
// fault applies.
func TestGridIsComplete(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, columns(), slices.Collect(maps.Keys(grid)), "a block per fault, and none for a fault the catalog lacks")
	require.ElementsMatch(t, columns(), slices.Collect(maps.Keys(aliasGrid)), "the alias column: a block per fault")
	for faultName, rows := range grid {
		require.ElementsMatch(t, Strategies, slices.Collect(maps.Keys(rows)), "%s: a row per strategy", faultName)
		for strategy, row := range rows {
			for topo := range row {
				require.Contains(t, scenarios.Topologies, topo, "%s/%s", faultName, strategy)
			}
			for _, topo := range scenarios.Topologies {
				sc := scenarios.Scenario{Strategy: strategy, Topology: scenarios.Topology{Kind: topo}}
				applies := faultName == fault.None
				if f, ok := fault.Lookup(faultName); ok {
					applies = f.Available(sc.FaultSetting())
				}
				// A strategy that refuses the topology's lease endpoint
				// has no cell there.
				applies = applies && scenarios.CheckStrategyTopology(strategy, topo) == nil
				_, inGrid := Expect(strategy, topo, faultName)
				require.Equal(t, applies, inGrid, "%s/%s/%s: the grid and Available disagree", strategy, topo, faultName)
			}
		}
	}
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
	txCells := Matrix(scenarios.Transaction)
	require.Len(t, txCells, 35, "3 strategies × 12 columns, less TERMINATE_LEADER_BACKEND for fenced; advisory-wait refuses transaction")
	require.Equal(t, "advisory/transaction/none", txCells[0].Name)
	require.Equal(t, len(all), len(Matrix(scenarios.Topologies...)))

	sc, err := Cell("fenced", scenarios.Transaction, "KILL_LEADER")
	require.NoError(t, err)
	require.Equal(t, "fenced/transaction/KILL_LEADER", sc.Name)
	require.Equal(t, 1, sc.Topology.PoolSize)
	for _, tc := range []struct{ strategy, topology, fault, want string }{
		{"zookeeper", "transaction", "KILL_LEADER", `unknown strategy "zookeeper"; valid: advisory, advisory-unguarded, advisory-wait, fenced`},
		{"fenced", "mesh", "KILL_LEADER", `unknown topology "mesh"; valid: direct, session, transaction, pinned, alias`},
		{"fenced", "transaction", "METEOR", `unknown fault "METEOR"; valid: none, TERMINATE_LEADER_BACKEND, `},
		{"fenced", "transaction", "TERMINATE_LEADER_BACKEND", "fault TERMINATE_LEADER_BACKEND does not apply to strategy fenced on topology transaction"},
		{"advisory", "direct", "PGBOUNCER_KILL", "fault PGBOUNCER_KILL does not apply to strategy advisory on topology direct"},
		{"advisory-wait", "transaction", "none", "strategy advisory-wait refuses topology transaction: a waiting follower holds its server connection"},
	} {
		_, err := Cell(tc.strategy, scenarios.TopologyKind(tc.topology), tc.fault)
		require.ErrorContains(t, err, tc.want)
	}
}
