package chaos

import (
	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
)

// aliasGrid is the grid's column for the alias topology (one PgBouncer,
// the lease on a session-mode name, the work on a transaction-mode name):
// per fault, per strategy, what the cell must show. It stands beside grid
// rather than in it; Expect reads it for scenarios.Alias. A strategy
// missing from a block is one the fault does not apply to. The
// measurements behind it are in "The alias topology" in the package
// documentation.
var aliasGrid = map[string]map[string]scenarios.Expectation{
	fault.None: {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: safe},
	fault.TerminateLeaderBackend.Name(): {
		scenarios.StrategyAdvisory: repr, scenarios.StrategyAdvisoryWait: repr, scenarios.StrategyAdvisoryUnguarded: repr},
	fault.KillLeader.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: safe},
	fault.FreezeLeader.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: fenc},
	fault.PartitionLeader.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: fenc},
	fault.DelayLeader.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: fenc},
	fault.PgBouncerPause.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: fenc},
	fault.PgBouncerKill.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: safe},
	fault.PgBouncerReconnect.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: safe},
	fault.PgBouncerRestart.Name(): {
		scenarios.StrategyAdvisory: fenc, scenarios.StrategyAdvisoryWait: fenc, scenarios.StrategyAdvisoryUnguarded: fenc, scenarios.StrategyFenced: safe},
	fault.PostgresRestart.Name(): {
		scenarios.StrategyAdvisory: fenc, scenarios.StrategyAdvisoryWait: fenc, scenarios.StrategyAdvisoryUnguarded: fenc, scenarios.StrategyFenced: fenc},
	fault.GracefulHandover.Name(): {
		scenarios.StrategyAdvisory: safe, scenarios.StrategyAdvisoryWait: safe, scenarios.StrategyAdvisoryUnguarded: safe, scenarios.StrategyFenced: safe},
}
