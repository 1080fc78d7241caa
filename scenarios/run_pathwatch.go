package scenarios

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// pathWatchEvery is how many lock samples apart the lock watch samples
// the replicas' backends: every 100ms, often enough to see a
// connection that lives for a few of a replica's cycles.
const pathWatchEvery = 5

// pathSettle is how many of its samples a backend that is neither a
// bouncer's server connection nor one of the runner's proxies' may take
// before it counts as come around them: a bouncer learns the PID of a
// server connection it just opened only once Postgres answers its
// login, a moment after pg_stat_activity shows the backend.
const pathSettle = 5

// pathWatch classifies each backend of a replica (by its
// application_name, pg_stat_activity) by the path it arrived by, the
// traffic-path condition's evidence (oracle.Validity).
type pathWatch struct {
	conn *pgxpool.Pool
	apps map[string]string // application_name -> replica
	// dbs are the databases the run's replicas ask the bouncers for: a
	// bouncer shared by several runs (make test's stack) lists their
	// clients too, under the same application_names.
	dbs      map[string]bool
	bouncers []string // the admin DSNs of the run's bouncers
	// direct says the lease or the work endpoint is Postgres itself, so
	// that a replica's own backends arrive from the runner's proxies
	// rather than from a bouncer.
	direct bool
	admins map[string]*pgbouncer.Admin

	seen    []oracle.Backend
	settled map[string]bool // by pathKey
	tries   map[string]int
	pending map[string]oracle.Backend // around the path, not yet settled
}

// pathKey names a backend by its PID, a bouncer's client by its address.
func pathKey(b oracle.Backend) string {
	if b.PID != 0 {
		return "pid " + strconv.Itoa(int(b.PID))
	}
	return "client " + b.Client
}

func newPathWatch(r *run) *pathWatch {
	p := &pathWatch{conn: r.pair, apps: map[string]string{}, dbs: map[string]bool{}, admins: map[string]*pgbouncer.Admin{},
		settled: map[string]bool{}, tries: map[string]int{}, pending: map[string]oracle.Backend{}}
	for _, dsn := range []string{r.leaseEP.DSN, r.workEP.DSN} {
		if u, err := url.Parse(dsn); err == nil {
			p.dbs[strings.TrimPrefix(u.Path, "/")] = true
		}
	}
	for i := range r.sc.Replicas {
		id := fmt.Sprintf("r%d", i+1)
		p.apps[fault.AppName(id)] = id
	}
	for _, ep := range []string{r.leaseEP.AdminDSN, r.workEP.AdminDSN} {
		p.direct = p.direct || ep == ""
		if ep != "" && !strings.Contains(strings.Join(p.bouncers, " "), ep) {
			p.bouncers = append(p.bouncers, ep)
		}
	}
	if r.leaseEP.Direct() && r.workEP.Direct() {
		p.bouncers = nil
	}
	return p
}

// sample looks at the replicas' backends not yet classified.
func (p *pathWatch) sample(ctx context.Context) {
	if p == nil {
		return
	}
	names := make([]string, 0, len(p.apps))
	for n := range p.apps {
		names = append(names, n)
	}
	rows, err := p.conn.Query(ctx, `SELECT clock_timestamp(), pid, application_name, coalesce(host(client_addr), ''), coalesce(client_port, -1)
		FROM pg_stat_activity WHERE datname = current_database() AND application_name = ANY($1)`, names)
	if err != nil {
		return
	}
	var fresh []oracle.Backend
	for rows.Next() {
		var b oracle.Backend
		var app, addr string
		var port int
		if rows.Scan(&b.At, &b.PID, &app, &addr, &port) != nil {
			rows.Close()
			return
		}
		b.Replica = p.apps[app]
		b.Client = net.JoinHostPort(addr, strconv.Itoa(port))
		if addr == "" {
			b.Client = "a Unix socket"
		}
		if !p.settled[pathKey(b)] {
			fresh = append(fresh, b)
		}
	}
	rows.Close()
	if rows.Err() != nil {
		return
	}
	served, clients := p.bouncer(ctx, b0(fresh))
	// The sockets this process holds are read only when a connection
	// not yet classified needs them, at the moment it would have been
	// read: /proc lists every TCP socket of the host's network, and
	// reading it on every sample was 37 % of a chaos test binary's CPU
	// (6.5 of 17.6 s, go test -cpuprofile of TestFaultsInScenarios).
	var own map[string]bool
	owned := func() map[string]bool {
		if own == nil {
			own = ownSockets()
		}
		return own
	}
	for _, b := range fresh {
		b.Via = classify(b, served, owned(), p.direct)
		p.settle(b)
	}
	// A bouncer's clients: behind a shared pool a replica's own backend
	// may carry another's application_name, but its connection to the
	// bouncer carries its own.
	for _, b := range clients {
		if p.settled[pathKey(b)] {
			continue
		}
		b.Via = oracle.ViaOther
		if owned()[b.Client] {
			b.Via = oracle.ViaProxy
		} else if host, _, err := net.SplitHostPort(b.Client); err == nil && !net.ParseIP(host).IsLoopback() {
			b.Via = oracle.ViaUnverified
		}
		p.settle(b)
	}
}

