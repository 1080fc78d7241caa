package stack

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ports the stack hands its servers are free, outside the range the
// kernel takes outgoing connections' local ports from, and not handed out
// twice in a row.
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	lo, hi := ephemeralRange()
	last := map[int]int{} // port → the draw that last handed it out
	for i := range 200 {
		p, err := freePort()
		require.NoError(t, err)
		require.False(t, lo <= p && p <= hi, "port %d is in the ephemeral range %d-%d", p, lo, hi)
		if j, ok := last[p]; ok {
			require.GreaterOrEqual(t, i-j, len(issued.recent), "port %d handed out at draws %d and %d", p, j, i)
		}
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
