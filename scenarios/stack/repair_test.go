package stack

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Env is what ExportLines writes for a shell, and it is enough for another
// process to reach the stack through the external provider.
func TestEnvReachesTheStack(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	env := map[string]string{}
	for i, kv := range s.Env() {
		name, value, ok := strings.Cut(kv, "=")
		require.True(t, ok, kv)
		env[name] = value
		require.Equal(t, "export "+name+"='"+value+"'", s.ExportLines()[i])
	}
	want := 6
	if s.Provider() == ProviderDocker {
		want += 2 // the network and bouncer image added bouncers join
		require.NotEmpty(t, env[EnvDockerNetwork])
		require.NotEmpty(t, env[EnvDockerPgBouncerImage])
	}
	if nb, ok := s.backend.(*nativeBackend); ok && nb.root != "" {
		want++ // the root added bouncers run from
		require.Equal(t, nb.root, env[EnvNativeRoot])
	}
	require.Len(t, env, want)
	ext, err := Start(context.Background(), Options{lookupEnv: lookup(env)})
	require.NoError(t, err)
	defer ext.Close(context.Background())
	require.Equal(t, s.Endpoints(), ext.Endpoints())
}

func TestRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ext, err := Start(ctx, Options{lookupEnv: lookup(exported(t, s))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ext.Close(context.Background()) })

	t.Run("NothingToSayWhenEveryServerAnswers", func(t *testing.T) {
		require.Empty(t, s.Repair(ctx))
		require.Empty(t, ext.Repair(ctx))
	})
	t.Run("ExternalOnlySaysWhatDoesNotAnswer", func(t *testing.T) {
		require.NoError(t, s.StopPgBouncer(ctx, SessionName))
		notes := ext.Repair(ctx)
		require.Len(t, notes, 1, "%q", notes)
		require.True(t, strings.HasPrefix(notes[0], "session does not answer ("), notes[0])
		require.True(t, strings.HasSuffix(notes[0], "); the external provider cannot start it again"), notes[0])
		require.Error(t, ping(ctx, s.Session().DSN), "still down")
	})
	t.Run("StartsAgainWhatDoesNotAnswer", func(t *testing.T) {
		require.NoError(t, s.StopPostgres(ctx))
		notes := s.Repair(ctx)
		require.Len(t, notes, 2, "%q", notes)
		require.Regexp(t, `^postgres did not answer \(.+\); started it again$`, notes[0])
		require.Regexp(t, `^session did not answer \(.+\); started it again$`, notes[1])
		for _, ep := range s.Endpoints() {
			require.NoError(t, ping(ctx, ep.DSN), "%s answers after Repair", ep.Name)
		}
		require.Empty(t, s.Repair(ctx))
	})
}

func TestCreateAndDropDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := sharedStack(t)
	name, err := s.CreateDatabase(ctx, "t_")
	require.NoError(t, err)
	require.Regexp(t, `^t_[0-9a-f]{12}$`, name)
	conn := connect(t, s.Transaction().WithDatabase(name))
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	require.Equal(t, name, db, "every endpoint reaches the new database")

	direct := connect(t, s.Postgres().WithDatabase(name))
	require.NoError(t, s.DropDatabase(ctx, name), "sessions still connected do not stop the drop")
	require.Error(t, direct.Ping(ctx), "the drop ended the session")
	require.NoError(t, s.DropDatabase(ctx, name), "dropping a database that is gone is not an error")
	require.Error(t, ping(ctx, s.Postgres().WithDatabase(name).DSN), "the database is gone")
}
