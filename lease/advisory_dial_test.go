package lease

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A waiting lease whose connect fails reports Faulted with the connect
// error, as a polling one does; it does not go on to plan its grant on a
// connection it does not have.
func TestAdvisoryWaitingConnectFails(t *testing.T) {
	t.Parallel()
	b := setupServer(t)
	l := newAdvisoryT(t, b.db.Postgres, "a", withWait("a", defaultWaitTimeout))
	l.reset(b.ctx)
	l.connCfg.Port = closedPort(t)
	res, err := l.Acquire(b.ctx)
	require.NoError(t, err)
	require.Equal(t, Faulted, res.Status)
	require.ErrorContains(t, res.Err, "connect")
}
