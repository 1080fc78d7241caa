package stack

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"
)

// ReplicationMode is how the primary of an HA stack replicates to its
// standby: see Options.Replication.
type ReplicationMode string

// The replication modes of an HA stack.
const (
	// ReplicationSync makes every commit wait until the standby has
	// flushed it (synchronous_standby_names = '*', synchronous_commit =
	// on), so a promotion loses nothing that was acknowledged.
	ReplicationSync ReplicationMode = "sync"
	// ReplicationAsync acknowledges a commit once the primary has it; the
	// standby follows as fast as it can, and what it had not received when
	// the primary died is lost by a promotion.
	ReplicationAsync ReplicationMode = "async"
)

// Check says what is wrong with m: nil for the two modes and for none.
func (m ReplicationMode) Check() error {
	switch m {
	case "", ReplicationSync, ReplicationAsync:
		return nil
	}
	return fmt.Errorf("replication mode %q is not one of %q and %q; leave it empty for one Postgres without a standby", string(m), ReplicationSync, ReplicationAsync)
}

// Role is what a server of an HA stack is to the pair.
type Role string

// The roles of an HA stack's servers.
const (
	// RolePrimary takes writes; the stack's address leads to it once
	// Repoint has followed a promotion.
	RolePrimary Role = "primary"
	// RoleStandby replays the primary's WAL and answers reads.
	RoleStandby Role = "standby"
	// RoleDown is a former primary that KillPrimary or ShutdownPrimary
	// took out of the pair; nothing starts it again.
	RoleDown Role = "down"
)

// Names of an HA stack's servers: PrimaryName starts as the primary and
// StandbyName as its standby; OracleName is the third server, which no
// failover touches (Stack.Oracle).
const (
	PrimaryName = "pg1"
	StandbyName = "pg2"
	OracleName  = "oracle"
)

// Replication is what an HA stack says of itself: its mode, each server of
// the pair with its role and version, and where the stack's address leads.
type Replication struct {
	// Mode is the replication mode the stack started with.
	Mode ReplicationMode
	// Nodes are the pair's servers, PrimaryName first.
	Nodes []Node
	// Routed names the node the stack's address leads to now.
	Routed string
}

// Node is one server of an HA pair.
type Node struct {
	// Name is PrimaryName or StandbyName.
	Name string
	// Role is what it is to the pair now.
	Role Role
	// Endpoint reaches it directly, around the stack's address: for
	// reading its own state (Stack.Timeline), never for a workload.
	Endpoint Endpoint
}

// ha is the failover side of a stack started with Options.Replication.
// Its fields other than the ones set at start are guarded by Stack.mu.
type ha struct {
	mode    ReplicationMode
	backend haBackend
	router  *router
	// oracle is the third server; oracleNode runs it.
	oracle     Endpoint
	oracleNode node
	nodes      []*haNode
	// routed is the index in nodes of the node the router leads to.
	routed int
	// conninfo is the standby's primary_conninfo as pg_basebackup wrote
	// it, restored by AttachStandby.
	conninfo string
}

// haNode is one server of the pair.
type haNode struct {
	name string
	node node
	// ep reaches it from this host, around the router; the router's
	// upstream is ep's host and port.
	ep   Endpoint
	role Role
}

// haBackend is what a provider implements to start an HA pair.
type haBackend interface {
	// startNode starts the node of spec: with spec.primary nil a primary,
	// initialised afresh with the stack's credentials; otherwise a
	// standby cloned from spec.primary with pg_basebackup -R. It returns
	// the node and the host and port this host reaches it at.
	startNode(ctx context.Context, spec nodeSpec) (node, string, int, error)
	// routerHost is an address of this host that the stack's clients
	// and its bouncers can both reach: the router listens there.
	routerHost(ctx context.Context) (string, error)
	// forwardBouncers makes the bouncers started from now on forward to
	// host:port rather than to the backend's own Postgres.
	forwardBouncers(host string, port int)
}

// nodeSpec is one node to start.
type nodeSpec struct {
	name                     string
	user, password, database string
	// primary is the node a standby clones and follows; nil for a
	// primary.
	primary *haNode
}

// settingsHA are the settings of both nodes of a pair, beside the
// stack's usual ones. A commit is acknowledged once the primary has
// written it (and, in sync mode, once the standby has flushed it), as
// in the deployments doublerun stands for; the stacks' usual
// synchronous_commit = off acknowledges before the WAL is written, which
// the walsender does not send, and would lose more than a real async
// failover does. fsync stays off, so a write is a write to the page cache.
var settingsHA = []string{"-c", "synchronous_commit=on", "-c", "wal_level=replica", "-c", "max_wal_senders=4", "-c", "hot_standby=on"}

// startReplication makes the stack an HA pair: the Postgres Start began
// with becomes the oracle server, a primary and its standby start beside
// it, and the router takes the stack's address (see "Failover" in the
// package documentation).
func (s *Stack) startReplication(ctx context.Context, mode ReplicationMode) error {
	hb, ok := s.backend.(haBackend)
	if !ok {
		return fmt.Errorf("replication: the %s provider cannot start a standby; use %s=native or docker", s.provider, EnvProvider)
	}
	h := &ha{mode: mode, backend: hb, oracle: s.postgres, oracleNode: s.pgNode}
	h.oracle.Name = OracleName
	s.ha = h
	primary, err := s.startHANode(ctx, nodeSpec{name: PrimaryName}, RolePrimary)
	if err != nil {
		return err
	}
	standby, err := s.startHANode(ctx, nodeSpec{name: StandbyName, primary: primary}, RoleStandby)
	if err != nil {
		return err
	}
	if err := h.configure(ctx, primary, standby); err != nil {
		return err
	}
	host, err := hb.routerHost(ctx)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	h.router, err = newRouter(host, hostPort(primary.ep.DSN))
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	rhost, rport := h.router.addr()
	hb.forwardBouncers(rhost, rport)
	s.pgNode = primary.node
	s.postgres = Endpoint{Name: PostgresName, DSN: dsn(s.user, s.password, rhost, rport, s.database)}
	if s.postgres.PostgresVersion, err = waitReady(ctx, s.postgres.DSN, primary.node); err != nil {
		return fmt.Errorf("replication: through the router: %w", err)
	}
	s.log.Info("replication ready", "mode", mode, "primary", primary.ep.PostgresVersion, "standby", standby.ep.PostgresVersion, "router", net.JoinHostPort(rhost, strconv.Itoa(rport)))
	return nil
}

