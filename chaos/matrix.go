package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
)

// Strategies are the matrix's strategies, in table order.
var Strategies = []string{"advisory", "advisory-unguarded", "fenced"}

// Topologies are the matrix's topologies, in table order. Transaction and
// pinned use a transaction pool of one backend, the size at which #556
// reproduces.
var Topologies = []scenarios.TopologyKind{scenarios.Direct, scenarios.Session, scenarios.Transaction, scenarios.Pinned}

// Short names for the expectation grid below.
const (
	safe = scenarios.ExpectSafe
	repr = scenarios.ExpectReproduces
	fenc = scenarios.ExpectFenced
	na   = scenarios.Expectation("") // the fault does not apply
)

// columns are the grid's columns: no fault, then the catalog in order.
func columns() []string { return append([]string{scenarios.NoFault}, FaultNames()...) }

// expectations is THE table of what each cell of the matrix must show,
// derived from measured runs (see "The matrix" and "Findings" in the
// package documentation, which renders it). One row per strategy and
// topology; one column per fault, in the order of columns():
//
//	none  TERM  KILL  FREEZE  PART  DELAY  PAUSE  KILLB  RECON  RESTART_B  RESTART_PG  HANDOVER
var expectations = []struct {
	strategy string
	topology scenarios.TopologyKind
	cells    []scenarios.Expectation
}{
	{"advisory", scenarios.Direct, []scenarios.Expectation{safe, repr, safe, safe, safe, safe, na, na, na, na, fenc, safe}},
	{"advisory-unguarded", scenarios.Direct, []scenarios.Expectation{safe, repr, safe, safe, safe, safe, na, na, na, na, fenc, safe}},
	{"fenced", scenarios.Direct, []scenarios.Expectation{safe, na, safe, fenc, fenc, fenc, na, na, na, na, fenc, safe}},

	{"advisory", scenarios.Session, []scenarios.Expectation{safe, repr, safe, safe, safe, safe, safe, fenc, safe, fenc, fenc, safe}},
	{"advisory-unguarded", scenarios.Session, []scenarios.Expectation{safe, repr, safe, safe, safe, safe, safe, fenc, safe, fenc, fenc, safe}},
	{"fenced", scenarios.Session, []scenarios.Expectation{safe, na, safe, fenc, fenc, fenc, safe, safe, safe, safe, fenc, safe}},

	{"advisory", scenarios.Transaction, []scenarios.Expectation{repr, repr, repr, repr, repr, repr, repr, repr, repr, repr, repr, repr}},
	{"advisory-unguarded", scenarios.Transaction, []scenarios.Expectation{repr, repr, repr, repr, repr, repr, repr, repr, repr, repr, repr, repr}},
	{"fenced", scenarios.Transaction, []scenarios.Expectation{safe, na, safe, fenc, fenc, fenc, fenc, safe, safe, safe, fenc, safe}},

	{"advisory", scenarios.Pinned, []scenarios.Expectation{safe, repr, safe, safe, safe, safe, safe, safe, safe, fenc, fenc, safe}},
	{"advisory-unguarded", scenarios.Pinned, []scenarios.Expectation{safe, repr, safe, safe, safe, safe, safe, safe, safe, fenc, fenc, safe}},
	{"fenced", scenarios.Pinned, []scenarios.Expectation{safe, na, safe, fenc, fenc, fenc, fenc, safe, safe, safe, fenc, safe}},
}

// Expect returns the table's expectation for a cell, and false when the
// fault does not apply to it or the cell is not in the table.
func Expect(strategy string, topology scenarios.TopologyKind, fault string) (scenarios.Expectation, bool) {
	col := slices.Index(columns(), fault)
	for _, row := range expectations {
		if row.strategy == strategy && row.topology == topology && col >= 0 {
			e := row.cells[col]
			return e, e != na
		}
	}
	return "", false
}

// CellName is the scenario name of a cell, such as
// "fenced/transaction/KILL_LEADER"; the report directory follows it.
func CellName(strategy string, topology scenarios.TopologyKind, fault string) string {
	return strategy + "/" + string(topology) + "/" + fault
}

