package chaos

import (
	"fmt"
	"strings"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
)

// Row is what one strategy must show under one fault, per topology. A
// topology missing from a row is one where the fault does not apply, or
// whose lease endpoint the strategy refuses (advisory-wait on transaction;
// see scenarios.CheckStrategyTopology).
type Row map[scenarios.TopologyKind]scenarios.Expectation

// Shorthands for the grid below.
const (
	safe = scenarios.ExpectSafe
	repr = scenarios.ExpectReproduces
	fenc = scenarios.ExpectFenced

	direct  = scenarios.Direct
	session = scenarios.Session
	tx      = scenarios.Transaction
	pinned  = scenarios.Pinned
)

// grid is THE table of what each cell of the matrix must show, derived
// from measured runs (see "The matrix" and "Findings" in the package
// documentation, which renders it): per fault (fault.None for no fault), a
// row per strategy of Strategies. Adding a fault is one block here;
// TestGridIsComplete checks that the blocks, the strategies and the
// faults' Available agree.
var grid = map[string]map[string]Row{
	fault.None: {
		scenarios.StrategyAdvisory:          {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {direct: safe, session: safe, pinned: safe},
		scenarios.StrategyFenced:            {direct: safe, session: safe, tx: safe, pinned: safe},
	},
	fault.TerminateLeaderBackend.Name(): {
		scenarios.StrategyAdvisory:          {direct: repr, session: repr, tx: repr, pinned: repr},
		scenarios.StrategyAdvisoryUnguarded: {direct: repr, session: repr, tx: repr, pinned: repr},
		scenarios.StrategyAdvisoryWait:      {direct: repr, session: repr, pinned: repr},
		scenarios.StrategyFenced:            {},
	},
	fault.KillLeader.Name(): {
		scenarios.StrategyAdvisory:          {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {direct: safe, session: safe, pinned: safe},
		scenarios.StrategyFenced:            {direct: safe, session: safe, tx: safe, pinned: safe},
	},
	fault.FreezeLeader.Name(): {
		scenarios.StrategyAdvisory:          {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {direct: safe, session: safe, pinned: safe},
		scenarios.StrategyFenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc},
	},
	fault.PartitionLeader.Name(): {
		scenarios.StrategyAdvisory:          {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {direct: fenc, session: safe, tx: repr, pinned: fenc}, // finding 13
		scenarios.StrategyAdvisoryWait:      {direct: safe, session: safe, pinned: safe},
		scenarios.StrategyFenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc},
	},
	fault.DelayLeader.Name(): {
		scenarios.StrategyAdvisory:          {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {direct: safe, session: safe, pinned: safe},
		scenarios.StrategyFenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc},
	},
	fault.PgBouncerPause.Name(): {
		scenarios.StrategyAdvisory:          {session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {session: safe, pinned: safe},
		scenarios.StrategyFenced:            {session: safe, tx: fenc, pinned: fenc},
	},
	fault.PgBouncerKill.Name(): {
		scenarios.StrategyAdvisory:          {session: fenc, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {session: fenc, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {session: fenc, pinned: safe},
		scenarios.StrategyFenced:            {session: safe, tx: safe, pinned: safe},
	},
	fault.PgBouncerReconnect.Name(): {
		scenarios.StrategyAdvisory:          {session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {session: safe, pinned: safe},
		scenarios.StrategyFenced:            {session: safe, tx: safe, pinned: safe},
	},
	fault.PgBouncerRestart.Name(): {
		scenarios.StrategyAdvisory:          {session: fenc, tx: repr, pinned: fenc},
		scenarios.StrategyAdvisoryUnguarded: {session: fenc, tx: repr, pinned: fenc},
		scenarios.StrategyAdvisoryWait:      {session: fenc, pinned: fenc},
		scenarios.StrategyFenced:            {session: safe, tx: safe, pinned: safe},
	},
	fault.PostgresRestart.Name(): {
		scenarios.StrategyAdvisory:          {direct: fenc, session: fenc, tx: repr, pinned: fenc},
		scenarios.StrategyAdvisoryUnguarded: {direct: fenc, session: fenc, tx: repr, pinned: fenc},
		scenarios.StrategyAdvisoryWait:      {direct: fenc, session: fenc, pinned: fenc},
		scenarios.StrategyFenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc},
	},
	fault.GracefulHandover.Name(): {
		scenarios.StrategyAdvisory:          {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryUnguarded: {direct: safe, session: safe, tx: repr, pinned: safe},
		scenarios.StrategyAdvisoryWait:      {direct: safe, session: safe, pinned: safe},
		scenarios.StrategyFenced:            {direct: safe, session: safe, tx: safe, pinned: safe},
	},
}

// Expect returns the grid's expectation for a cell, and false when the
// fault does not apply to it or the cell is not in the grid.
func Expect(strategy string, topology scenarios.TopologyKind, faultName string) (scenarios.Expectation, bool) {
	if topology == scenarios.Alias {
		e, ok := aliasGrid[faultName][strategy]
		return e, ok
	}
	e, ok := grid[faultName][strategy][topology]
	return e, ok
}

// ExpectationTable renders the grid as text, one block per topology with a
// row per fault and a column per strategy ("-" where the fault does not
// apply, "refused" where the strategy refuses the topology's lease
// endpoint). The package documentation shows it.
func ExpectationTable() string {
	var b strings.Builder
	for _, topo := range scenarios.Topologies {
		fmt.Fprintf(&b, "%-26s", strings.ToUpper(string(topo)))
		for _, s := range Strategies {
			fmt.Fprintf(&b, "%-20s", s)
		}
		b.WriteString("\n")
		for _, f := range columns() {
			fmt.Fprintf(&b, "%-26s", f)
			for _, s := range Strategies {
				e, ok := Expect(s, topo, f)
				switch {
				case ok:
				case scenarios.CheckStrategyTopology(s, topo) != nil:
					e = "refused"
				default:
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
