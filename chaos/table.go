package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Column is where in a row of the table an expectation holds: a topology,
// and, where cells show otherwise than the topology's own column says, one
// transaction pool size or one version set (stack.VersionSets). A zero
// PoolSize or Versions is every size or set without a column of its own.
type Column struct {
	Topology scenarios.TopologyKind
	PoolSize int
	Versions string
}

// String names the column as the rendered table does: "TRANSACTION",
// "TRANSACTION-POOL4", "TRANSACTION@pg17-pgbouncer1.24".
func (c Column) String() string {
	s := strings.ToUpper(string(c.Topology))
	if c.PoolSize > 0 {
		s += fmt.Sprintf("-POOL%d", c.PoolSize)
	}
	if c.Versions != "" {
		s += "@" + c.Versions
	}
	return s
}

// own reports whether c is a topology's own column: every pool size and
// every version set.
func (c Column) own() bool { return c.PoolSize == 0 && c.Versions == "" }

// Row is what one strategy must show under one fault, per column. A
// topology whose own column is missing is one where the fault does not
// apply, or whose lease endpoint the strategy refuses (advisory-wait on
// transaction; see scenarios.CheckStrategyTopology): the matrix has no
// such cell, at any pool size or on any set.
type Row map[Column]scenarios.Expectation

// Block is the table's block for one fault: a row per strategy of
// Strategies, and why the rows say what they say.
type Block struct {
	// Why gives the mechanism behind the block's expectations, naming the
	// findings (chaos/FINDINGS.md) that measured it.
	Why  string
	Rows map[string]Row
	// Standby is the replication mode of the standby the fault's cells
	// run with (stack.Options.Replication), for a fault that fails the
	// primary over; empty for one Postgres. A block with one has a row
	// per strategy of StandbyStrategies, and its cells run only when asked
	// (StandbyMatrix, `doublerun chaos --standby`), each mode on a stack of
	// its own.
	Standby stack.ReplicationMode
	// Topologies, when not nil, are the only topologies its cells were
	// measured on; the rendered table says "unmeasured" at the others
	// where the fault applies. Nil is every topology where it applies.
	Topologies []scenarios.TopologyKind
}

// strategies are the block's rows: StandbyStrategies for a block with a
// standby, Strategies otherwise.
func (b Block) strategies() []string {
	if b.Standby != "" {
		return StandbyStrategies
	}
	return Strategies
}

// Table is what every cell of the matrix must show, and why.
type Table struct {
	// Faults holds a block per fault of the catalog, and one for
	// fault.None.
	Faults map[string]Block
	// Columns says why each column other than a topology's own is there:
	// what the cells at that pool size or on that set do differently.
	Columns map[Column]string
}

// Expected is what a cell must show, and why.
type Expected struct {
	Expect scenarios.Expectation
	// Column is the column of the table that says so.
	Column Column
	// Why is the fault's block's reason, then the column's when it is not
	// the topology's own.
	Why string
}

// Shorthands for the table below.
const (
	safe = scenarios.ExpectSafe
	repr = scenarios.ExpectReproduces
	fenc = scenarios.ExpectFenced
	orph = scenarios.ExpectReproducesOrOrphans
)

var (
	direct  = Column{Topology: scenarios.Direct}
	session = Column{Topology: scenarios.Session}
	tx      = Column{Topology: scenarios.Transaction}
	tx2     = Column{Topology: scenarios.Transaction, PoolSize: 2}
	tx4     = Column{Topology: scenarios.Transaction, PoolSize: 4}
	pinned  = Column{Topology: scenarios.Pinned}
	alias   = Column{Topology: scenarios.Alias}
)

// poolWhy is why the advisory leases' transaction cells expect a
// double-run or an orphaned lock at pool sizes 2 and 4.
const poolWhy = "through a pool of several backends which backend each statement gets is up to PgBouncer, so a run shows either two leaders on one backend (#556) or a lock left on a backend nobody owns (FINDINGS.md, Pool sizes)"

