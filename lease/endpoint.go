package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// EndpointKind is what CheckEndpoint could tell about the way a DSN reaches
// Postgres.
type EndpointKind int

// The endpoint kinds. See the package documentation, "Detecting the
// endpoint", for what each one proves and what it cannot.
const (
	// EndpointUnknown: the check saw nothing that proves a pool, and could
	// not tell a direct connection from a pooler either.
	EndpointUnknown EndpointKind = iota
	// EndpointDirect: every client connection had a backend of its own and
	// the backend's PID matched the cancel key the server sent, so nothing
	// between client and server rewrote the session. A plain TCP proxy or
	// port mapping in between looks the same, and is as safe.
	EndpointDirect
	// EndpointPinned: a pooler sits in between (its cancel key differs from
	// the backend PID), yet every client kept a backend of its own for the
	// whole check: session pooling, or a transaction pool that happened to
	// hand each client the same backend every time (a false negative).
	EndpointPinned
	// EndpointTransactionPooled: proven. One backend served two client
	// connections that were open at the same time, or one client
	// connection was moved between backends. Session state, and with it a
	// session advisory lock, does not belong to the client here.
	EndpointTransactionPooled
)

func (k EndpointKind) String() string {
	switch k {
	case EndpointUnknown:
		return "unknown"
	case EndpointDirect:
		return "direct"
	case EndpointPinned:
		return "pinned"
	case EndpointTransactionPooled:
		return "transaction-pooled"
	}
	return fmt.Sprintf("EndpointKind(%d)", int(k))
}

// EndpointReport is the verdict of CheckEndpoint with the evidence for it.
type EndpointReport struct {
	// Endpoint names host, port and database of the DSN checked, without
	// credentials.
	Endpoint string
	Kind     EndpointKind
	// Evidence lists, in plain words, what the check observed; the first
	// line is the one the verdict rests on.
	Evidence []string
	// Samples is how many pg_backend_pid() answers the verdict rests on.
	Samples int
}

// String is a one-line summary, for logs and error messages.
func (r EndpointReport) String() string {
	if len(r.Evidence) == 0 {
		return fmt.Sprintf("%s: %s", r.Endpoint, r.Kind)
	}
	return fmt.Sprintf("%s: %s (%s)", r.Endpoint, r.Kind, r.Evidence[0])
}

// How many client connections CheckEndpoint opens, and how many times each
// asks for its backend PID. Three clients, interleaved, catch an idle
// transaction pool of any size on the first round: PgBouncer hands the
// next client the server connection released last. Under concurrent load
// from other clients the odds fall; see BenchmarkCheckEndpointFalseNegatives.
const (
	checkClients = 3
	checkRounds  = 4
)

// checkTimeout bounds the whole check when ctx has no deadline of its own.
const checkTimeout = 15 * time.Second

// CheckEndpoint reports whether dsn reaches Postgres directly, through a
// session-pinned pooler, or through a transaction pool, from the client
// side only: it needs no access to the pooler's admin console.
//
// It opens a few connections at once and asks each, in turn and more than
// once, for pg_backend_pid(). A backend PID shared by two open connections,
// or one that changes under a single connection, proves transaction (or
// statement) pooling. Otherwise it compares the PID in the cancel key the
// server sent at login with pg_backend_pid(): Postgres sends its own PID,
// a pooler sends a key of its own. Absence of proof is not proof of
// absence: a transaction pool busy with other clients can hand each of the
// check's clients the same backend every time, and is then reported as
// EndpointPinned. The package documentation says what can and cannot be
// detected.
//
// The error is non-nil when the check could not run (the endpoint refused
// a connection or a query); the report then has Kind EndpointUnknown.
func CheckEndpoint(ctx context.Context, dsn string) (EndpointReport, error) {
	return checkEndpoint(ctx, dsn, checkClients, checkRounds)
}

// clientSample is what one client connection of the check observed.
type clientSample struct {
	// keyPID is the process ID of the BackendKeyData message at login.
	keyPID uint32
	// pids are the answers of pg_backend_pid(), one per round.
	pids []int32
}

// endpointSample is everything the check observed; classify judges it.
type endpointSample struct {
	endpoint string
	clients  []clientSample
	// dsnPort is the port the DSN names; serverPort is inet_server_port()
	// as Postgres saw the connection, 0 over a Unix socket.
	dsnPort    uint16
	serverPort int32
}

