package stack

import (
	"fmt"
	"net"
	"strconv"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// router is an HA stack's one address: an in-process toxiproxy proxy that
// forwards every connection to the node that is primary, and that Repoint
// turns to another. Each connection is forwarded to the upstream of the
// moment it was accepted; a repoint closes every connection, since their
// byte streams belong to the server they were opened on.
type router struct {
	mu    sync.Mutex
	proxy *toxiproxy.Proxy
}

// newRouter starts a router that listens on host, on a port freePort
// draws, and forwards to upstream ("host:port").
//
// Not a port the kernel picks: those come from the ephemeral range, and a
// repoint stops the listener and listens again on the same port. In
// between, the kernel may give that port to any outgoing connection as
// its source port, and the bind fails ("address already in use", seen
// once in make test, where about 2600 sessions are opened). freePort's
// ports lie outside that range and are booked machine-wide, so no server
// the stacks start is told the router's port while a repoint frees it.
func newRouter(host, upstream string) (*router, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start the router on %s: %w", host, err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "doublerun-router", net.JoinHostPort(host, strconv.Itoa(port)), upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start the router on %s: %w", host, err)
	}
	return &router{proxy: p}, nil
}

// addr is the host and port the router listens on.
func (r *router) addr() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	host, port, _ := net.SplitHostPort(r.proxy.Listen)
	n, _ := strconv.Atoi(port)
	return host, n
}

// upstream is where the router forwards new connections.
func (r *router) upstream() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proxy.Upstream
}

// repoint forwards new connections to upstream. toxiproxy's Update stops
// the listener, closes every connection, and listens again on the same
// address: for that moment a client's connect is refused, as it is while
// a floating address moves.
func (r *router) repoint(upstream string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proxy.Update(&toxiproxy.Proxy{Listen: r.proxy.Listen, Upstream: upstream, Enabled: true})
}

// close stops the router and closes every connection through it.
func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proxy.Stop()
}
