package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// haRoute is a way an HA test starts its stack: a provider, and for the
// docker provider whether its containers share the host's network (the
// default on a Linux engine) or sit on a private one (as on Docker
// Desktop), where the router listens on the network's gateway and the
// standby reaches the primary by its alias.
type haRoute struct {
	name string
	opts Options
}

// haProviders are the routes an HA test runs on: native, and docker on
// both networks unless the run asked for the native or external
// provider (as requireDocker) or the binary was built without it; bridge
// says whether the test takes the private network too.
func haProviders(t *testing.T, bridge bool) []haRoute {
	t.Helper()
	out := []haRoute{{"native", Options{Provider: ProviderNative}}}
	if p := Provider(os.Getenv(EnvProvider)); p == ProviderNative || p == ProviderExternal {
		return out
	}
	// prepareRyuk, not dockerAvailable: testcontainers must not be
	// configured before doublerun decides about Ryuk.
	if _, err := prepareRyuk(context.Background(), slog.New(slog.DiscardHandler)); errors.Is(err, errNoDocker) {
		return out
	}
	out = append(out, haRoute{"docker", Options{Provider: ProviderDocker}})
	if bridge {
		out = append(out, haRoute{"docker-bridge", Options{Provider: ProviderDocker, dockerBridge: true}})
	}
	return out
}

// startHA starts an HA stack of the test's own on route r and, when the
// test ends, closes it and checks that nothing of it is left.
func startHA(t *testing.T, r haRoute, mode ReplicationMode) *Stack {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := r.opts
	opts.Replication, opts.Logger = mode, log
	s, err := Start(context.Background(), opts)
	require.NoError(t, err)
	nodes, b := s.nodes(), s.backend
	t.Cleanup(func() {
		// A native server's System V segment: a clean shutdown removes
		// its own, and Close the one a killed server left.
		var pms []postmasterPID
		if nb, ok := b.(*nativeBackend); ok {
			files, _ := filepath.Glob(filepath.Join(nb.dir, "pgdata*", "postmaster.pid"))
			for _, f := range files {
				if pm, ok := readPostmasterPID(f); ok {
					pms = append(pms, pm)
				}
			}
			require.NotEmpty(t, pms)
		}
		require.NoError(t, s.Close(context.Background()))
		requireNothingLeft(t, b, nodes)
		for _, pm := range pms {
			var desc unix.SysvShmDesc
			_, err := unix.SysvShmCtl(pm.shmID, unix.IPC_STAT, &desc)
			require.True(t, err != nil || desc.Perm.Key != pm.shmKey || desc.Cpid != pm.pid, "the segment %d of postmaster %d is gone", pm.shmID, pm.pid)
		}
	})
	return s
}

// haExec runs sql on dsn and fails the test on an error.
func haExec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connectOnce(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err, sql)
}

// haInts is the one int column sql returns on dsn.
func haInts(t *testing.T, dsn, sql string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connectOnce(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, sql)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return got
}

func haValue[T any](t *testing.T, dsn, sql string) T {
	t.Helper()
	var v T
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, queryOn(ctx, dsn, sql, &v), sql)
	return v
}

func nodeNamed(t *testing.T, s *Stack, name string) Node {
	t.Helper()
	r, ok := s.Replication()
	require.True(t, ok)
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return Node{}
}

// A stack with a standby reports its mode, both servers with their roles
// and versions, and a third server for the oracle; its address, and the
// bouncers behind it, lead to the primary.
func requirePair(t *testing.T, s *Stack, mode ReplicationMode) {
	t.Helper()
	r, ok := s.Replication()
	require.True(t, ok)
	require.Equal(t, mode, r.Mode)
	require.Equal(t, PrimaryName, r.Routed)
	require.Len(t, r.Nodes, 2)
	require.Equal(t, []Role{RolePrimary, RoleStandby}, []Role{r.Nodes[0].Role, r.Nodes[1].Role})
	for _, n := range r.Nodes {
		require.NotEmpty(t, n.Endpoint.PostgresVersion, n.Name)
		require.Equal(t, int64(1), haValue[int64](t, n.Endpoint.DSN, "SELECT 1")) // answers directly
	}
	primary, standby := r.Nodes[0].Endpoint.DSN, r.Nodes[1].Endpoint.DSN
	id := "SELECT system_identifier::text FROM pg_control_system()"
	require.Equal(t, haValue[string](t, primary, id), haValue[string](t, standby, id), "the standby is a clone of the primary")
	require.NotEqual(t, haValue[string](t, primary, id), haValue[string](t, s.Oracle().DSN, id), "the oracle is a server of its own")
	for _, ep := range []Endpoint{s.Postgres(), s.Session(), s.Transaction()} {
		require.Equal(t, haValue[string](t, primary, id), haValue[string](t, ep.DSN, id), "%s leads to the primary", ep.Name)
		require.False(t, haValue[bool](t, ep.DSN, "SELECT pg_is_in_recovery()"), ep.Name)
	}
	require.Equal(t, "streaming/"+string(mode), haValue[string](t, primary, "SELECT state || '/' || sync_state FROM pg_stat_replication"))
	ctx := context.Background()
	for _, name := range []string{PrimaryName, StandbyName} {
		tl, err := s.Timeline(ctx, name)
		require.NoError(t, err)
		require.Equal(t, int64(1), tl, name)
	}
	// A database made for a test is on the pair and on the oracle.
	db, err := s.CreateDatabase(ctx, "t_")
	require.NoError(t, err)
	haExec(t, s.Postgres().WithDatabase(db).DSN, "SELECT 1")
	haExec(t, s.Oracle().WithDatabase(db).DSN, "SELECT 1")
	require.NoError(t, s.DropDatabase(ctx, db))
}

