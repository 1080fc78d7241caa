package stack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// freePort returns a loopback port that nothing listens on, for a server
// the stack starts to be told to listen on (or Docker to publish). It is
// not asked of the kernel (a listen on port 0): the kernel hands out the
// same ephemeral range as the local ports of outgoing connections, and in
// make test, beside hundreds of connections a second, one took the port
// between the check and Docker's bind of it ("listen tcp4
// 127.0.0.1:46279: bind: address already in use", docker-bridge, at
// 8db5481). The port is drawn at random outside that range, where no
// outgoing connection goes, checked free, and not handed out again by
// this process while recent. Caught by TestFreePortIsOutsideTheEphemeralRange.
func freePort() (int, error) {
	lo, hi, ok := drawRange(ephemeralRange())
	if !ok {
		return kernelPort()
	}
	issued.mu.Lock()
	defer issued.mu.Unlock()
	for range portTries {
		p := lo + rand.IntN(hi-lo)
		if slices.Contains(issued.recent[:], p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // in use: draw again
		}
		_ = l.Close()
		issued.recent[issued.next%len(issued.recent)] = p
		issued.next++
		return p, nil
	}
	return 0, fmt.Errorf("find a free port: %d ports drawn from %d to %d were all in use", portTries, lo, hi-1)
}

// kernelPort asks the kernel for a free loopback port, where its
// ephemeral range leaves freePort no room to draw from.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portTries bounds the draws of one freePort.
const portTries = 100

// issued holds the ports this process handed out last: a server told one
// may not have bound it yet, so it is not drawn again until 64 later ones.
var issued struct {
	mu     sync.Mutex
	recent [64]int
	next   int
}

// Where freePort draws: from minPort up to the ephemeral range, or above
// it when a system's range starts too low to leave room below.
const (
	minPort  = 10000
	minDraws = 4096
)

// drawRange is the half-open range [lo, hi) of ports freePort draws
// from, given the ephemeral range [ephLo, ephHi]: below it from minPort,
// or above it; not ok when neither side holds minDraws ports.
func drawRange(ephLo, ephHi int) (lo, hi int, ok bool) {
	switch {
	case ephLo-minPort >= minDraws:
		return minPort, ephLo, true
	case 65536-(ephHi+1) >= minDraws:
		return ephHi + 1, 65536, true
	}
	return 0, 0, false
}

// ephemeralRange is the kernel's range of local ports for outgoing
// connections (net.ipv4.ip_local_port_range); Linux's default where it
// cannot be read.
func ephemeralRange() (lo, hi int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && 0 < l && l <= h && h < 65536 {
				return l, h
			}
		}
	}
	return 32768, 60999
}
