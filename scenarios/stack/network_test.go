//go:build !doublerun_nodocker

package stack

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
)

// On a Linux engine a docker stack's containers share the host's network:
// Postgres and PgBouncer see each client's own address and port, as the
// traffic-path check needs, and no port proxy relays the bytes. On a
// private network (Docker Desktop, or dockerBridge here) the stack answers
// the same through published ports, but every client is the proxy's.
func TestDockerServersSeeTheirClientsAddresses(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	for _, tc := range []struct {
		name   string
		bridge bool
	}{{"HostNetwork", false}, {"PrivateNetwork", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := Start(ctx, Options{Provider: ProviderDocker, dockerBridge: tc.bridge})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			b, ok := s.backend.(*dockerBackend)
			require.True(t, ok)
			own := !tc.bridge && hostNetworking(ctx, b.cli)
			require.Equal(t, own, b.onHost(), "the host's network wherever the engine can share it, and only there")
			if !tc.bridge {
				require.True(t, own, "this engine runs Linux containers on this machine, so the stack shares its network")
			}

			for _, ep := range s.Endpoints() {
				conn, err := pgx.Connect(ctx, ep.DSN)
				require.NoError(t, err, ep.Name)
				local := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr)
				var addr string
				var port int
				if ep.Name == PostgresName {
					require.NoError(t, conn.QueryRow(ctx, "SELECT host(inet_client_addr()), inet_client_port()").Scan(&addr, &port))
				} else {
					admin, err := pgbouncer.ConnectAdmin(ctx, ep.AdminDSN)
					require.NoError(t, err)
					clients, err := admin.Clients(ctx)
					require.NoError(t, err)
					_ = admin.Close(ctx)
					for _, c := range clients {
						if c.Database == Database {
							addr, port = c.Addr, c.Port
						}
					}
				}
				_ = conn.Close(ctx)
				seen := net.JoinHostPort(addr, strconv.Itoa(port))
				if own {
					require.Equal(t, local.String(), seen, "%s sees the client as it is", ep.Name)
				} else {
					require.False(t, net.ParseIP(addr).IsLoopback(), "%s sees the port proxy, not the client (%s)", ep.Name, seen)
				}
			}
		})
	}
}