// The planned switchover in sync mode: every commit waited for the
// standby, the fast shutdown hands it all over, the promoted standby is on
// timeline 2 and takes writes without waiting for a standby it no longer
// has, and the stack's address and its bouncers lead there after Repoint.
func TestSwitchoverInSyncModeLosesNothing(t *testing.T) {
	t.Parallel()
	for _, r := range haProviders(t, false) {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := startHA(t, r, ReplicationSync)
			requirePair(t, s, ReplicationSync)
			primary := nodeNamed(t, s, PrimaryName).Endpoint.DSN
			haExec(t, s.Postgres().DSN, "CREATE TABLE acked (i int)")

			// Sync mode shows in behaviour: with the standby detached a
			// commit waits for it (SyncRep), and goes through once it is
			// back.
			require.NoError(t, s.DetachStandby(ctx))
			done := make(chan error, 1)
			go func() {
				conn, err := connectOnce(ctx, s.Transaction().DSN)
				if err == nil {
					_, err = conn.Exec(ctx, "INSERT INTO acked VALUES (0)")
					conn.Close(ctx)
				}
				done <- err
			}()
			require.NoError(t, pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
				var n int
				if err := queryOn(ctx, primary, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", &n); err != nil || n == 1 {
					return err
				}
				select {
				case err := <-done:
					t.Fatalf("the commit returned (%v) with the standby detached", err)
				default:
				}
				return errors.New("no commit waits for the standby yet")
			}))
			require.NoError(t, s.AttachStandby(ctx))
			require.NoError(t, <-done)

			for i := 1; i <= 20; i++ {
				haExec(t, s.Transaction().DSN, "INSERT INTO acked VALUES ($1)", i)
			}
			require.NoError(t, s.ShutdownPrimary(ctx))
			_, err := connectOnce(ctx, s.Postgres().DSN)
			require.Error(t, err, "before Repoint the address leads to the old primary")
			require.NoError(t, s.Promote(ctx))
			tl, err := s.Timeline(ctx, StandbyName)
			require.NoError(t, err)
			require.Equal(t, int64(2), tl, "a promotion starts a new timeline")
			_, err = s.Timeline(ctx, PrimaryName)
			require.Error(t, err, "the old primary is down")
			require.NoError(t, s.Repoint(ctx))

			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for _, ep := range []Endpoint{s.Postgres(), s.Session(), s.Transaction()} {
				_, err := s.WaitPrimary(wctx, ep.DSN)
				require.NoError(t, err, ep.Name)
			}
			want := []int{0}
			for i := 1; i <= 20; i++ {
				want = append(want, i)
			}
			require.Equal(t, want, haInts(t, s.Postgres().DSN, "SELECT i FROM acked ORDER BY i"), "nothing acknowledged is lost")
			haExec(t, s.Transaction().DSN, "INSERT INTO acked VALUES (21)") // would wait for ever for a standby
			r, _ := s.Replication()
			require.Equal(t, StandbyName, r.Routed)
			require.Equal(t, []Role{RoleDown, RolePrimary}, []Role{r.Nodes[0].Role, r.Nodes[1].Role})
		})
	}
}

