package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// router is an HA stack's one address: an in-process TCP forwarder that
// sends every connection to the node that is primary, and that repoint
// turns to another. Each connection is forwarded to the upstream of the
// moment it was accepted; a repoint closes every connection, since their
// byte streams belong to the server they were opened on.
//
// The router holds its listener from newRouter to close, repoints
// included. It used to be a toxiproxy proxy, whose Update stops the
// listener and listens again on the same port; in between, the port was
// anyone's. Twice in make test the listen again failed: once on a port of
// the kernel's ephemeral range, and at a8136f2 on one below it and booked
// machine-wide ("repoint to pg2: listen tcp 127.0.0.1:13327: bind:
// address already in use"), so taken by neither an outgoing connection
// nor a doublerun server. A port that is never let go cannot be taken.
type router struct {
	ln     net.Listener
	ctx    context.Context // ends at close: cancels the dials under way
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every forward

	dial dialFunc

	mu     sync.Mutex
	up     string
	gen    int // repoints and close so far: a dial begun before one is stale
	conns  map[net.Conn]struct{}
	closed bool
}

// newRouter starts a router that listens on host, on a port freePort
// draws, and forwards to upstream ("host:port"). freePort's ports lie
// outside the kernel's ephemeral range and are booked machine-wide, so
// no outgoing connection and no server another stack starts is given the
// port between the draw and the listen.
func newRouter(host, upstream string) (*router, error) {
	return startRouter(host, upstream, new(net.Dialer).DialContext)
}

// dialFunc opens a connection to an upstream for the router, as
// net.Dialer's DialContext does.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// startRouter is newRouter with the dial of upstreams given.
func startRouter(host, upstream string, dial dialFunc) (*router, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start the router on %s: %w", host, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("start the router on %s: %w", host, err)
	}
	r := &router{ln: ln, dial: dial, up: upstream, conns: map[net.Conn]struct{}{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// addr is the host and port the router listens on.
func (r *router) addr() (string, int) {
	a := r.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// upstream is where the router forwards new connections.
func (r *router) upstream() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

// repoint forwards new connections to upstream and closes every
// connection it forwarded before, as a floating address that moves
// leaves its clients' connections with the old server dead. A connection
// accepted while it repoints reaches one upstream or the other, never
// the old one after it returned.
func (r *router) repoint(upstream string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("the router is closed")
	}
	r.up = upstream
	r.dropLocked()
	return nil
}

// close stops the router, closes every connection through it, and
// returns when nothing of it runs.
func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	r.dropLocked()
	r.mu.Unlock()
	_ = r.ln.Close()
	r.cancel()
	r.wg.Wait()
}

// dropLocked closes every connection forwarded so far and makes the
// dials under way stale. r.mu is held.
func (r *router) dropLocked() {
	r.gen++
	for c := range r.conns {
		_ = c.Close()
	}
	clear(r.conns)
}

func (r *router) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors and the like: the client's connect
			// fails, as it would against a server that is out of them.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.wg.Add(1)
		go r.forward(c)
	}
}

// forward copies client's bytes to the upstream of the moment and back,
// until either side ends or a repoint closes both.
func (r *router) forward(client net.Conn) {
	defer r.wg.Done()
	r.mu.Lock()
	up, gen := r.up, r.gen
	r.mu.Unlock()
	server, err := r.dial(r.ctx, "tcp", up)
	if err != nil {
		_ = client.Close()
		return
	}
	if !r.track(gen, client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, client)
	delete(r.conns, server)
	r.mu.Unlock()
}

// track records client and server as forwarded, unless a repoint or
// close came since gen: then the upstream dialed may be the old primary,
// and the connection must not outlive the repoint. Caught by
// TestRouterDropsAConnectionDialedAcrossARepoint.
func (r *router) track(gen int, client, server net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || gen != r.gen {
		return false
	}
	r.conns[client] = struct{}{}
	r.conns[server] = struct{}{}
	return true
}
