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
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the expectation table in doc.go from table.go")

// The table has a block per fault of the catalog and for no fault, a row
// per strategy in each, and in each row exactly the topologies where the
// fault applies. A column of a pool size or a version set names a size or
// set that exists, says something other than the topology's own column,
// only where that column has the cell, and gives its reason; no cell has
// both a set's and a pool size's column without one for both, which would
// leave Expect to choose between two measurements.
func TestTableIsComplete(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, columns(), slices.Collect(maps.Keys(table.Faults)), "a block per fault, and none for a fault the catalog lacks")
	for faultName, block := range table.Faults {
		require.NotEmpty(t, block.Why, "%s: the block says why", faultName)
		require.ElementsMatch(t, block.strategies(), slices.Collect(maps.Keys(block.Rows)), "%s: a row per strategy", faultName)
		if block.Standby != "" {
			// A failover fault's cells run on the standby its block
			// names, which the fault must accept, on the topologies
			// measured. Caught by TestTableIsComplete itself.
			require.NoError(t, block.Standby.Check(), faultName)
			require.NotEmpty(t, block.Topologies, "%s: a block with a standby names the topologies its cells were measured on", faultName)
		} else {
			require.Nil(t, block.Topologies, "%s: a block without a standby holds every topology where its fault applies", faultName)
		}
		for strategy, row := range block.Rows {
			for col, e := range row {
				name := faultName + "/" + strategy + "/" + col.String()
				require.Contains(t, scenarios.Topologies, col.Topology, name)
				if col.own() {
					continue
				}
				base, ok := row[Column{Topology: col.Topology}]
				require.True(t, ok, "%s: the topology's own column has no such cell", name)
				require.NotEqual(t, base, e, "%s: says what the topology's own column says", name)
				require.NotEmpty(t, table.Columns[col], "%s: the column says why it is there", name)
				if col.PoolSize != 0 {
					require.True(t, col.Topology.TransactionPooled(), "%s: a pool size on a topology without a transaction pool", name)
					require.Greater(t, col.PoolSize, 1, name)
					require.LessOrEqual(t, col.PoolSize, MaxPoolSize, name)
				}
				if col.Versions != "" {
					_, err := stack.LookupVersionSet(col.Versions)
					require.NoError(t, err, "%s: a version set stack does not know", name)
				}
				if col.PoolSize != 0 && col.Versions == "" {
					for other := range row {
						if other.Topology == col.Topology && other.Versions != "" && other.PoolSize == 0 {
							_, both := row[Column{col.Topology, col.PoolSize, other.Versions}]
							require.True(t, both, "%s and %s both hold its cells on %s: give a column for both", name, other, other.Versions)
						}
					}
				}
			}
			for _, topo := range scenarios.Topologies {
				applies := block.applies(faultName, strategy, topo)
				// A strategy that refuses the topology's lease endpoint
				// has no cell there, nor a topology the block's cells
				// were not measured on.
				applies = applies && scenarios.CheckStrategyTopology(strategy, topo) == nil
				if block.Topologies != nil {
					applies = applies && slices.Contains(block.Topologies, topo)
				}
				_, inTable := Expect(Cell{Strategy: strategy, Topology: topo, Fault: faultName, Standby: block.Standby})
				require.Equal(t, applies, inTable, "%s/%s/%s: the table and Available disagree", strategy, topo, faultName)
				if block.Standby != "" {
					// Not on one Postgres, nor on the other mode.
					for _, other := range []stack.ReplicationMode{"", stack.ReplicationSync, stack.ReplicationAsync} {
						if other != block.Standby {
							_, there := Expect(Cell{Strategy: strategy, Topology: topo, Fault: faultName, Standby: other})
							require.False(t, there, "%s/%s/%s on standby %q", strategy, topo, faultName, other)
						}
					}
				}
			}
		}
	}
	for col := range table.Columns {
		require.False(t, col.own(), "%s: a topology's own column needs no reason of its own", col)
	}
}