// The lossy failover in async mode: a commit the standby received while
// its replay was paused survives the promotion (pg_promote replays what
// was received first), a commit acknowledged after the stream stopped is
// lost, and the killed primary leaves nothing behind at Close.
func TestKillInAsyncModeLosesWhatTheStandbyNeverReceived(t *testing.T) {
	t.Parallel()
	for _, r := range haProviders(t, true) {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := startHA(t, r, ReplicationAsync)
			requirePair(t, s, ReplicationAsync)
			primary, standby := nodeNamed(t, s, PrimaryName).Endpoint.DSN, nodeNamed(t, s, StandbyName).Endpoint.DSN
			haExec(t, s.Postgres().DSN, "CREATE TABLE acked (i int)")
			haExec(t, s.Postgres().DSN, "INSERT INTO acked VALUES (1)")
			require.NoError(t, s.CatchUp(ctx))
			require.Equal(t, []int{1}, haInts(t, standby, "SELECT i FROM acked"))

			require.NoError(t, s.PauseReplay(ctx))
			haExec(t, s.Postgres().DSN, "INSERT INTO acked VALUES (2)")
			lsn := haValue[string](t, primary, "SELECT pg_current_wal_lsn()::text")
			require.NoError(t, pollUntil(ctx, 5*time.Millisecond, func(ctx context.Context) error {
				var received bool
				if err := queryOn(ctx, standby, "SELECT pg_last_wal_receive_lsn() >= $1::pg_lsn", &received, lsn); err != nil || received {
					return err
				}
				return errors.New("not received yet")
			}))
			require.Equal(t, []int{1}, haInts(t, standby, "SELECT i FROM acked"), "replay is paused")

			require.NoError(t, s.DetachStandby(ctx))
			haExec(t, s.Postgres().DSN, "INSERT INTO acked VALUES (3)")

			// On the native provider every process of the primary dies
			// with it: Postgres gives each backend a session of its own,
			// so none of them is in the postmaster's process group.
			var children []int
			if p, ok := s.postgresNode().(*process); ok {
				children = childrenOf(p.cmd.Process.Pid)
				require.NotEmpty(t, children)
			}
			victim, err := connectOnce(ctx, primary)
			require.NoError(t, err)
			defer victim.Close(context.Background())
			require.NoError(t, s.KillPrimary(ctx))
			for _, c := range children {
				st, err := procState(c)
				require.True(t, err != nil || st == 'Z', "process %d of the killed primary is gone (state %c)", c, st)
			}
			// Its backend died with it, without a word: a backend that
			// outlived its postmaster would say "terminating connection
			// due to unexpected postmaster exit" (57P01) first.
			_, err = victim.Exec(ctx, "SELECT 1")
			require.Error(t, err)
			var pgErr *pgconn.PgError
			require.False(t, errors.As(err, &pgErr), "the killed primary's backend answered: %v", err)
			require.NoError(t, s.Promote(ctx))
			require.NoError(t, s.Repoint(ctx))
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err = s.WaitPrimary(wctx, s.Transaction().DSN)
			require.NoError(t, err)
			require.Equal(t, []int{1, 2}, haInts(t, s.Postgres().DSN, "SELECT i FROM acked ORDER BY i"),
				"2 was received while replay was paused and survives; 3 never reached the standby and is lost")
			tl, err := s.Timeline(ctx, StandbyName)
			require.NoError(t, err)
			require.Equal(t, int64(2), tl)

		})
	}
}

// On a stack without a standby the failover operations say so, and the
// oracle is the stack's own Postgres.
func TestFailoverOperationsNeedAStandby(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	ctx := context.Background()
	_, ok := s.Replication()
	require.False(t, ok)
	require.Equal(t, s.Postgres(), s.Oracle())
	for name, op := range map[string]func(context.Context) error{
		"KillPrimary": s.KillPrimary, "ShutdownPrimary": s.ShutdownPrimary, "Promote": s.Promote, "Repoint": s.Repoint,
		"PauseReplay": s.PauseReplay, "ResumeReplay": s.ResumeReplay, "DetachStandby": s.DetachStandby,
		"AttachStandby": s.AttachStandby, "CatchUp": s.CatchUp,
	} {
		require.ErrorIs(t, op(ctx), ErrNotSupported, name)
	}
	_, err := s.Timeline(ctx, PrimaryName)
	require.ErrorIs(t, err, ErrNotSupported)

	_, err = Options{Replication: "semi"}.resolve()
	require.ErrorContains(t, err, `replication mode "semi" is not one of "sync" and "async"`)
	_, err = Start(ctx, Options{Provider: ProviderExternal, Replication: ReplicationAsync})
	require.ErrorContains(t, err, "the external provider runs no servers of its own to fail over")
}