// startHANode starts one node of the pair and waits until it answers.
func (s *Stack) startHANode(ctx context.Context, spec nodeSpec, role Role) (*haNode, error) {
	spec.user, spec.password, spec.database = s.user, s.password, s.database
	n, host, port, err := s.ha.backend.startNode(ctx, spec)
	if n != nil {
		s.mu.Lock()
		s.ha.nodes = append(s.ha.nodes, &haNode{name: spec.name, node: n, role: role})
		s.mu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("replication: %s: %w", spec.name, err)
	}
	hn := s.ha.nodes[len(s.ha.nodes)-1]
	hn.ep = Endpoint{Name: spec.name, DSN: dsn(s.user, s.password, host, port, s.database)}
	if hn.ep.PostgresVersion, err = waitReady(ctx, hn.ep.DSN, n); err != nil {
		return nil, fmt.Errorf("replication: %s: %w", spec.name, err)
	}
	return hn, nil
}

// configure makes the primary wait for its standby in sync mode, and waits
// until the standby streams in the mode asked for. synchronous_standby_names
// is set on the primary alone and after the clone, so the standby never has
// it: promoted, it would otherwise wait for a standby that no longer exists
// and never acknowledge a commit. (Set on the command line instead, an
// image's entrypoint would pass it to the server it initialises with, whose
// first commit would wait for ever.)
func (h *ha) configure(ctx context.Context, primary, standby *haNode) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	want := "async"
	if h.mode == ReplicationSync {
		want = "sync"
		if err := execOn(ctx, primary.ep.DSN, "ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"); err != nil {
			return fmt.Errorf("replication: make %s synchronous: %w", primary.name, err)
		}
	}
	if err := queryOn(ctx, standby.ep.DSN, "SHOW primary_conninfo", &h.conninfo); err != nil {
		return fmt.Errorf("replication: read %s's primary_conninfo: %w", standby.name, err)
	}
	return pollUntil(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		var state string
		err := queryOn(ctx, primary.ep.DSN, "SELECT coalesce(max(state || '/' || sync_state), 'none') FROM pg_stat_replication", &state)
		if err == nil && state != "streaming/"+want {
			err = fmt.Errorf("%s's standby is %s, not streaming/%s", primary.name, state, want)
		}
		return err
	})
}

// Oracle is the server the harness measures on, the one clock: on an HA
// stack a third Postgres that no failover touches, elsewhere the stack's
// own Postgres.
func (s *Stack) Oracle() Endpoint {
	if s.ext != nil && s.ext.oracle.DSN != "" {
		return s.ext.oracle
	}
	if s.ha == nil {
		return s.postgres
	}
	return s.ha.oracle
}

// Replication says what an HA stack is now; false for a stack without a
// standby.
func (s *Stack) Replication() (Replication, bool) {
	if s.ha == nil {
		return Replication{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Replication{Mode: s.ha.mode, Routed: s.ha.nodes[s.ha.routed].name}
	for _, n := range s.ha.nodes {
		r.Nodes = append(r.Nodes, Node{Name: n.name, Role: n.role, Endpoint: n.ep})
	}
	return r, true
}

// errNoReplication is what an HA operation says on a stack without a
// standby.
var errNoReplication = fmt.Errorf("the stack has no standby (%w); start it with Options.Replication", ErrNotSupported)

// withRole returns the first node of the pair with role r.
func (s *Stack) withRole(what string, r Role) (*haNode, error) {
	if s.ha == nil {
		return nil, fmt.Errorf("%s: %w", what, errNoReplication)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.ha.nodes {
		if n.role == r {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s: the pair has no %s left", what, r)
}

func (s *Stack) onStandby(ctx context.Context, what string, sql ...string) error {
	n, err := s.withRole(what, RoleStandby)
	if err != nil {
		return err
	}
	if err := execOn(ctx, n.ep.DSN, sql...); err != nil {
		return fmt.Errorf("%s on %s: %w", what, n.name, err)
	}
	return nil
}

func (s *Stack) setRole(n *haNode, r Role) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n.role = r
}

// haNodes are the servers of the pair and the oracle server that are not
// the stack's pgNode, for Close.
func (s *Stack) haNodes() []node {
	if s.ha == nil {
		return nil
	}
	var out []node
	for _, n := range s.ha.nodes {
		if n.node != s.pgNode {
			out = append(out, n.node)
		}
	}
	if s.ha.oracleNode != nil && s.ha.oracleNode != s.pgNode {
		out = append(out, s.ha.oracleNode)
	}
	return out
}

// closeRouter stops the router; Close calls it before it stops the
// servers, so no client reaches a server through it that is going away.
func (s *Stack) closeRouter() {
	if s.ha != nil && s.ha.router != nil {
		s.ha.router.close()
	}
}
