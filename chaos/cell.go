package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Strategies are the matrix's strategies, in table order.
var Strategies = []string{strategy.Advisory, strategy.AdvisoryUnguarded, strategy.AdvisoryWait, strategy.Fenced}

// columns are the matrix's faults: no fault, then the catalog in order.
func columns() []string { return append([]string{fault.None}, fault.Names()...) }

// MaxPoolSize is the largest transaction pool a cell may ask for, the
// stack's bound (stack.CheckPoolSize says why).
const MaxPoolSize = stack.MaxPoolSize

// DefaultPoolSizes is the matrix's pool-size axis when none is given: a
// pool of one backend, the size at which #556 reproduces.
var DefaultPoolSizes = []int{1}

// Cell is one cell of the matrix, as the fields its expectation is read
// from (Expect). It is data from selection to report: nothing about a cell
// is read back from its name.
type Cell struct {
	Strategy string
	Topology scenarios.TopologyKind
	// PoolSize is the size of the transaction pool of a topology that has
	// one (transaction, pinned, alias); 0 and 1 are a pool of one backend,
	// the size at which #556 reproduces. It means nothing for direct and
	// session.
	PoolSize int
	// Fault names a fault of the catalog, or fault.None.
	Fault string
	// Versions is the version set the cell runs on (stack.VersionSets), as
	// its stack's servers make it up; "" reads the table's own columns,
	// measured on pg15-pgbouncer1.18. RunSets sets it.
	Versions string
	// Standby is the replication mode of the standby the cell's stack
	// has: its fault's block's (Block.Standby), which StandbyMatrix sets;
	// empty for one Postgres.
	Standby stack.ReplicationMode
}

// poolSize is c's pool size where it means something and is above one,
// else 0.
func (c Cell) poolSize() int {
	if c.Topology.TransactionPooled() && c.PoolSize > 1 {
		return c.PoolSize
	}
	return 0
}

// Name is the scenario name of c, such as "fenced/transaction/KILL_LEADER",
// with the pool size in the topology above one, as in
// "advisory/transaction-pool4/KILL_LEADER"; the report directory follows
// it. The version set is not in it: a run on several sets writes each
// set's reports under a directory of its own.
func (c Cell) Name() string {
	topology := string(c.Topology)
	if n := c.poolSize(); n > 0 {
		topology += fmt.Sprintf("-pool%d", n)
	}
	return c.Strategy + "/" + topology + "/" + c.Fault
}

// Scenario returns the scenario that runs c, expecting what Expect says,
// measured for CellDuration. The error says what is wrong with c: that its
// strategy is not one of the matrix's, or what Validate finds (an unknown
// topology or fault, a fault that does not apply, a topology the strategy
// refuses, a pool size out of range).
func (c Cell) Scenario() (scenarios.Scenario, error) { return table.scenario(c) }

func (t Table) scenario(c Cell) (scenarios.Scenario, error) {
	valid := Strategies
	if c.Standby != "" {
		valid = StandbyStrategies
	}
	if !slices.Contains(valid, c.Strategy) {
		return scenarios.Scenario{}, fmt.Errorf("unknown strategy %q; valid: %s", c.Strategy, strings.Join(valid, ", "))
	}
	topology := scenarios.Topology{Kind: c.Topology, PoolSize: c.poolSize()}
	described := string(c.Topology)
	if topology.PoolSize > 0 {
		described = topology.String()
	}
	sc := scenarios.Scenario{
		Name:        c.Name(),
		Description: fmt.Sprintf("chaos matrix: %s through %s, fault %s", c.Strategy, described, c.Fault),
		Strategy:    c.Strategy,
		Topology:    topology,
		Fault:       c.Fault,
		Standby:     c.Standby,
	}
	if c.Standby != "" {
		sc.Description += fmt.Sprintf(", %s standby", c.Standby)
	}
	e, inTable := t.Expect(c)
	sc.Expect = e.Expect
	if !inTable {
		// The table has no cell where the fault does not apply or the
		// strategy refuses the topology; Validate says which, given an
		// expectation to judge the other fields by.
		sc.Expect = scenarios.ExpectSafe
	}
	if err := sc.Validate(); err != nil {
		return scenarios.Scenario{}, err
	}
	if !inTable {
		return scenarios.Scenario{}, fmt.Errorf("cell %s is not in the matrix's table", c.Name())
	}
	sc.Duration = CellDuration(sc)
	return sc, nil
}

// CellDuration is how long a cell is measured: the fault comes at a third,
// so the rest must hold the fault's own length (fault.HeldFor) and then
// about a TTL plus a second, for the failover and the work after it to
// show.
func CellDuration(sc scenarios.Scenario) time.Duration {
	setting := sc.FaultSetting()
	var length time.Duration
	if f, ok := fault.Lookup(sc.Fault); ok {
		length = fault.HeldFor(f, setting)
	}
	after := setting.TTL + time.Second
	// D - D/3 >= length + after, in whole seconds.
	need := 3 * (length + after) / 2
	d := need.Truncate(time.Second)
	if d < need {
		d += time.Second
	}
	return max(5*time.Second, d)
}

// Matrix returns every cell of the table for the given topologies (all of
// scenarios.Topologies when none is given), with a pool of one:
// strategies × topologies × (no fault and every fault), ordered by
// topology, strategy and fault.
//
// The failover faults' cells are not among them: StandbyMatrix has them.
func Matrix(topologies ...scenarios.TopologyKind) []Cell { return table.cells(false, topologies) }

// cells are t's cells on topologies (every one when none is given), of
// the blocks with a standby or of those without, ordered by topology,
// strategy (StandbyStrategies order) and fault.
func (t Table) cells(standby bool, topologies []scenarios.TopologyKind) []Cell {
	if len(topologies) == 0 {
		topologies = scenarios.Topologies
	}
	var out []Cell
	for _, topo := range topologies {
		for _, strategy := range StandbyStrategies {
			for _, f := range columns() {
				b := t.Faults[f]
				if (b.Standby != "") != standby {
					continue
				}
				c := Cell{Strategy: strategy, Topology: topo, Fault: f, Standby: b.Standby}
				if _, ok := t.Expect(c); ok {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// AtPoolSizes returns cells with every cell of a topology with a
// transaction pool repeated once per size (a size of 1 keeps the cell as
// it is); other cells appear once. The order is the cells', sizes
// ascending within each.
func AtPoolSizes(cells []Cell, sizes []int) []Cell {
	var out []Cell
	for _, c := range cells {
		if !c.Topology.TransactionPooled() {
			out = append(out, c)
			continue
		}
		for _, size := range sizes {
			at := c
			if size > 1 {
				at.PoolSize = size
			}
			out = append(out, at)
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
