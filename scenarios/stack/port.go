package stack

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// freePort returns a loopback port that nothing listens on, for a server
// the stack starts to be told to listen on (or Docker to publish). It is
// not asked of the kernel (a listen on port 0): the kernel hands out the
// same ephemeral range as the local ports of outgoing connections, and in
// make test, beside hundreds of connections a second, one took the port
// between the check and Docker's bind of it ("listen tcp4
// 127.0.0.1:46279: bind: address already in use", docker-bridge, at
// 8db5481). The port is drawn at random outside that range, where no
// outgoing connection goes, checked free, and booked machine-wide for
// portHold (portBook). Caught by TestFreePortIsOutsideTheEphemeralRange.
func freePort() (int, error) {
	lo, hi, ok := drawRange(ephemeralRange())
	if !ok {
		return kernelPort()
	}
	return drawPort(portBookPath, lo, hi)
}

// drawPort draws a free port of [lo, hi) that the book at path does not
// hold, and books it. Caught by TestDrawPortSkipsBookedPorts.
func drawPort(path string, lo, hi int) (int, error) {
	book, err := openPortBook(path)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	for range portTries {
		p := lo + rand.IntN(hi-lo)
		if book.booked(p, now) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // in use: draw again
		}
		_ = l.Close()
		book.book(p, now)
		return p, book.close(now)
	}
	_ = book.close(now)
	return 0, fmt.Errorf("find a free port: %d ports drawn from %d to %d were all in use or booked in %s", portTries, lo, hi-1, path)
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

// The port book holds the ports handed out on this machine by every
// doublerun process. A server told a port may not have bound it yet, and
// until it does the port is free to anyone who checks: make test runs
// two test binaries at once, each drawing ports, and a PgBouncer of an HA
// stack found its port taken ("cannot listen on 127.0.0.1:16557: Address
// already in use", at de8101c). One file, locked while it is read and
// written back, keeps each port booked for portHold, far longer than a
// server takes to bind even on a loaded machine; older entries are
// dropped when it is written. It lives in /tmp itself, not TMPDIR, since
// the mutation gate gives each guard's tests a TMPDIR of its own.
const portHold = 10 * time.Minute

const portBookPath = "/tmp/doublerun-ports"

type portBook struct {
	f    *os.File
	held map[int]time.Time
}

// openPortBook opens and locks the book at path, creating it if need be.
// Close it to write it back and unlock it.
func openPortBook(path string) (*portBook, error) {
	f, err := lockFile(context.Background(), path)
	if err != nil {
		return nil, fmt.Errorf("the port book: %w", err)
	}
	b := &portBook{f: f, held: map[int]time.Time{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p int
		var at int64
		if _, err := fmt.Sscan(sc.Text(), &p, &at); err == nil {
			b.held[p] = time.Unix(0, at)
		}
	}
	return b, nil
}

// booked says p was handed out less than portHold before now.
func (b *portBook) booked(p int, now time.Time) bool {
	at, ok := b.held[p]
	return ok && now.Sub(at) < portHold
}

func (b *portBook) book(p int, now time.Time) { b.held[p] = now }

// close writes back the entries still held at now and unlocks the book.
func (b *portBook) close(now time.Time) error {
	defer b.f.Close()
	var buf bytes.Buffer
	for p, at := range b.held {
		if now.Sub(at) < portHold {
			fmt.Fprintf(&buf, "%d %d\n", p, at.UnixNano())
		}
	}
	if err := b.f.Truncate(0); err != nil {
		return fmt.Errorf("write the port book %s: %w", b.f.Name(), err)
	}
	if _, err := b.f.WriteAt(buf.Bytes(), 0); err != nil {
		return fmt.Errorf("write the port book %s: %w", b.f.Name(), err)
	}
	return nil
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
