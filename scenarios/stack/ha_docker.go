//go:build !doublerun_nodocker

package stack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

var _ haBackend = (*dockerBackend)(nil)

// hbaPath is where a node of an HA pair finds its pg_hba.conf (hba_file):
// the images' own let every user log in with a password from the
// network, but only to databases, while a standby on the network must
// replicate from the primary.
const hbaPath = "/etc/doublerun_pg_hba.conf"

const hbaConf = `local all all trust
local replication all trust
host all all all scram-sha-256
host replication all all scram-sha-256
`

// standbyScript is the entrypoint of a standby container: on first start
// it clones the primary named in DOUBLERUN_PRIMARY_CONNINFO with
// pg_basebackup -R (standby.signal and primary_conninfo), then runs
// postgres with the container's command as its arguments. Only what the
// image contract asks is used: postgres and pg_basebackup on PATH, PGDATA
// in the environment, a postgres user.
const standbyScript = `set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pg_basebackup -D "$PGDATA" -R -X stream -c fast --no-sync -d "$DOUBLERUN_PRIMARY_CONNINFO"
  chmod 700 "$PGDATA"
fi
[ "${1:-}" = postgres ] && shift
exec postgres -D "$PGDATA" "$@"
`

// startNode starts a node of an HA pair as a container called spec.name,
// on the stack's network or the host's: a primary through the image's
// own entrypoint, which initialises it, a standby through standbyScript.
func (b *dockerBackend) startNode(ctx context.Context, spec nodeSpec) (node, string, int, error) {
	hostPort, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	req := b.postgresRequest(ctx, spec.name, hostPort, slices.Concat(settingsHA, []string{"-c", "hba_file=" + hbaPath})...)
	req.Files = append(req.Files, testcontainers.ContainerFile{Reader: strings.NewReader(hbaConf), ContainerFilePath: hbaPath, FileMode: 0o644})
	if spec.primary == nil {
		// A cluster of its own (images/entrypoint.sh): a copy of the
		// image's would share its system identifier with the oracle
		// beside it, and Postgres tells clusters apart by it (a standby
		// refuses WAL from another). Caught by
		// TestSwitchoverInSyncModeLosesNothing ("the oracle is a server
		// of its own").
		req.Env = map[string]string{"POSTGRES_USER": spec.user, "POSTGRES_PASSWORD": spec.password, "POSTGRES_DB": spec.database,
			"DOUBLERUN_INITDB": "1"}
	} else {
		// On a private network the standby reaches the primary by its
		// alias, on the host's network at its own port of loopback.
		host, port := spec.primary.name, pgPort
		if b.onHost() {
			var err error
			if host, port, err = splitHostPort(spec.primary.ep.DSN); err != nil {
				return nil, "", 0, err
			}
		}
		req.Env = map[string]string{"DOUBLERUN_PRIMARY_CONNINFO": fmt.Sprintf("host=%s port=%d user=%s password=%s application_name=%s",
			host, port, spec.user, spec.password, spec.name)}
		req.Entrypoint = []string{"sh", "-c", standbyScript, "doublerun-standby"}
		req.ConfigModifier = func(c *container.Config) { c.User = "postgres" }
	}
	n, err := b.run(ctx, spec.name, req)
	if n == nil {
		return nil, "", 0, err
	}
	return n, "127.0.0.1", hostPort, err
}

// routerHost is an address of this host that the bouncers' containers
// reach, as clients on this host do: loopback when they share the host's
// network, else the gateway of the stack's network.
func (b *dockerBackend) routerHost(ctx context.Context) (string, error) {
	if b.onHost() {
		return "127.0.0.1", nil
	}
	res, err := b.cli.NetworkInspect(ctx, b.netName, client.NetworkInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("docker network %s: %w", b.netName, err)
	}
	for _, c := range res.Network.IPAM.Config {
		if c.Gateway.Is4() {
			return c.Gateway.String(), nil
		}
	}
	return "", fmt.Errorf("docker network %s has no IPv4 gateway for the router to listen on, so its containers cannot reach this host; use %s=native", b.netName, EnvProvider)
}

func (b *dockerBackend) forwardBouncers(host string, port int) { b.fwdHost, b.fwdPort = host, port }

// kill ends every process of the container with SIGKILL, as a machine
// that dies does, and returns when the engine says it has stopped.
//
// A SIGKILL of the container (its first process, the postmaster) alone is
// not that: the kernel kills the rest of the container only as the
// postmaster's exit completes, after its files closed, and a backend that
// saw the postmaster-death pipe close in between told its client
// "terminating connection due to unexpected postmaster exit" (57P01), seen
// beside make test (TestKillInAsyncModeLosesWhatTheStandbyNeverReceived).
// So every other process is killed first, by one kill(-1) inside the
// container, which spares only its first process, while the postmaster
// still lives; then the postmaster.
func (n *dockerNode) kill(ctx context.Context) error {
	// An image without a shell leaves the first kill undone; the second
	// still kills the container, as before.
	_, _, _ = n.ctr.Exec(ctx, []string{"sh", "-c", "kill -KILL -1"})
	if _, err := n.cli.ContainerKill(ctx, n.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		return fmt.Errorf("docker: kill %s: %w", n.name, err)
	}
	return pollUntil(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		st, err := n.ctr.State(ctx)
		if err != nil {
			return err
		}
		if st.Running {
			return fmt.Errorf("docker: %s still runs after SIGKILL", n.name)
		}
		return nil
	})
}
