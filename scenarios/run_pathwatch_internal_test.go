package scenarios

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// Each path a replica's backend can come by, on a host's own sockets and
// behind a container's port proxy (where every client address is the
// proxy's, on the container network).
func TestClassify(t *testing.T) {
	t.Parallel()
	served := map[int32]bool{7: true}
	own := map[string]bool{"127.0.0.1:40001": true}
	for _, tc := range []struct {
		name   string
		b      oracle.Backend
		direct bool
		want   string
	}{
		{"ABouncersServerConnection", oracle.Backend{PID: 7, Client: "172.18.0.3:5000"}, false, oracle.ViaPgBouncer},
		{"TheRunnersProxy", oracle.Backend{PID: 8, Client: "127.0.0.1:40001"}, true, oracle.ViaProxy},
		{"AroundTheProxyOnThisHost", oracle.Backend{PID: 9, Client: "127.0.0.1:40394"}, true, oracle.ViaOther},
		{"BehindAPortProxyWithADirectEndpoint", oracle.Backend{PID: 9, Client: "172.18.0.1:40394"}, true, oracle.ViaUnverified},
		{"AroundTheBouncersBehindAPortProxy", oracle.Backend{PID: 9, Client: "172.18.0.1:40394"}, false, oracle.ViaOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, classify(tc.b, served, own, tc.direct))
		})
	}
}

// A bouncer's client is one of the run's replicas by its
// application_name, and only on the run's own databases: another run on
// a shared bouncer (make test's) names its replicas alike.
func TestPathWatchOurs(t *testing.T) {
	t.Parallel()
	p := &pathWatch{apps: map[string]string{"doublerun-r1": "r1"}, dbs: map[string]bool{"run_a": true}}
	id, ok := p.ours(pgbouncer.Client{Database: "run_a", ApplicationName: "doublerun-r1"})
	require.True(t, ok)
	require.Equal(t, "r1", id)
	_, ok = p.ours(pgbouncer.Client{Database: "run_b", ApplicationName: "doublerun-r1"})
	require.False(t, ok, "another run's r1")
	_, ok = p.ours(pgbouncer.Client{Database: "run_a", ApplicationName: "psql"})
	require.False(t, ok, "not a replica")
}
