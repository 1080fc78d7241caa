package stack

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/pgbouncer"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// Bad external DSNs fail with one line that names the variable, says what
// is wrong, and what to do.
func TestExternalProviderErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	nowhere := fmt.Sprintf("postgres://x:p@127.0.0.1:%d/db", closedPort(t))
	for _, tc := range []struct {
		name    string
		set     map[string]string
		want    []string
		notWant string
	}{
		{
			name: "PostgresDSNWhereNothingListens",
			set:  map[string]string{EnvPostgresDSN: nowhere},
			want: []string{"external provider: " + EnvPostgresDSN + " (127.0.0.1:", ") does not answer: ", "connect: connection refused",
				"; start that server, or run `doublerun stack up` and eval its export lines, or unset " + EnvProvider},
			notWant: "failed to connect to",
		},
		{
			name: "SessionDSNWhereNothingListens",
			set:  map[string]string{EnvSessionDSN: nowhere},
			want: []string{"external provider: " + EnvSessionDSN + " (127.0.0.1:", "connection refused", "start that server"},
		},
		{
			name: "TransactionAdminDSNWhereNothingListens",
			set:  map[string]string{EnvTransactionAdminDSN: nowhere},
			want: []string{"external provider: " + EnvTransactionAdminDSN + " (127.0.0.1:", "connection refused", "start that server"},
		},
		{
			name: "AdminDSNPointingAtPostgres",
			set:  map[string]string{EnvSessionAdminDSN: s.Postgres().DSN},
			want: []string{"external provider: " + EnvSessionAdminDSN + " reaches Postgres, not PgBouncer's admin console (SHOW VERSION: unrecognized configuration parameter \"version\"); set it to the session bouncer's address with database pgbouncer, such as postgres://doublerun_admin:PASSWORD@" + hostPort(s.Session().DSN) + "/pgbouncer"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := exported(t, s)
			for k, v := range tc.set {
				env[k] = v
			}
			_, err := Start(context.Background(), Options{lookupEnv: lookup(env)})
			require.Error(t, err)
			msg := err.Error()
			require.NotContains(t, msg, "\n", "one line")
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
			if tc.notWant != "" {
				require.NotContains(t, msg, tc.notWant)
			}
			require.NotContains(t, msg, s.password, "no password in the message")
			require.Equal(t, 1, strings.Count(msg, "connect: connection refused")+strings.Count(msg, "admin console ("), "the cause once: %s", msg)
		})
	}
}

// A PgBouncer binary variable that points at a directory, or at something
// that is not executable, is named as such, with the fix, and the bouncer's
// name is not repeated.
func TestPgBouncerBinThatIsNotABinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "pgbouncer")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	fix := "; set it to the pgbouncer binary (such as /usr/sbin/pgbouncer) or unset it"
	for _, tc := range []struct{ bin, want string }{
		{dir, EnvPgBouncerBin + "=" + dir + " is a directory, not the pgbouncer binary" + fix},
		{notExec, EnvPgBouncerBin + "=" + notExec + " is not executable" + fix},
	} {
		_, err := Start(context.Background(), Options{Provider: ProviderNative, PgBouncerBin: tc.bin})
		require.EqualError(t, err, tc.want)
	}

	// The same variable on an external stack, whose added bouncers run
	// locally.
	s := sharedStack(t)
	env := localBouncers(exported(t, s))
	env[EnvPgBouncerBin] = dir
	ext, err := Start(context.Background(), Options{lookupEnv: lookup(env)})
	require.NoError(t, err)
	defer ext.Close(context.Background())
	_, err = ext.AddPgBouncer(context.Background(), "added", pgbouncer.Config{})
	require.EqualError(t, err, "pgbouncer added: the external provider runs an added PgBouncer as a local process: "+EnvPgBouncerBin+"="+dir+" is a directory, not the pgbouncer binary"+fix)
}

// A bouncer that exits at once is named once in the error, not twice.
func TestFailedBouncerIsNamedOnce(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	env := localBouncers(exported(t, s))
	env[EnvPgBouncerBin] = "/bin/false"
	ext, err := Start(context.Background(), Options{lookupEnv: lookup(env)})
	require.NoError(t, err)
	defer ext.Close(context.Background())
	_, err = ext.AddPgBouncer(context.Background(), "broken", pgbouncer.Config{})
	require.Error(t, err)
	line := firstLine(err)
	require.True(t, strings.HasPrefix(line, "pgbouncer broken: server exited during start: "), line)
	require.Equal(t, 1, strings.Count(line, "broken"), line)
}