// Cell returns the scenario of one cell of the matrix; the error names
// the valid choices, or says the fault does not apply.
func Cell(strategy string, topology scenarios.TopologyKind, fault string) (scenarios.Scenario, error) {
	if !slices.Contains(Strategies, strategy) {
		return scenarios.Scenario{}, fmt.Errorf("unknown strategy %q; valid: %s", strategy, strings.Join(Strategies, ", "))
	}
	if !slices.Contains(Topologies, topology) {
		return scenarios.Scenario{}, fmt.Errorf("unknown topology %q; valid: %s", topology, joinTopologies(Topologies))
	}
	if !slices.Contains(columns(), fault) {
		return scenarios.Scenario{}, fmt.Errorf("unknown fault %q; valid: %s", fault, strings.Join(columns(), ", "))
	}
	expect, ok := Expect(strategy, topology, fault)
	if !ok {
		return scenarios.Scenario{}, fmt.Errorf("fault %s does not apply to strategy %s on topology %s", fault, strategy, topology)
	}
	sc := scenarios.Scenario{
		Name:     CellName(strategy, topology, fault),
		Strategy: strategy,
		Topology: scenarios.Topology{Kind: topology, PoolSize: poolSize(topology)},
		Fault:    fault,
		Expect:   expect,
	}
	sc.Duration = CellDuration(sc)
	sc.Description = fmt.Sprintf("chaos matrix: %s through %s, fault %s", strategy, topology, fault)
	return sc, nil
}

func poolSize(k scenarios.TopologyKind) int {
	if k == scenarios.Transaction || k == scenarios.Pinned {
		return 1
	}
	return 0
}

// CellDuration is how long a cell is measured: the fault comes at a third,
// so the rest must hold the fault's own length (Hold for the holding
// faults) and then about a TTL plus a second, for the failover and the
// work after it to show.
func CellDuration(sc scenarios.Scenario) time.Duration {
	sc = sc.WithDefaults()
	var length time.Duration
	switch sc.Fault {
	case FreezeLeader.Name(), PartitionLeader.Name(), DelayLeader.Name(), PgBouncerPause.Name():
		length = Hold(sc)
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

// Matrix returns every applicable cell for the given topologies (all four
// when none is given): strategies × topologies × (no fault and every
// fault), ordered by topology, strategy and fault, each with its
// expectation from the table.
func Matrix(topologies ...scenarios.TopologyKind) []scenarios.Scenario {
	if len(topologies) == 0 {
		topologies = Topologies
	}
	var out []scenarios.Scenario
	for _, topo := range topologies {
		for _, strategy := range Strategies {
			for _, fault := range columns() {
				if sc, err := Cell(strategy, topo, fault); err == nil {
					out = append(out, sc)
				}
			}
		}
	}
	return out
}

// ParseTopologies reads a comma-separated list of topologies, such as the
// CHAOS_TOPOLOGIES variable; the error lists the valid ones.
func ParseTopologies(list string) ([]scenarios.TopologyKind, error) {
	var out []scenarios.TopologyKind
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k := scenarios.TopologyKind(s)
		if !slices.Contains(Topologies, k) {
			return nil, fmt.Errorf("unknown topology %q; valid: %s", s, joinTopologies(Topologies))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no topology in %q; valid: %s", list, joinTopologies(Topologies))
	}
	return out, nil
}

func joinTopologies(ks []scenarios.TopologyKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// ExpectationTable renders the expectation table as text, one block per
// topology with a row per fault and a column per strategy ("-" where the
// fault does not apply). The package documentation shows it.
func ExpectationTable() string {
	var b strings.Builder
	for _, topo := range Topologies {
		fmt.Fprintf(&b, "%-26s", strings.ToUpper(string(topo)))
		for _, s := range Strategies {
			fmt.Fprintf(&b, "%-20s", s)
		}
		b.WriteString("\n")
		for _, fault := range columns() {
			fmt.Fprintf(&b, "%-26s", fault)
			for _, s := range Strategies {
				e, ok := Expect(s, topo, fault)
				if !ok {
					e = "-"
				}
				fmt.Fprintf(&b, "%-20s", e)
			}
			b.WriteString("\n")
		}
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n") + "\n"
}
