package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// MaxPoolSize is the largest transaction pool a cell may ask for, the
// stack's bound (stack.CheckPoolSize says why).
const MaxPoolSize = stack.MaxPoolSize

// DefaultPoolSizes is the matrix's pool-size axis when none is given: a
// pool of one backend, the size at which #556 reproduces.
var DefaultPoolSizes = []int{1}

// poolGrid holds, per transaction pool size other than 1, the cells whose
// expectation at that size differs from grid's (measured with a pool of
// one): per fault, per strategy, the topologies that differ. A cell missing
// here takes grid's expectation. It stands beside grid rather than in it;
// the measurements behind each entry are in "Pool sizes" in the package
// documentation.
var poolGrid = map[int]map[string]map[string]Row{
	2: advisoryReproducesOrOrphans(),
	4: advisoryReproducesOrOrphans(),
}

// advisoryReproducesOrOrphans is the block of a pool of several backends:
// each advisory cell on the transaction topology, where the grid expects a
// double-run, expects a double-run or an orphaned lock instead, since which
// backend each statement gets is now up to PgBouncer (see "Pool sizes").
func advisoryReproducesOrOrphans() map[string]map[string]Row {
	out := map[string]map[string]Row{}
	for _, f := range columns() {
		for _, s := range []string{scenarios.StrategyAdvisory, scenarios.StrategyAdvisoryUnguarded} {
			if e, ok := Expect(s, scenarios.Transaction, f); ok && e == scenarios.ExpectReproduces {
				if out[f] == nil {
					out[f] = map[string]Row{}
				}
				out[f][s] = Row{scenarios.Transaction: scenarios.ExpectReproducesOrOrphans}
			}
		}
	}
	return out
}

// ParsePoolSizes reads a comma-separated list of pool sizes, such as
// "1,2,4" (--pool-sizes, CHAOS_POOL_SIZES), dropping repeats and sorting;
// the error names the bad entry and the valid range. An empty entry
// ("1,,2") is an error: it is a typo whose intent nobody can tell.
func ParsePoolSizes(list string) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("no pool size in %q; give sizes such as 1,2,4", list)
	}
	var out []int
	for i, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("entry %d of %q is empty; give sizes such as 1,2,4", i+1, list)
		}
		n, err := strconv.Atoi(f)
		if err == nil {
			err = stack.CheckPoolSize(n)
		}
		if err != nil {
			return nil, fmt.Errorf("pool size %q: need a whole number from 1 to %d, such as 1,2,4", f, MaxPoolSize)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// sized reports whether a topology's cells have a pool size: those whose
// work goes through a transaction pool.
func sized(topology scenarios.TopologyKind) bool {
	return topology == scenarios.Transaction || topology == scenarios.Pinned || topology == scenarios.Alias
}

// PoolCellName is the scenario name of a cell at a pool size: CellName for
// a pool of one, else the topology carries the size, as in
// "advisory/transaction-pool4/KILL_LEADER".
func PoolCellName(strategy string, topology scenarios.TopologyKind, faultName string, poolSize int) string {
	if poolSize <= 1 {
		return CellName(strategy, topology, faultName)
	}
	return fmt.Sprintf("%s/%s-pool%d/%s", strategy, topology, poolSize, faultName)
}

// ExpectAt is Expect at a transaction pool size: poolGrid's entry for the
// size when it has one for the cell, else the grid's.
func ExpectAt(strategy string, topology scenarios.TopologyKind, faultName string, poolSize int) (scenarios.Expectation, bool) {
	if e, ok := poolGrid[poolSize][faultName][strategy][topology]; ok {
		return e, true
	}
	return Expect(strategy, topology, faultName)
}

// CellAt is Cell with a transaction pool of poolSize backends, expecting
// what ExpectAt says. For a topology without a transaction pool (direct,
// session) the size means nothing, and CellAt is Cell.
func CellAt(strategy string, topology scenarios.TopologyKind, faultName string, poolSize int) (scenarios.Scenario, error) {
	sc, err := Cell(strategy, topology, faultName)
	if err != nil || poolSize <= 1 || !sized(topology) {
		return sc, err
	}
	if poolSize > MaxPoolSize {
		return scenarios.Scenario{}, fmt.Errorf("pool size %d: need from 1 to %d", poolSize, MaxPoolSize)
	}
	sc.Topology.PoolSize = poolSize
	sc.Name = PoolCellName(strategy, topology, faultName, poolSize)
	sc.Expect, _ = ExpectAt(strategy, topology, faultName, poolSize)
	sc.Description = fmt.Sprintf("chaos matrix: %s through %s, fault %s", strategy, sc.Topology, faultName)
	return sc, nil
}

// AtPoolSizes returns cells with every cell of the matrix on a topology
// with a transaction pool repeated once per size (a size of 1 keeps the
// cell as it is), each expecting what ExpectAt says; other cells, and
// cells that are not the matrix's, appear once. The order is the cells',
// sizes ascending within each.
func AtPoolSizes(cells []scenarios.Scenario, sizes []int) []scenarios.Scenario {
	var out []scenarios.Scenario
	for _, sc := range cells {
		if !sized(sc.Topology.Kind) || sc.Name != CellName(sc.Strategy, sc.Topology.Kind, sc.Fault) {
			out = append(out, sc)
			continue
		}
		for _, size := range sizes {
			if size <= 1 {
				out = append(out, sc)
				continue
			}
			c, err := CellAt(sc.Strategy, sc.Topology.Kind, sc.Fault, size)
			if err != nil {
				continue
			}
			c.Replicas, c.Duration = sc.Replicas, max(sc.Duration, c.Duration)
			out = append(out, c)
		}
	}
	return out
}