func checkEndpoint(ctx context.Context, dsn string, clients, rounds int) (EndpointReport, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return EndpointReport{}, fmt.Errorf("lease: check endpoint: parse dsn: %w", err)
	}
	// Exec needs nothing to survive between transactions, so the check
	// itself works through any pool.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams["application_name"] = "doublerun-endpoint-check"
	sample := endpointSample{endpoint: describeEndpoint(cfg), dsnPort: cfg.Port}
	fail := func(err error) (EndpointReport, error) {
		return EndpointReport{Endpoint: sample.endpoint}, fmt.Errorf("lease: check endpoint %s: %w", sample.endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkTimeout)
		defer cancel()
	}

	conns := make([]*pgx.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	for range clients {
		c, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return fail(err)
		}
		conns = append(conns, c)
		sample.clients = append(sample.clients, clientSample{keyPID: c.PgConn().PID()})
	}
	var port *int32
	if err := conns[0].QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		return fail(err)
	}
	if port != nil {
		sample.serverPort = *port
	}
	// Round-robin, so that each client's transaction starts right after
	// another client's ended: that is when a pool reuses a server
	// connection.
	for range rounds {
		for i, c := range conns {
			var pid int32
			if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return fail(err)
			}
			sample.clients[i].pids = append(sample.clients[i].pids, pid)
		}
	}
	return classify(sample), nil
}

// classify judges what the check observed. It is a pure function so that
// every branch is tested without a server.
func classify(s endpointSample) EndpointReport {
	r := EndpointReport{Endpoint: s.endpoint}
	owner := map[int32]int{} // backend PID -> first client that saw it
	var proof []string
	for i, c := range s.clients {
		r.Samples += len(c.pids)
		for j, pid := range c.pids {
			// A client connection whose backend changed: only a pool
			// moves a session. Caught by TestClassify/MovedClientIsPooled.
			if j > 0 && pid != c.pids[0] {
				proof = append(proof, fmt.Sprintf("client %d was served by backend %d, then by backend %d, on one connection", i+1, c.pids[0], pid))
				break
			}
		}
		for _, pid := range slices.Compact(slices.Clone(c.pids)) {
			// One backend serving two client connections open at once:
			// only a pool shares a session. Caught by
			// TestClassify/SharedBackendIsPooled.
			if first, seen := owner[pid]; seen && first != i {
				proof = append(proof, fmt.Sprintf("backend %d served clients %d and %d while both were connected", pid, first+1, i+1))
				continue
			}
			owner[pid] = i
		}
	}
	portNote := fmt.Sprintf("inet_server_port() is %d, the DSN names port %d", s.serverPort, s.dsnPort)
	if s.serverPort == 0 {
		portNote = "inet_server_port() is NULL: Postgres saw a Unix-socket connection"
	}
	if len(proof) > 0 {
		r.Kind = EndpointTransactionPooled
		r.Evidence = append(proof, portNote)
		return r
	}
	direct, pooled, unknown := 0, 0, 0
	for _, c := range s.clients {
		switch {
		case c.keyPID == 0 || len(c.pids) == 0:
			unknown++
		case c.keyPID == uint32(c.pids[0]):
			direct++
		default:
			pooled++
		}
	}
	kept := fmt.Sprintf("each of %d clients kept one backend of its own over %d samples", len(s.clients), r.Samples)
	switch {
	case len(s.clients) > 0 && direct == len(s.clients):
		// Caught by TestClassify/MatchingCancelKeyIsDirect and
		// TestCheckEndpoint/ReportsEachStackEndpoint.
		r.Kind = EndpointDirect
		r.Evidence = []string{"the cancel key's PID equals pg_backend_pid() on every client: Postgres itself answered the login", kept, portNote}
	case len(s.clients) > 0 && pooled == len(s.clients):
		r.Kind = EndpointPinned
		r.Evidence = []string{
			"the cancel key's PID differs from pg_backend_pid(): a pooler answered the login",
			kept + "; that is session pooling, or a transaction pool busy enough with other clients to hide its reuse",
			portNote,
		}
	default:
		r.Kind = EndpointUnknown
		r.Evidence = []string{fmt.Sprintf("cancel keys matched the backend PID on %d clients, differed on %d, were missing on %d", direct, pooled, unknown), kept, portNote}
	}
	return r
}

// describeEndpoint names an endpoint without its credentials.
func describeEndpoint(cfg *pgx.ConnConfig) string {
	host := cfg.Host
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("%s/%s", host, cfg.Database)
	}
	return fmt.Sprintf("%s:%d/%s", host, cfg.Port, cfg.Database)
}
