package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
)

// Strategies are the matrix's strategies, in table order.
var Strategies = []string{scenarios.StrategyAdvisory, scenarios.StrategyAdvisoryUnguarded, scenarios.StrategyAdvisoryWait, scenarios.StrategyFenced}

// columns are the matrix's faults: no fault, then the catalog in order.
func columns() []string { return append([]string{fault.None}, fault.Names()...) }

// CellName is the scenario name of a cell, such as
// "fenced/transaction/KILL_LEADER"; the report directory follows it.
func CellName(strategy string, topology scenarios.TopologyKind, faultName string) string {
	return strategy + "/" + string(topology) + "/" + faultName
}

// Cell returns the scenario of one cell of the matrix; the error names
// the valid choices, or says the fault does not apply. Transaction and
// pinned use a transaction pool of one backend, the size at which #556
// reproduces.
func Cell(strategy string, topology scenarios.TopologyKind, faultName string) (scenarios.Scenario, error) {
	if !slices.Contains(Strategies, strategy) {
		return scenarios.Scenario{}, fmt.Errorf("unknown strategy %q; valid: %s", strategy, strings.Join(Strategies, ", "))
	}
	if _, err := scenarios.ParseTopology(string(topology)); err != nil {
		return scenarios.Scenario{}, err
	}
	if err := fault.CheckName(faultName); err != nil {
		return scenarios.Scenario{}, err
	}
	if err := scenarios.CheckStrategyTopology(strategy, topology); err != nil {
		return scenarios.Scenario{}, err
	}
	expect, ok := Expect(strategy, topology, faultName)
	if !ok {
		return scenarios.Scenario{}, fmt.Errorf("fault %s does not apply to strategy %s on topology %s", faultName, strategy, topology)
	}
	sc := scenarios.Scenario{
		Name:     CellName(strategy, topology, faultName),
		Strategy: strategy,
		Topology: scenarios.Topology{Kind: topology},
		Fault:    faultName,
		Expect:   expect,
	}
	sc = sc.WithDefaults() // a transaction pool of one
	sc.Duration = CellDuration(sc)
	sc.Description = fmt.Sprintf("chaos matrix: %s through %s, fault %s", strategy, topology, faultName)
	return sc, nil
}

// CellDuration is how long a cell is measured: the fault comes at a third,
// so the rest must hold the fault's own length (fault.HeldFor) and then
// about a TTL plus a second, for the failover and the work after it to
// show.
func CellDuration(sc scenarios.Scenario) time.Duration {
	sc = sc.WithDefaults()
	var length time.Duration
	if f, ok := fault.Lookup(sc.Fault); ok {
		length = fault.HeldFor(f, sc.FaultSetting())
	}
	after := sc.TTL + time.Second
	// D - D/3 >= length + after, in whole seconds.
	need := 3 * (length + after) / 2
	d := need.Truncate(time.Second)
	if d < need {
		d += time.Second
	}
	return max(5*time.Second, d)
}

// Matrix returns every applicable cell for the given topologies (all of
// scenarios.Topologies when none is given): strategies × topologies × (no
// fault and every fault), ordered by topology, strategy and fault, each
// with its expectation from the grid.
func Matrix(topologies ...scenarios.TopologyKind) []scenarios.Scenario {
	if len(topologies) == 0 {
		topologies = scenarios.Topologies
	}
	var out []scenarios.Scenario
	for _, topo := range topologies {
		for _, strategy := range Strategies {
			for _, f := range columns() {
				if sc, err := Cell(strategy, topo, f); err == nil {
					out = append(out, sc)
				}
			}
		}
	}
	return out
}