// Expect reads a cell's fields alone: the most particular column that
// holds the cell answers, and the answer says why.
func TestExpectReadsTheCellsFields(t *testing.T) {
	t.Parallel()
	kill := fault.KillLeader.Name()
	for _, tc := range []struct {
		name string
		cell Cell
		want scenarios.Expectation
		col  Column
	}{
		{"PoolOfOne", Cell{Strategy: strategy.Advisory, Topology: scenarios.Transaction, Fault: kill}, repr, tx},
		{"PoolOfOneSaidSo", Cell{Strategy: strategy.Advisory, Topology: scenarios.Transaction, PoolSize: 1, Fault: kill}, repr, tx},
		{"PoolOfFour", Cell{Strategy: strategy.Advisory, Topology: scenarios.Transaction, PoolSize: 4, Fault: kill}, orph, tx4},
		{"PoolOfThreeWasNotMeasured", Cell{Strategy: strategy.Advisory, Topology: scenarios.Transaction, PoolSize: 3, Fault: kill}, repr, tx},
		{"FencedAtPoolFour", Cell{Strategy: strategy.Fenced, Topology: scenarios.Transaction, PoolSize: 4, Fault: kill}, safe, tx},
		{"PinnedAtPoolFour", Cell{Strategy: strategy.Advisory, Topology: scenarios.Pinned, PoolSize: 4, Fault: kill}, safe, pinned},
		{"PoolSizeOfDirectMeansNothing", Cell{Strategy: strategy.Advisory, Topology: scenarios.Direct, PoolSize: 4, Fault: kill}, safe, direct},
		{"Alias", Cell{Strategy: strategy.AdvisoryUnguarded, Topology: scenarios.Alias, Fault: fault.PartitionLeader.Name()}, safe, alias},
		{"AnotherVersionSet", Cell{Strategy: strategy.Fenced, Topology: scenarios.Transaction, Fault: kill, Versions: "pg17-pgbouncer1.24"}, safe, tx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, ok := Expect(tc.cell)
			require.True(t, ok)
			require.Equal(t, tc.want, e.Expect)
			require.Equal(t, tc.col, e.Column)
			require.True(t, strings.HasPrefix(e.Why, table.Faults[tc.cell.Fault].Why), e.Why)
			if !tc.col.own() {
				require.Contains(t, e.Why, "TRANSACTION-POOL4: "+poolWhy)
			}
		})
	}
	for _, c := range []Cell{
		{Strategy: strategy.Fenced, Topology: scenarios.Transaction, Fault: fault.TerminateLeaderBackend.Name()},
		{Strategy: strategy.Fenced, Topology: scenarios.Transaction, PoolSize: 4, Fault: fault.TerminateLeaderBackend.Name()},
		{Strategy: strategy.AdvisoryWait, Topology: scenarios.Transaction, PoolSize: 2, Fault: kill},
		{Strategy: strategy.Advisory, Topology: scenarios.Direct, Fault: fault.PgBouncerKill.Name()},
		{Strategy: strategy.FencedWait, Topology: scenarios.Direct, Fault: kill},
	} {
		_, ok := Expect(c)
		require.False(t, ok, "%s is no cell of the matrix", c.Name())
	}
}

// A version set's column reaches every cell on that set, whatever its
// pool size: the expectation is read from the cell's fields, and the
// pool sizes are applied before the set (the order of `doublerun chaos`).
func TestVersionOverrideReachesEveryPoolSize(t *testing.T) {
	t.Parallel()
	const set = "pg17-pgbouncer1.24"
	onSet := Column{Topology: scenarios.Transaction, Versions: set}
	t2OnSet := Column{Topology: scenarios.Transaction, PoolSize: 2, Versions: set}
	t4OnSet := Column{Topology: scenarios.Transaction, PoolSize: 4, Versions: set}
	tbl := Table{Faults: map[string]Block{}, Columns: maps.Clone(table.Columns)}
	for f, b := range table.Faults {
		rows := map[string]Row{}
		for s, row := range b.Rows {
			rows[s] = maps.Clone(row)
		}
		tbl.Faults[f] = Block{Why: b.Why, Rows: rows}
	}
	kill := fault.KillLeader.Name()
	tbl.Faults[kill].Rows[strategy.Fenced][onSet] = fenc
	// The advisory cells have a pool size's column too: the set's at
	// those sizes is a column of both (TestTableIsComplete).
	tbl.Faults[kill].Rows[strategy.Advisory][onSet] = fenc
	tbl.Faults[kill].Rows[strategy.Advisory][t2OnSet] = safe
	tbl.Faults[kill].Rows[strategy.Advisory][t4OnSet] = fenc
	tbl.Columns[onSet] = "measured on the set"
	tbl.Columns[t2OnSet] = "measured on the set at pool size 2"
	tbl.Columns[t4OnSet] = "measured on the set at pool size 4"

	cells := AtPoolSizes(Matrix(scenarios.Transaction), []int{1, 2, 4})
	for _, set := range []string{set, ""} {
		scs, err := tbl.place(cells, set, 0, nil)
		require.NoError(t, err)
		got := map[string]scenarios.Expectation{}
		for _, sc := range scs {
			got[sc.Name] = sc.Expect
		}
		want := map[string]scenarios.Expectation{
			"fenced/transaction/KILL_LEADER":         safe,
			"fenced/transaction-pool4/KILL_LEADER":   safe,
			"advisory/transaction/KILL_LEADER":       repr,
			"advisory/transaction-pool2/KILL_LEADER": orph,
			"advisory/transaction-pool4/KILL_LEADER": orph,
		}
		if set != "" {
			want = map[string]scenarios.Expectation{
				"fenced/transaction/KILL_LEADER":         fenc,
				"fenced/transaction-pool4/KILL_LEADER":   fenc, // the set's column, at a size it does not name
				"advisory/transaction/KILL_LEADER":       fenc,
				"advisory/transaction-pool2/KILL_LEADER": safe, // the column of both
				"advisory/transaction-pool4/KILL_LEADER": fenc,
			}
		}
		for name, e := range want {
			require.Equal(t, e, got[name], "%s on %q", name, set)
		}
	}
	e, ok := tbl.Expect(Cell{Strategy: strategy.Advisory, Topology: scenarios.Transaction, PoolSize: 4, Fault: kill, Versions: set})
	require.True(t, ok)
	require.Equal(t, t4OnSet, e.Column)
	require.Contains(t, e.Why, "TRANSACTION-POOL4@pg17-pgbouncer1.24: measured on the set at pool size 4")
	require.Contains(t, tbl.render(), "TRANSACTION@pg17-pgbouncer1.24", "the set's column is a block of the rendered table")
}

