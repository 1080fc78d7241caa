//go:build !doublerun_nodocker

package stack

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
)

func TestPGDATAOf(t *testing.T) {
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"Set":         {[]string{"PATH=/bin", "PGDATA=/srv/pg"}, "/srv/pg"},
		"Unset":       {[]string{"PATH=/bin"}, defaultPGDATA},
		"Empty":       {[]string{"PGDATA="}, defaultPGDATA},
		"OnlyAPrefix": {[]string{"PGDATA_X=/x"}, defaultPGDATA},
	} {
		t.Run(name, func(t *testing.T) { require.Equal(t, tc.want, pgdataOf(tc.env)) })
	}
}

// A docker stack keeps Postgres's data on an anonymous volume: off the
// storage driver, kept across a restart, and removed with the container.
func TestDockerKeepsItsDataOnAVolume(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := context.Background()
	s, err := Start(ctx, Options{Provider: ProviderDocker})
	require.NoError(t, err)
	defer s.Close(ctx)

	n, ok := s.pgNode.(*dockerNode)
	require.True(t, ok, "a docker stack's Postgres is a container")
	info, err := n.cli.ContainerInspect(ctx, n.ctr.GetContainerID(), client.ContainerInspectOptions{})
	require.NoError(t, err)
	var volume string
	for _, m := range info.Container.Mounts {
		if m.Destination == defaultPGDATA && m.Type == "volume" {
			volume = m.Name
		}
	}
	require.NotEmpty(t, volume, "PGDATA is a volume: %+v", info.Container.Mounts)

	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, s.Postgres().DSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`CREATE TABLE kept (id int)`)
	require.NoError(t, s.RestartPostgres(ctx))
	exec(`SELECT id FROM kept`)

	require.NoError(t, s.Close(ctx))
	_, err = n.cli.VolumeInspect(ctx, volume, client.VolumeInspectOptions{})
	require.Error(t, err, "the volume went with the container")
}
