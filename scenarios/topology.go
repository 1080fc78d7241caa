package scenarios

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/doublerun/doublerun/scenarios/strategy"
)

// TopologyKind is how a replica reaches Postgres: the endpoint its lease
// uses and the one its work uses. See the package documentation.
type TopologyKind string

// The topologies.
const (
	Direct      TopologyKind = "direct"
	Session     TopologyKind = "session"
	Transaction TopologyKind = "transaction"
	Pinned      TopologyKind = "pinned"
	// Alias is the #556 fix on one PgBouncer: the same database under two
	// names, a session-mode one for the lease and a transaction-mode one
	// for the work (pgbouncer.Database.PoolMode).
	Alias TopologyKind = "alias"
)

// Topologies lists every topology, in the order tables show them.
var Topologies = []TopologyKind{Direct, Session, Transaction, Pinned, Alias}

// Pooled reports whether the work goes through PgBouncer.
func (k TopologyKind) Pooled() bool { return k != Direct }

// TransactionPooled reports whether the work goes through a transaction
// pool, whose size the Topology carries.
func (k TopologyKind) TransactionPooled() bool { return k == Transaction || k == Pinned || k == Alias }

// Topology is a TopologyKind with its transaction pool size.
type Topology struct {
	Kind TopologyKind `json:"kind"`
	// PoolSize is default_pool_size of the transaction pool (transaction,
	// pinned and alias); 0 means 1, the size at which #556 reproduces.
	PoolSize int `json:"pool_size,omitempty"`
}

func (t Topology) String() string {
	if t.Kind.TransactionPooled() {
		return fmt.Sprintf("%s(pool=%d)", t.Kind, cmp.Or(t.PoolSize, 1))
	}
	return string(t.Kind)
}

// ParseTopology reads one topology name; the error lists the valid ones.
func ParseTopology(name string) (TopologyKind, error) {
	k := TopologyKind(name)
	if !slices.Contains(Topologies, k) {
		return "", fmt.Errorf("unknown topology %q; valid: %s", name, topologyNames())
	}
	return k, nil
}

// ParseTopologies reads a comma-separated list of topologies, such as the
// CHAOS_TOPOLOGIES variable, dropping repeats; the error lists the valid
// ones.
func ParseTopologies(list string) ([]TopologyKind, error) {
	var out []TopologyKind
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k, err := ParseTopology(s)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no topology in %q; valid: %s", list, topologyNames())
	}
	return out, nil
}

func topologyNames() string {
	names := make([]string, len(Topologies))
	for i, k := range Topologies {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// CheckStrategyTopology returns nil when the strategy called name takes topology k's lease
// endpoint, and otherwise says why it refuses it. An unknown strategy is
// Validate's to report.
func CheckStrategyTopology(name string, k TopologyKind) error {
	s, ok := strategy.Lookup(name)
	if !ok || s.RefusesTransactionPooling == "" || k != Transaction {
		return nil
	}
	return fmt.Errorf("strategy %s refuses topology %s: %s; use direct, session or pinned", name, k, s.RefusesTransactionPooling)
}
