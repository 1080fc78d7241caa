package chaos

import (
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// StandbyStrategies are the rows of the failover faults' blocks: the
// matrix's strategies and fenced-epoch, the fenced lease whose tokens
// carry the server's timeline, which holds where the plain fence's token
// goes back. It has no row under the other faults: there it is the plain
// fenced lease with a constant high word.
var StandbyStrategies = append(append([]string(nil), Strategies...), strategy.FencedEpoch)

// regr is the failover blocks' shorthand for a token regression.
const regr = scenarios.ExpectRegresses

// failoverTopologies are the topologies finding 14 measured the failover
// faults on: the direct endpoint, and a PgBouncer transaction pool, whose
// logins lock it out for server_login_retry after the promotion.
var failoverTopologies = []scenarios.TopologyKind{scenarios.Direct, scenarios.Transaction}

// syncFailoverRows are the rows of both failovers on a synchronous
// standby, which loses nothing: PRIMARY_FAILOVER and SWITCHOVER.
var syncFailoverRows = map[string]Row{
	strategy.Advisory:          {direct: fenc, tx: repr, tx2: orph, tx4: orph},
	strategy.AdvisoryUnguarded: {direct: fenc, tx: repr, tx2: orph, tx4: orph},
	strategy.AdvisoryWait:      {direct: fenc},
	strategy.Fenced:            {direct: safe, tx: safe},
	strategy.FencedEpoch:       {direct: safe, tx: safe},
}

// The failover faults' blocks (issue 32; chaos/FINDINGS.md, finding 14),
// each on the standby mode its cells run with. Through a transaction pool
// of one the advisory leases reproduce #556 before any fault, as under
// every other fault.
var (
	primaryFailoverBlock = Block{
		Standby: stack.ReplicationSync, Topologies: failoverTopologies,
		Why:  "a synchronous standby has every acknowledged commit, so nothing is lost (finding 14; the asynchronous runs lost nothing either): the fenced leases keep their term across the promotion on the direct endpoint and take a new one through the pool, locked out past their TTL (finding 15); the advisory locks vanish with the primary, so a follower can lead on the new one while the old leader's piece in flight runs on",
		Rows: syncFailoverRows}
	primaryFailoverLossyBlock = Block{
		Standby: stack.ReplicationAsync, Topologies: failoverTopologies,
		Why: "the promotion loses the grant made on the primary alone: the plain fence gives that token out again (a token regression, no legal order, every run of finding 14), where the epoch fence's first token on the new timeline is above every old one and refuses the old leader's late write; the advisory locks vanish with the primary as in PRIMARY_FAILOVER",
		Rows: map[string]Row{
			strategy.Advisory:          {direct: fenc, tx: repr, tx2: orph, tx4: orph},
			strategy.AdvisoryUnguarded: {direct: fenc, tx: repr, tx2: orph, tx4: orph},
			strategy.AdvisoryWait:      {direct: fenc},
			strategy.Fenced:            {direct: regr, tx: regr},
			strategy.FencedEpoch:       {direct: fenc, tx: fenc},
		}}
	switchoverBlock = Block{
		Standby: stack.ReplicationSync, Topologies: failoverTopologies,
		Why:  "a fast shutdown hands the standby every WAL record before the promotion, so nothing is lost and the fenced leases keep their term on the direct endpoint (finding 14; a new one through the pool, finding 15); the advisory locks vanish with the primary, and one run of 20 overlapped two leaders for the old leader's piece in flight (36 ms)",
		Rows: syncFailoverRows}
)

// applies reports whether fault f applies to strategy s on topology k
// with the block's standby.
func (b Block) applies(f, s string, k scenarios.TopologyKind) bool {
	sc := scenarios.Scenario{Strategy: s, Topology: scenarios.Topology{Kind: k}, Standby: b.Standby}
	if ft, ok := fault.Lookup(f); ok {
		return ft.Available(sc.FaultSetting())
	}
	return f == fault.None
}

// StandbyMatrix returns every cell of the failover faults' blocks for the
// given topologies (all of scenarios.Topologies when none is given), each
// on its block's standby: strategies of StandbyStrategies × topologies ×
// failover faults, ordered by topology, strategy and fault. Matrix has
// none of them: each mode needs a stack with a standby of its own, and a
// failover cell takes its stack's primary down, so they run only when
// asked (`doublerun chaos --standby`).
func StandbyMatrix(topologies ...scenarios.TopologyKind) []Cell {
	return table.cells(true, topologies)
}
