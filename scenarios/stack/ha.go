package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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
	if err := waitReady(ctx, s.postgres.DSN, primary.node); err != nil {
		return fmt.Errorf("replication: through the router: %w", err)
	}
	if s.postgres.PostgresVersion, err = probe(ctx, s.postgres.DSN); err != nil {
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
	if err := waitReady(ctx, hn.ep.DSN, n); err != nil {
		return nil, fmt.Errorf("replication: %s: %w", spec.name, err)
	}
	if hn.ep.PostgresVersion, err = probe(ctx, hn.ep.DSN); err != nil {
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

// KillPrimary kills the primary outright, as a crash of its machine
// would: SIGKILL to every process of the native server at once, or a
// kill of its container. It returns once the server is gone; the stack's
// address still leads to it (until Repoint), so clients that connect get
// no answer. The primary leaves the pair (RoleDown).
func (s *Stack) KillPrimary(ctx context.Context) error {
	n, err := s.withRole("kill primary", RolePrimary)
	if err != nil {
		return err
	}
	k, ok := n.node.(interface{ kill(context.Context) error })
	if !ok {
		return fmt.Errorf("kill primary: %w", ErrNotSupported)
	}
	if err := k.kill(ctx); err != nil {
		return fmt.Errorf("kill primary %s: %w", n.name, err)
	}
	s.setRole(n, RoleDown)
	return nil
}

// ShutdownPrimary stops the primary with a fast shutdown, as a planned
// switchover does: open transactions are rolled back, and the primary
// sends its standby every WAL record it wrote, its shutdown checkpoint
// included, before it exits. The primary leaves the pair (RoleDown).
func (s *Stack) ShutdownPrimary(ctx context.Context) error {
	n, err := s.withRole("shut down primary", RolePrimary)
	if err != nil {
		return err
	}
	if err := n.node.stop(ctx); err != nil {
		return fmt.Errorf("shut down primary %s: %w", n.name, err)
	}
	s.setRole(n, RoleDown)
	return nil
}

// Promote promotes the standby with pg_promote() and returns once it
// takes writes, on a new timeline. It does not check that the old primary
// is down: a real failover fences it first, and KillPrimary or
// ShutdownPrimary does that here. The stack's address still leads to the
// old primary until Repoint.
func (s *Stack) Promote(ctx context.Context) error {
	n, err := s.withRole("promote", RoleStandby)
	if err != nil {
		return err
	}
	var ok bool
	// wait_seconds bounds it on the server as well; the answer is false
	// when the promotion did not finish in that time.
	if err := queryOn(ctx, n.ep.DSN, "SELECT pg_promote(true, 60)", &ok); err != nil {
		return fmt.Errorf("promote %s: %w", n.name, err)
	}
	if !ok {
		return fmt.Errorf("promote %s: not promoted within 60s; see its log", n.name)
	}
	s.mu.Lock()
	for _, o := range s.ha.nodes {
		if o.role == RolePrimary {
			o.role = RoleDown
		}
	}
	n.role = RolePrimary
	s.pgNode = n.node
	s.mu.Unlock()
	return nil
}

// Repoint makes the stack's address lead to the primary, as an HA
// system's floating address or DNS name follows a promotion. Every
// connection through the address is closed: a client's next statement
// fails and its next connection reaches the new primary. It does nothing
// when the address already leads there.
func (s *Stack) Repoint(ctx context.Context) error {
	n, err := s.withRole("repoint", RolePrimary)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.ha.nodes) && s.ha.nodes[i] != n {
		i++
	}
	if i == s.ha.routed {
		return nil
	}
	if err := s.ha.router.repoint(hostPort(n.ep.DSN)); err != nil {
		return fmt.Errorf("repoint to %s: %w", n.name, err)
	}
	s.ha.routed = i
	return ctx.Err()
}

// PauseReplay pauses the standby's replay with pg_wal_replay_pause(): it
// still receives and keeps the primary's WAL, but its data stays where
// it was. A promotion replays what it received first, so a paused
// standby loses nothing at a failover (TestPausedReplayIsReplayedAtPromotion);
// DetachStandby is what loses commits.
func (s *Stack) PauseReplay(ctx context.Context) error {
	return s.onStandby(ctx, "pause replay", "SELECT pg_wal_replay_pause()")
}

// ResumeReplay undoes PauseReplay.
func (s *Stack) ResumeReplay(ctx context.Context) error {
	return s.onStandby(ctx, "resume replay", "SELECT pg_wal_replay_resume()")
}

// DetachStandby stops the standby's stream: it clears primary_conninfo,
// ends the primary's WAL sender, and returns once the standby has no WAL
// receiver and the primary no WAL sender. Commits acknowledged from then
// on are on the primary alone, and a failover loses them; in sync mode
// they wait for the standby, until AttachStandby.
//
// The WAL sender is ended because clearing primary_conninfo alone does
// not stop a paused standby: its startup process restarts the WAL
// receiver only where it waits for WAL, which a paused replay never
// reaches, so the receiver would stream on
// (TestKillInAsyncModeLosesWhatTheStandbyNeverReceived). A receiver
// that loses its sender is not restarted while replay is paused, nor at
// all once primary_conninfo is empty.
func (s *Stack) DetachStandby(ctx context.Context) error {
	n, err := s.withRole("detach standby", RoleStandby)
	if err != nil {
		return err
	}
	p, err := s.withRole("detach standby", RolePrimary)
	if err != nil {
		return err
	}
	if err := execOn(ctx, n.ep.DSN, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("detach standby %s: %w", n.name, err)
	}
	return pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var receivers, senders int
		// A receiver that connected again before the standby read its
		// new configuration is ended again.
		if err := queryOn(ctx, p.ep.DSN, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication", &senders); err != nil {
			return err
		}
		if err := queryOn(ctx, n.ep.DSN, "SELECT count(*) FROM pg_stat_wal_receiver", &receivers); err != nil {
			return err
		}
		if receivers+senders > 0 {
			return fmt.Errorf("detach standby %s: %d WAL receiver(s) and %d sender(s) still ran", n.name, receivers, senders)
		}
		return nil
	})
}