// doc.go shows the table rendered from table.go; `go test ./chaos -run
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
	for _, c := range all {
		sc, err := c.Scenario()
		require.NoError(t, err, c.Name())
		require.False(t, names[sc.Name], sc.Name)
		names[sc.Name] = true
		require.NoError(t, sc.Validate(), sc.Name)
		e, _ := Expect(c)
		require.Equal(t, e.Expect, sc.Expect, sc.Name)
		// The fault comes at a third; what is left holds the fault and a
		// TTL plus a second after it.
		require.GreaterOrEqual(t, sc.Duration-sc.Duration/3, scenarios.DefaultTTL+1000*1e6, sc.Name)
	}
	txCells := Matrix(scenarios.Transaction)
	require.Len(t, txCells, 35, "3 strategies × 12 columns, less TERMINATE_LEADER_BACKEND for fenced; advisory-wait refuses transaction")
	require.Equal(t, "advisory/transaction/none", txCells[0].Name())
	require.Equal(t, len(all), len(Matrix(scenarios.Topologies...)))

	sc, err := Cell{Strategy: "fenced", Topology: scenarios.Transaction, Fault: "KILL_LEADER"}.Scenario()
	require.NoError(t, err)
	require.Equal(t, "fenced/transaction/KILL_LEADER", sc.Name)
	require.Equal(t, "chaos matrix: fenced through transaction, fault KILL_LEADER", sc.Description)
	sc, err = Cell{Strategy: "advisory", Topology: scenarios.Transaction, PoolSize: 4, Fault: "KILL_LEADER"}.Scenario()
	require.NoError(t, err)
	require.Equal(t, "advisory/transaction-pool4/KILL_LEADER", sc.Name)
	require.Equal(t, 4, sc.Topology.PoolSize)
	require.Equal(t, scenarios.ExpectReproducesOrOrphans, sc.Expect)
	require.Equal(t, "chaos matrix: advisory through transaction(pool=4), fault KILL_LEADER", sc.Description)
	for _, tc := range []struct {
		strategy, topology, fault string
		poolSize                  int
		want                      string
	}{
		{"zookeeper", "transaction", "KILL_LEADER", 0, `unknown strategy "zookeeper"; valid: advisory, advisory-unguarded, advisory-wait, fenced`},
		{"fenced-wait", "direct", "KILL_LEADER", 0, `unknown strategy "fenced-wait"; valid: advisory, advisory-unguarded, advisory-wait, fenced`},
		{"fenced", "mesh", "KILL_LEADER", 0, `field "topology.kind": unknown topology "mesh"; valid: direct, session, transaction, pinned, alias`},
		{"fenced", "transaction", "METEOR", 0, `field "fault": unknown fault "METEOR"; valid: none, TERMINATE_LEADER_BACKEND, `},
		{"fenced", "transaction", "TERMINATE_LEADER_BACKEND", 0, `field "fault": TERMINATE_LEADER_BACKEND does not apply to strategy fenced on topology transaction(pool=1); pick another fault or topology`},
		{"advisory", "direct", "PGBOUNCER_KILL", 0, `field "fault": PGBOUNCER_KILL does not apply to strategy advisory on topology direct; pick another fault or topology`},
		{"advisory-wait", "transaction", "none", 0, `field "topology.kind": strategy advisory-wait refuses topology transaction: a waiting follower holds its server connection`},
		{"advisory", "transaction", "none", 17, `field "topology.pool_size": 17 is not from 1 to 16: `},
	} {
		_, err := Cell{Strategy: tc.strategy, Topology: scenarios.TopologyKind(tc.topology), PoolSize: tc.poolSize, Fault: tc.fault}.Scenario()
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}