// table is THE table of what each cell of the matrix must show, derived
// from measured runs on PostgreSQL 15 and PgBouncer 1.18 (chaos/FINDINGS.md
// holds them; the package documentation renders the table): a block per
// fault, a row per strategy, a column per topology, and the columns of the
// pool sizes and version sets where cells show otherwise. Through a
// transaction pool the advisory leases reproduce #556 under every fault:
// two replicas' lock calls share one backend, where a session lock is
// re-entrant. Adding a fault is one block here; TestTableIsComplete
// checks that the blocks, the strategies and the faults' Available agree.
var table = Table{
	Columns: map[Column]string{tx2: poolWhy, tx4: poolWhy},
	Faults: map[string]Block{
		fault.None: {
			Why: "no fault: one leader at a time wherever the lease's lock excludes the other replica; measured in every full run",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {direct: safe, session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {direct: safe, session: safe, tx: safe, pinned: safe, alias: safe},
			}},
		fault.TerminateLeaderBackend.Name(): {
			Why: "the lock dies with the backend at once, the old leader learns of it only at its next poll, after the rest of its piece, while the follower already leads (finding 1; waiting makes the overlap longer, finding 11); the fenced lease has no backend of its own to lose",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: repr, session: repr, tx: repr, tx2: orph, tx4: orph, pinned: repr, alias: repr},
				strategy.AdvisoryUnguarded: {direct: repr, session: repr, tx: repr, tx2: orph, tx4: orph, pinned: repr, alias: repr},
				strategy.AdvisoryWait:      {direct: repr, session: repr, pinned: repr, alias: repr},
				strategy.Fenced:            {},
			}},
		fault.KillLeader.Name(): {
			Why: "SIGKILL closes the leader's sockets, so the server frees its lock at once and the follower leads after the leader is gone; the fenced lease waits out its TTL",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {direct: safe, session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {direct: safe, session: safe, tx: safe, pinned: safe, alias: safe},
			}},
		fault.FreezeLeader.Name(): {
			Why: "a frozen advisory leader keeps its connection and so its lock, and nobody leads meanwhile; the fenced lease expires under a frozen leader, whose late write the fence refuses (finding 2)",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {direct: safe, session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc, alias: fenc},
			}},
		fault.PartitionLeader.Name(): {
			Why: "the server keeps the advisory lock on the partitioned leader's backend until the heal (finding 3), whose closing connections can overlap two leaders by milliseconds on a direct or pinned endpoint, guarded or not (finding 13): overlap allowed there, no stale write accepted; the fenced lease fails over after its TTL and overlaps the partitioned piece",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: fenc, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: fenc, alias: safe},
				strategy.AdvisoryUnguarded: {direct: fenc, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: fenc, alias: safe},
				strategy.AdvisoryWait:      {direct: fenc, session: safe, pinned: fenc, alias: safe},
				strategy.Fenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc, alias: fenc},
			}},
		fault.DelayLeader.Name(): {
			Why: "added latency slows the advisory leader's calls but leaves its lock where it is; the fenced lease's renewal can come back after its TTL",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {direct: safe, session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc, alias: fenc},
			}},
		fault.PgBouncerPause.Name(): {
			Why: "PAUSE never takes hold in session pooling while a lease keeps its session (finding 9); on pinned and alias it stalls the work but not the lease, so the fenced lease fails over while the old leader's write waits; through the transaction pool it holds the fenced lease's calls too, its term expires under the pause, and a new term is granted after RESUME, since an expired term is not renewed (finding 15)",
			Rows: map[string]Row{
				strategy.Advisory:          {session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {session: safe, tx: fenc, pinned: fenc, alias: fenc},
			}},
		fault.PgBouncerKill.Name(): {
			Why: "killing the session pool's connections ends the lease's backend as TERMINATE does, with less room: the old leader's work connections break too (finding 8)",
			Rows: map[string]Row{
				strategy.Advisory:          {session: fenc, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {session: fenc, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {session: fenc, pinned: safe, alias: safe},
				strategy.Fenced:            {session: safe, tx: safe, pinned: safe, alias: safe},
			}},
		fault.PgBouncerReconnect.Name(): {
			Why: "RECONNECT closes server connections only once they are idle, and never the lease's session, so no lock moves",
			Rows: map[string]Row{
				strategy.Advisory:          {session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {session: safe, tx: safe, pinned: safe, alias: safe},
			}},
		fault.PgBouncerRestart.Name(): {
			Why: "the restart drops the lease's session and the work's backends together, so the follower can take the lock while the old leader's piece still runs (finding 8)",
			Rows: map[string]Row{
				strategy.Advisory:          {session: fenc, tx: repr, tx2: orph, tx4: orph, pinned: fenc, alias: fenc},
				strategy.AdvisoryUnguarded: {session: fenc, tx: repr, tx2: orph, tx4: orph, pinned: fenc, alias: fenc},
				strategy.AdvisoryWait:      {session: fenc, pinned: fenc, alias: fenc},
				strategy.Fenced:            {session: safe, tx: safe, pinned: safe, alias: safe},
			}},
		fault.PostgresRestart.Name(): {
			Why: "the old leader's piece hangs in a write the restart broke while the follower takes the freed lock, in some runs and not others (finding 4)",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: fenc, session: fenc, tx: repr, tx2: orph, tx4: orph, pinned: fenc, alias: fenc},
				strategy.AdvisoryUnguarded: {direct: fenc, session: fenc, tx: repr, tx2: orph, tx4: orph, pinned: fenc, alias: fenc},
				strategy.AdvisoryWait:      {direct: fenc, session: fenc, pinned: fenc, alias: fenc},
				strategy.Fenced:            {direct: fenc, session: fenc, tx: fenc, pinned: fenc, alias: fenc},
			}},
		fault.GracefulHandover.Name(): {
			Why: "the leader ends its piece and then releases, so the follower leads after it; on the session name the reset query frees the lock (alias)",
			Rows: map[string]Row{
				strategy.Advisory:          {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryUnguarded: {direct: safe, session: safe, tx: repr, tx2: orph, tx4: orph, pinned: safe, alias: safe},
				strategy.AdvisoryWait:      {direct: safe, session: safe, pinned: safe, alias: safe},
				strategy.Fenced:            {direct: safe, session: safe, tx: safe, pinned: safe, alias: safe},
			}},
		fault.PrimaryFailover.Name():      primaryFailoverBlock,
		fault.PrimaryFailoverLossy.Name(): primaryFailoverLossyBlock,
		fault.Switchover.Name():           switchoverBlock,
	},
}

// Expect returns what cell c must show and why, read from its fields alone
// (strategy, topology, pool size, fault, version set), and false when the
// matrix has no such cell.
func Expect(c Cell) (Expected, bool) { return table.Expect(c) }

// Expect returns what cell c must show and why, and false when t has no
// such cell. The most particular column that holds c answers: its pool
// size on its set, then its set, then its pool size, then its topology's
// own column (TestTableIsComplete keeps a cell from having both a set's
// and a pool size's column without one for both).
func (t Table) Expect(c Cell) (Expected, bool) {
	b := t.Faults[cmp.Or(c.Fault, fault.None)]
	row := b.Rows[c.Strategy]
	if _, ok := row[Column{Topology: c.Topology}]; !ok || c.Standby != b.Standby {
		// A cell on another standby, or none, than its fault's block
		// was measured with is none of the table's.
		return Expected{}, false
	}
	for _, col := range c.columns() {
		e, ok := row[col]
		if !ok {
			continue
		}
		why := b.Why
		if !col.own() {
			why += "; " + col.String() + ": " + t.Columns[col]
		}
		return Expected{Expect: e, Column: col, Why: why}, true
	}
	panic("unreachable: the topology's own column holds every cell")
}

// columns are the columns that may hold c, most particular first. A
// set's column reaches a cell at every pool size it does not name: a set
// whose servers differ must not be judged by the pool size's column
// measured on another (caught by TestVersionOverrideReachesEveryPoolSize).
func (c Cell) columns() []Column {
	size := 0
	if c.PoolSize > 1 && c.Topology.TransactionPooled() {
		size = c.PoolSize
	}
	var out []Column
	for _, col := range []Column{
		{c.Topology, size, c.Versions},
		{c.Topology, 0, c.Versions},
		{c.Topology, size, ""},
		{c.Topology, 0, ""},
	} {
		if !slices.Contains(out, col) {
			out = append(out, col)
		}
	}
	return out
}

// tableColumns are the columns t's rows use, the topologies' own first,
// in scenarios.Topologies order, each followed by its pool sizes and
// sets, sorted.
func (t Table) tableColumns() []Column {
	seen := map[Column]bool{}
	for _, b := range t.Faults {
		for _, row := range b.Rows {
			for col := range row {
				seen[col] = true
			}
		}
	}
	for _, k := range scenarios.Topologies {
		seen[Column{Topology: k}] = true
	}
	return slices.SortedFunc(maps.Keys(seen), func(a, b Column) int {
		return cmp.Or(
			cmp.Compare(slices.Index(scenarios.Topologies, a.Topology), slices.Index(scenarios.Topologies, b.Topology)),
			cmp.Compare(a.PoolSize, b.PoolSize),
			strings.Compare(a.Versions, b.Versions),
		)
	})
}

// ExpectationTable renders the table as text: a block per column, each a
// row per fault (with the standby's mode of a failover fault) and a
// column per strategy of StandbyStrategies ("-" where the fault does not
// apply or the strategy has no row under it, "refused" where the strategy
// refuses the topology's lease endpoint, "unmeasured" where a failover
// fault applies and its cells were not measured). A block of a pool size or a version set shows what each cell
// there expects, its own column's or its topology's. The package
// documentation shows it.
func ExpectationTable() string { return table.render() }

func (t Table) render() string {
	// A line per block header and fault, each a label and a text per
	// strategy, laid out in columns as wide as their widest text.
	var lines [][]string
	for _, col := range t.tableColumns() {
		lines = append(lines, append([]string{col.String()}, StandbyStrategies...))
		for _, f := range columns() {
			b := t.Faults[f]
			label := f
			if b.Standby != "" {
				label += " (" + string(b.Standby) + ")"
			}
			line := []string{label}
			for _, s := range StandbyStrategies {
				c := Cell{Strategy: s, Topology: col.Topology, PoolSize: col.PoolSize, Fault: f, Versions: col.Versions, Standby: b.Standby}
				e, ok := t.Expect(c)
				text := string(e.Expect)
				_, hasRow := b.Rows[s]
				switch {
				case ok:
				case !hasRow:
					text = "-"
				case scenarios.CheckStrategyTopology(s, col.Topology) != nil:
					text = "refused"
				case b.Topologies != nil && !slices.Contains(b.Topologies, col.Topology) && b.applies(f, s, col.Topology):
					text = "unmeasured"
				default:
					text = "-"
				}
				line = append(line, text)
			}
			lines = append(lines, line)
		}
	}
	widths := []int{26, 20}
	for _, line := range lines {
		widths[0] = max(widths[0], len(line[0])+2)
		for _, text := range line[1:] {
			widths[1] = max(widths[1], len(text)+2)
		}
	}
	var b strings.Builder
	for _, line := range lines {
		l := fmt.Sprintf("%-*s", widths[0], line[0])
		for _, text := range line[1:] {
			l += fmt.Sprintf("%-*s", widths[1], text)
		}
		b.WriteString(strings.TrimRight(l, " ") + "\n")
	}
	return b.String()
}