// AttachStandby undoes DetachStandby: the standby connects again and
// catches up.
func (s *Stack) AttachStandby(ctx context.Context) error {
	if s.ha == nil {
		return fmt.Errorf("attach standby: %w", errNoReplication)
	}
	return s.onStandby(ctx, "attach standby", "ALTER SYSTEM SET primary_conninfo = "+quoteLiteral(s.ha.conninfo), "SELECT pg_reload_conf()")
}

// CatchUp waits until the standby has replayed everything the primary
// had written when it was called.
func (s *Stack) CatchUp(ctx context.Context) error {
	p, err := s.withRole("catch up", RolePrimary)
	if err != nil {
		return err
	}
	n, err := s.withRole("catch up", RoleStandby)
	if err != nil {
		return err
	}
	var lsn string
	if err := queryOn(ctx, p.ep.DSN, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		return fmt.Errorf("catch up: %s: %w", p.name, err)
	}
	return pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var caught bool
		if err := queryOn(ctx, n.ep.DSN, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", &caught, lsn); err != nil {
			return err
		}
		if !caught {
			return fmt.Errorf("catch up: %s has not replayed up to %s", n.name, lsn)
		}
		return nil
	})
}

// RebuildStandby makes the pair whole again after a failover: the node
// that went down is removed and cloned afresh from the primary
// (pg_basebackup -R), and follows it as its standby in the stack's mode,
// so the stack can fail over again, onto the next timeline. The rebuilt
// node's direct endpoint is new (Replication reports it); the stack's
// address stays with the primary. A chaos matrix thus fails one stack
// over cell after cell rather than starting a pair for each.
func (s *Stack) RebuildStandby(ctx context.Context) error {
	down, err := s.withRole("rebuild standby", RoleDown)
	if err != nil {
		return err
	}
	primary, err := s.withRole("rebuild standby", RolePrimary)
	if err != nil {
		return err
	}
	if err := down.node.terminate(ctx); err != nil {
		return fmt.Errorf("rebuild standby: remove %s: %w", down.name, err)
	}
	spec := nodeSpec{name: down.name, user: s.user, password: s.password, database: s.database, primary: primary}
	n, host, port, err := s.ha.backend.startNode(ctx, spec)
	if n != nil {
		s.mu.Lock()
		down.node = n
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("rebuild standby %s: %w", down.name, err)
	}
	ep := Endpoint{Name: down.name, DSN: dsn(s.user, s.password, host, port, s.database)}
	if err := waitReady(ctx, ep.DSN, n); err != nil {
		return fmt.Errorf("rebuild standby %s: %w", down.name, err)
	}
	if ep.PostgresVersion, err = probe(ctx, ep.DSN); err != nil {
		return fmt.Errorf("rebuild standby %s: %w", down.name, err)
	}
	s.mu.Lock()
	down.ep, down.role = ep, RoleStandby
	s.mu.Unlock()
	return s.ha.configure(ctx, primary, down)
}

// timelineSQL is a server's timeline: a primary's from the name of the
// WAL file it writes (its first 8 hex digits), a standby's from its last
// checkpoint, since a standby writes no WAL of its own.
const timelineSQL = `SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())::bigint
ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`

// Timeline is the timeline of the node called name, PrimaryName or
// StandbyName: 1 at the start, and one more on every promotion.
func (s *Stack) Timeline(ctx context.Context, name string) (int64, error) {
	if s.ha == nil {
		return 0, fmt.Errorf("timeline: %w", errNoReplication)
	}
	s.mu.Lock()
	var n *haNode
	for _, o := range s.ha.nodes {
		if o.name == name {
			n = o
		}
	}
	s.mu.Unlock()
	if n == nil {
		return 0, fmt.Errorf("timeline: no node called %q; use %s or %s", name, PrimaryName, StandbyName)
	}
	var tl int64
	if err := queryOn(ctx, n.ep.DSN, timelineSQL, &tl); err != nil {
		return 0, fmt.Errorf("timeline of %s: %w", name, err)
	}
	return tl, nil
}

// WaitPrimary waits until a statement through dsn runs on a server that
// takes writes, and returns the instant it answered: after a failover,
// the first successful statement on the new primary through that way in.
func (s *Stack) WaitPrimary(ctx context.Context, dsn string) (time.Time, error) {
	var at time.Time
	err := pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		var recovering bool
		if err := queryOn(ctx, dsn, "SELECT pg_is_in_recovery()", &recovering); err != nil {
			return err
		}
		if recovering {
			return errors.New("the server is a standby")
		}
		at = time.Now()
		return nil
	})
	return at, err
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

// connectOnce opens one connection to dsn in the simple protocol, which
// any server answers, bounded by a connect timeout.
func connectOnce(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 2 * time.Second
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

// execOn runs each statement of sqls, in turn, on one connection to dsn.
func execOn(ctx context.Context, dsn string, sqls ...string) error {
	conn, err := connectOnce(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range sqls {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// queryOn scans the one value sql returns on dsn into dst.
func queryOn(ctx context.Context, dsn, sql string, dst any, args ...any) error {
	conn, err := connectOnce(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// pollUntil calls try every interval until it returns nil, and returns
// its last error when ctx ends first.
func pollUntil(ctx context.Context, interval time.Duration, try func(context.Context) error) error {
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
