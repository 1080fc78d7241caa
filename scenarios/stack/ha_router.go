package stack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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

// newRouter starts a router that listens on host, on a free port below
// the kernel's ephemeral range, and forwards to upstream ("host:port").
//
// Not a port the kernel picks: those come from the ephemeral range, and a
// repoint stops the listener and listens again on the same port. In
// between, the kernel may give that port to any outgoing connection as
// its source port, and the bind fails ("address already in use", seen
// once in make test, where about 2600 sessions are opened). The kernel
// never hands out a port below the range.
func newRouter(host, upstream string) (*router, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	low := ephemeralLow()
	var err error
	for range 50 {
		port := routerPortMin + rand.IntN(max(low-routerPortMin, 1))
		p := toxiproxy.NewProxy(server, "doublerun-router", net.JoinHostPort(host, strconv.Itoa(port)), upstream)
		if err = p.Start(); err == nil {
			return &router{proxy: p}, nil
		}
	}
	return nil, fmt.Errorf("start the router on %s below port %d: %w", host, low, err)
}

// routerPortMin is the lowest port a router takes: above the ports
// services usually own.
const routerPortMin = 10000

// ephemeralLow is the first port of the kernel's ephemeral range, from
// /proc/sys/net/ipv4/ip_local_port_range, or Linux's default where it
// cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > routerPortMin {
				return n
			}
		}
	}
	return 32768
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
