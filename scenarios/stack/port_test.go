package stack

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The ports the stack hands its servers are free, outside the range the
// kernel takes outgoing connections' local ports from, and not handed out
// twice while booked.
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	lo, hi := ephemeralRange()
	last := map[int]int{} // port → the draw that handed it out
	for i := range 200 {
		p, err := freePort()
		require.NoError(t, err)
		require.False(t, lo <= p && p <= hi, "port %d is in the ephemeral range %d-%d", p, lo, hi)
		j, ok := last[p]
		require.False(t, ok, "port %d handed out at draws %d and %d", p, j, i)
		last[p] = i
	}
	// A port in use is not handed out.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	for p := range last {
		require.NotEqual(t, l.Addr().(*net.TCPAddr).Port, p)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err, "port %d was free", p)
		require.NoError(t, ln.Close())
	}
}

func TestDrawRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ephLo, ephHi, lo, hi int
		ok                   bool
	}{
		{32768, 60999, minPort, 32768, true}, // Linux's default
		{49152, 65535, minPort, 49152, true}, // the IANA range
		{12000, 40000, 40001, 65536, true},   // too little room below
		{14095, 61440, 0, 0, false},          // too little on either side
		{14096, 61439, minPort, 14096, true},
		{1024, 61440, 61441, 65536, false},
		{1024, 61439, 61440, 65536, true},
	} {
		lo, hi, ok := drawRange(tc.ephLo, tc.ephHi)
		require.Equal(t, tc.ok, ok, "ephemeral %d-%d", tc.ephLo, tc.ephHi)
		if ok {
			require.Equal(t, [2]int{tc.lo, tc.hi}, [2]int{lo, hi}, "ephemeral %d-%d", tc.ephLo, tc.ephHi)
		}
	}
}

// The port book is one file for every process of the machine: locked
// while it is open, a port booked in it stays booked for portHold after
// the process that booked it closed it, and an entry older than that is
// dropped when the book is written.
func TestPortBook(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ports")
	t0 := time.Unix(1_700_000_000, 0)
	b, err := openPortBook(path)
	require.NoError(t, err)
	require.False(t, b.booked(20001, t0))
	b.book(20001, t0)
	b.book(20002, t0.Add(-portHold))
	other, err := os.Open(path)
	require.NoError(t, err)
	defer other.Close()
	err = syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	require.True(t, errors.Is(err, syscall.EWOULDBLOCK), "a second opener waits while the book is open: %v", err)
	require.NoError(t, b.close(t0))
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "closing the book unlocks it")
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_UN))

	b, err = openPortBook(path)
	require.NoError(t, err)
	require.True(t, b.booked(20001, t0.Add(portHold-time.Second)), "booked by another opener until portHold has passed")
	require.False(t, b.booked(20001, t0.Add(portHold)))
	require.False(t, b.booked(20002, t0), "an entry as old as portHold is not written back")
	require.NoError(t, b.close(t0.Add(portHold)))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Empty(t, data, "entries past their hold are dropped")
}

// A port the book holds is not drawn, even when it is free: with every
// port of a range booked the draw fails, and once one is free of the book
// it is the one drawn.
func TestDrawPortSkipsBookedPorts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ports")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	b, err := openPortBook(path)
	require.NoError(t, err)
	b.book(p, time.Now())
	require.NoError(t, b.close(time.Now()))
	_, err = drawPort(path, p, p+1)
	require.ErrorContains(t, err, "all in use or booked in "+path)

	require.NoError(t, os.WriteFile(path, nil, 0o644))
	got, err := drawPort(path, p, p+1)
	require.NoError(t, err)
	require.Equal(t, p, got)
	b, err = openPortBook(path)
	require.NoError(t, err)
	require.True(t, b.booked(p, time.Now()), "a drawn port is booked")
	require.NoError(t, b.close(time.Now()))
}