// The router forwards each connection to the upstream of the moment it
// was accepted; a repoint closes the connections it had and leads new
// ones to the new upstream, on the same address.
func TestRouterRepointClosesConnectionsAndLeadsNewOnesOn(t *testing.T) {
	t.Parallel()
	echo := func(name string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					sc := bufio.NewScanner(c)
					for sc.Scan() {
						if _, err := c.Write([]byte(name + ":" + sc.Text() + "\n")); err != nil {
							return
						}
					}
				}()
			}
		}()
		return l.Addr().String()
	}
	a, b := echo("a"), echo("b")
	r, err := newRouter("127.0.0.1", a)
	require.NoError(t, err)
	defer r.close()
	host, port := r.addr()
	// Below the ephemeral range, no outgoing connection is given the
	// port between its draw and the router's listen.
	low, _ := ephemeralRange()
	require.Less(t, port, low, "the router's port is below the kernel's ephemeral range")
	require.GreaterOrEqual(t, port, minPort)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ask := func(c net.Conn, q string) (string, error) {
		if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return "", err
		}
		if _, err := c.Write([]byte(q + "\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	old, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer old.Close()
	got, err := ask(old, "1")
	require.NoError(t, err)
	require.Equal(t, "a:1\n", got)

	require.NoError(t, r.repoint(b))
	require.Equal(t, b, r.upstream())
	_, err = ask(old, "2")
	require.Error(t, err, "a connection to the old upstream is closed")
	h2, p2 := r.addr()
	require.Equal(t, addr, net.JoinHostPort(h2, strconv.Itoa(p2)), "the address stays")
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	got, err = ask(c, "3")
	require.NoError(t, err)
	require.Equal(t, "b:3\n", got)
}

// The router keeps its port through repoints: nobody else can listen on
// it at any moment of one. A toxiproxy proxy's Update let it go and
// listened again, and once another socket had it by then (see router).
func TestRouterHoldsItsPortThroughRepoints(t *testing.T) {
	t.Parallel()
	r, err := newRouter("127.0.0.1", "127.0.0.1:1")
	require.NoError(t, err)
	defer r.close()
	host, port := r.addr()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	stop := make(chan struct{})
	took := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				took <- nil
				return
			default:
			}
			if l, err := net.Listen("tcp", addr); err == nil {
				l.Close()
				took <- fmt.Errorf("listened on the router's %s", addr)
				return
			}
		}
	}()
	for i := range 200 {
		require.NoError(t, r.repoint("127.0.0.1:"+strconv.Itoa(2+i%2)), "repoint %d", i)
	}
	close(stop)
	require.NoError(t, <-took)
}

// A connection the router accepted before a repoint and whose upstream it
// dialed from before is closed, not left with the old upstream: a client
// that connected as the address moved must not stay on the old primary.
func TestRouterDropsAConnectionDialedAcrossARepoint(t *testing.T) {
	t.Parallel()
	old, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer old.Close()
	served := make(chan net.Conn, 1)
	go func() {
		if c, err := old.Accept(); err == nil {
			served <- c
		}
	}()
	dialing, dialed := make(chan string, 1), make(chan struct{})
	r, err := startRouter("127.0.0.1", old.Addr().String(), func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialing <- addr
		<-dialed
		return new(net.Dialer).DialContext(ctx, network, addr)
	})
	require.NoError(t, err)
	defer r.close()
	host, port := r.addr()
	c, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, old.Addr().String(), <-dialing, "the router dials the upstream of the moment it accepted")
	require.NoError(t, r.repoint("127.0.0.1:1"))
	close(dialed)

	s := <-served // the old upstream was reached ...
	defer s.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second))) // bounds only a forwarded connection's wait
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "... and the client's connection was closed, not forwarded there")
}

// After a failover RebuildStandby clones the node that went down afresh
// from the new primary, and the pair fails over again, onto timeline 3,
// still losing nothing in sync mode.
func TestRebuiltStandbyFailsOverAgain(t *testing.T) {
	t.Parallel()
	for _, r := range haProviders(t, false) {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := startHA(t, r, ReplicationSync)
			haExec(t, s.Postgres().DSN, "CREATE TABLE acked (i int)")
			haExec(t, s.Postgres().DSN, "INSERT INTO acked VALUES (1)")
			require.NoError(t, s.KillPrimary(ctx))
			require.NoError(t, s.Promote(ctx))
			require.NoError(t, s.Repoint(ctx))
			require.ErrorContains(t, s.Promote(ctx), "the pair has no standby left")

			require.NoError(t, s.RebuildStandby(ctx))
			r, _ := s.Replication()
			require.Equal(t, []Role{RoleStandby, RolePrimary}, []Role{r.Nodes[0].Role, r.Nodes[1].Role})
			require.Equal(t, "streaming/sync", haValue[string](t, r.Nodes[1].Endpoint.DSN, "SELECT state || '/' || sync_state FROM pg_stat_replication"))
			haExec(t, s.Postgres().DSN, "INSERT INTO acked VALUES (2)")

			require.NoError(t, s.KillPrimary(ctx))
			require.NoError(t, s.Promote(ctx))
			require.NoError(t, s.Repoint(ctx))
			tl, err := s.Timeline(ctx, PrimaryName)
			require.NoError(t, err)
			require.Equal(t, int64(3), tl)
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err = s.WaitPrimary(wctx, s.Transaction().DSN)
			require.NoError(t, err)
			require.Equal(t, []int{1, 2}, haInts(t, s.Postgres().DSN, "SELECT i FROM acked ORDER BY i"))
			r, _ = s.Replication()
			require.Equal(t, PrimaryName, r.Routed)
		})
	}
}