// b0 is the time of the first of bs, or zero.
func b0(bs []oracle.Backend) time.Time {
	if len(bs) == 0 {
		return time.Time{}
	}
	return bs[0].At
}

// settle keeps b once its path is known: at once for one through the
// harness's path, after pathSettle samples for one around it.
func (p *pathWatch) settle(b oracle.Backend) {
	k := pathKey(b)
	if b.Via == oracle.ViaOther {
		if p.tries[k]++; p.tries[k] < pathSettle {
			if _, ok := p.pending[k]; !ok {
				p.pending[k] = b
			}
			return
		}
	}
	delete(p.pending, k)
	p.settled[k] = true
	p.seen = append(p.seen, b)
}

// flush keeps, at the end of the run, every connection seen around the
// harness's path in two samples or more that had no time to settle: a
// loaded runner samples slowly, and a short run ends first.
func (p *pathWatch) flush() {
	for k, b := range p.pending {
		if p.tries[k] >= 2 {
			p.settled[k] = true
			p.seen = append(p.seen, b)
		}
		delete(p.pending, k)
	}
	slices.SortFunc(p.seen, func(a, b oracle.Backend) int { return a.At.Compare(b.At) })
}

// classify says by which path backend b arrived: a server connection of
// a bouncer of the run (served, by backend PID), a socket of the
// runner's own proxies (own, by address), or around them. direct says
// some of the replica's own traffic reaches Postgres from the runner's
// proxies, not from a bouncer.
func classify(b oracle.Backend, served map[int32]bool, own map[string]bool, direct bool) string {
	switch {
	case served[b.PID]:
		return oracle.ViaPgBouncer
	case own[b.Client]:
		return oracle.ViaProxy
	}
	host, _, err := net.SplitHostPort(b.Client)
	if ip := net.ParseIP(host); direct && err == nil && ip != nil && !ip.IsLoopback() {
		// Behind a container's port proxy every client is the proxy's,
		// the runner's proxies' too: there is no telling them apart.
		// Where every endpoint is a bouncer, a backend none of them
		// serves came around them, wherever it came from. Caught by
		// TestClassify/AroundTheBouncersBehindAPortProxy.
		return oracle.ViaUnverified
	}
	return oracle.ViaOther
}

// bouncer is the backend PIDs of every server connection of the run's
// bouncers, and the replicas' clients of them (by application_name),
// stamped at.
func (p *pathWatch) bouncer(ctx context.Context, at time.Time) (map[int32]bool, []oracle.Backend) {
	out := map[int32]bool{}
	var clients []oracle.Backend
	for _, dsn := range p.bouncers {
		a := p.admins[dsn]
		if a == nil {
			var err error
			if a, err = pgbouncer.ConnectAdmin(ctx, dsn); err != nil {
				continue
			}
			p.admins[dsn] = a
		}
		servers, err := a.Servers(ctx)
		if err != nil {
			_ = a.Close(context.WithoutCancel(ctx))
			delete(p.admins, dsn)
			continue
		}
		for _, s := range servers {
			out[int32(s.RemotePID)] = true
		}
		cs, err := a.Clients(ctx)
		if err != nil {
			continue
		}
		for _, c := range cs {
			if id, ok := p.ours(c); ok {
				if at.IsZero() {
					_ = p.conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at)
				}
				clients = append(clients, oracle.Backend{At: at, Replica: id, Client: net.JoinHostPort(c.Addr, strconv.Itoa(c.Port))})
			}
		}
	}
	return out, clients
}

// ours says which replica of the run bouncer client c is, by its
// application_name, if it is one: of the run's databases only, since
// another run on the same bouncer names its replicas alike. Caught by
// TestPathWatchOurs.
func (p *pathWatch) ours(c pgbouncer.Client) (string, bool) {
	id, ok := p.apps[c.ApplicationName]
	return id, ok && p.dbs[c.Database]
}

func (p *pathWatch) close() {
	if p == nil {
		return
	}
	p.flush()
	for dsn, a := range p.admins {
		_ = a.Close(context.Background())
		delete(p.admins, dsn)
	}
}

// ownSockets is the local address ("127.0.0.1:43210") of every TCP
// socket this process holds: the runner's proxies' connections upstream
// among them.
func ownSockets() map[string]bool {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		link, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	out := map[string]bool{}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			if addr, ok := procAddr(fields[1]); ok {
				out[addr] = true
			}
		}
		f.Close()
	}
	return out
}

// procAddr reads an address of /proc/net/tcp ("0100007F:A8C2": the IP in
// the host's byte order, 32 bits at a time, then the port) as
// "127.0.0.1:43202"; an IPv4-mapped IPv6 address reads as its IPv4 form,
// as Postgres shows it.
func procAddr(s string) (string, bool) {
	h, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(h)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", false
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		// Each 32-bit word is little-endian on the hosts Linux runs
		// doublerun on (amd64, arm64).
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10)), true
}
