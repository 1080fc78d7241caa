//go:build !doublerun_nodocker

package stack

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
)

// logLines captures a logger's messages.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{l}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type lockedWriter struct{ l *logLines }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.buf.Write(p)
}

// with returns the captured lines that contain s.
func (l *logLines) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// requireDocker fails without a Docker engine, unless the run asked for
// the native or external provider, whose runs never need one.
func requireDocker(t *testing.T) {
	t.Helper()
	if p := Provider(os.Getenv(EnvProvider)); p == ProviderNative || p == ProviderExternal {
		t.Skipf("a docker provider test; %s=%s", EnvProvider, p)
	}
}

// Without a Docker engine the auto provider takes the native binaries and
// says so, with the reason, in one line.
func TestAutoTakesNativeWithoutDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	var logs logLines
	s, err := Start(context.Background(), Options{Provider: ProviderAuto, Logger: logs.logger()})
	require.NoError(t, err)
	defer s.Close(context.Background())
	require.Equal(t, ProviderNative, s.Provider())
	route := logs.with("stack route:")
	require.Len(t, route, 1, "one route line")
	require.Contains(t, route[0], "stack route: native binaries: Postgres "+strings.Fields(s.Versions().Postgres)[0])
	require.Contains(t, route[0], "; no Docker engine answers: DOCKER_HOST=unix:///nonexistent/docker.sock")
}

// The docker provider runs the version set asked for: the servers it
// starts report that set's versions.
func TestDockerRunsTheVersionSetAskedFor(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	for _, set := range VersionSets() {
		t.Run(set.Name, func(t *testing.T) {
			t.Parallel()
			var logs logLines
			s, err := Start(context.Background(), Options{Provider: ProviderDocker, Versions: set.Name, Logger: logs.logger()})
			require.NoError(t, err)
			defer s.Close(context.Background())
			require.Equal(t, set.Name, s.Versions().Set)
			route := logs.with("stack route:")
			require.Len(t, route, 1, "one route line")
			public := fmt.Sprintf("docker with public images %s and %s (%s)", hubImage(set.PublicPostgresImage), hubImage(set.PublicPgBouncerImage), set.Name)
			local := fmt.Sprintf("docker with local images %s and %s (%s; public images cannot be pulled: ", set.LocalPostgresImage, set.LocalPgBouncerImage, set.Name)
			require.True(t, strings.Contains(route[0], public) || strings.Contains(route[0], local), route[0])
		})
	}
}

// Image variables are used exactly as given: never swapped for the version
// set's images, and a missing one fails with its name.
func TestDockerUsesImageVariablesAsGiven(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	// The older set's images, pulled or built the way its stacks get them.
	old := VersionSets()[0]
	imgs := setImages(t, old)
	var logs logLines
	s, err := Start(context.Background(), Options{
		Provider: ProviderDocker, Versions: DefaultVersions, Logger: logs.logger(),
		PostgresImage: imgs.postgres, PgBouncerImage: imgs.pgbouncer,
	})
	require.NoError(t, err)
	defer s.Close(context.Background())
	require.Equal(t, old.Name, s.Versions().Set, "the images given, not the version set's")
	require.Empty(t, logs.with("pulled image"), "nothing pulled")
	route := logs.with("stack route:")
	require.Len(t, route, 1)
	require.Contains(t, route[0], "docker with the images from DOUBLERUN_POSTGRES_IMAGE and DOUBLERUN_PGBOUNCER_IMAGE: "+imgs.postgres+" and "+imgs.pgbouncer)

	_, err = Start(context.Background(), Options{
		Provider: ProviderDocker, PostgresImage: "doublerun/postgres:no-such-tag", PgBouncerImage: imgs.pgbouncer,
	})
	require.Error(t, err)
	require.Contains(t, firstLine(err), "doublerun/postgres:no-such-tag")
	require.Contains(t, firstLine(err), "unset DOUBLERUN_POSTGRES_IMAGE and DOUBLERUN_PGBOUNCER_IMAGE to let doublerun pick (and build) images")
}

// setImages returns set's images as the docker provider resolves them:
// its public images where they can be pulled, else its local ones, built
// first when missing.
func setImages(t *testing.T, set VersionSet) dockerImages {
	t.Helper()
	ctx := context.Background()
	opts, err := Options{Provider: ProviderDocker, Versions: set.Name}.resolve()
	require.NoError(t, err)
	_, err = prepareRyuk(ctx, opts.Logger)
	require.NoError(t, err)
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	require.NoError(t, err)
	defer cli.Close()
	imgs, err := resolveImages(ctx, opts, cli)
	require.NoError(t, err, "the images of %s", set.Name)
	return imgs
}

// fakeHost points the native provider at an empty host with a fake apt-get
// that "installs" the real binaries (as symlinks, after a pause, counting
// its calls), and restores the real host when the test ends.
func fakeHost(t *testing.T, root bool) (logPath string) {
	t.Helper()
	realBin, err := findPostgresBinDir("")
	require.NoError(t, err, "this test links the host's postgres binaries")
	realBouncer, err := findPgBouncer("")
	require.NoError(t, err)

	dir := t.TempDir()
	// The servers run as the postgres user when the test runs as root.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	logPath = filepath.Join(dir, "apt.log")
	pgDir := filepath.Join(dir, "usr/lib/postgresql/15/bin")
	script := fmt.Sprintf(`#!/bin/sh
PATH=/usr/bin:/bin
echo "$*" >>%[1]s
[ "$1" = install ] || exit 0
sleep 1
mkdir -p %[2]s %[3]s/usr/sbin
for b in initdb postgres psql; do ln -sf %[4]s/$b %[2]s/$b; done
ln -sf %[5]s %[3]s/usr/sbin/pgbouncer
`, logPath, pgDir, dir, realBin, realBouncer)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "apt-get"), []byte(script), 0o755))

	saved := host
	host = hostTools{
		postgresDirs:   filepath.Join(dir, "usr/lib/postgresql/*/bin"),
		pgbouncerPaths: []string{filepath.Join(dir, "usr/sbin/pgbouncer")},
		aptGet:         filepath.Join(bin, "apt-get"),
		root:           func() bool { return root },
		lockPath:       filepath.Join(dir, "apt.lock"),
	}
	t.Setenv("PATH", bin)
	t.Cleanup(func() { host = saved })
	return logPath
}

// Without binaries and without root, the native provider names the
// command to run, in one line.
func TestNativeNamesTheInstallCommand(t *testing.T) {
	fakeHost(t, false)
	_, err := Start(context.Background(), Options{Provider: ProviderNative})
	require.EqualError(t, err, "postgresql and pgbouncer not installed; run `sudo apt-get install postgresql pgbouncer`, or start Docker")
}

// As root with apt-get, the native provider installs the missing packages
// and says so in one line; stacks that start at the same time install
// once (the lock is a file, so separate processes wait the same way).
func TestNativeInstallsMissingPackagesOnce(t *testing.T) {
	aptLog := fakeHost(t, true)
	var logs logLines
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = installNative(context.Background(), logs.logger(), Options{}, "no Docker engine answers")
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	calls, err := os.ReadFile(aptLog)
	require.NoError(t, err)
	require.Equal(t, "update -qq\ninstall -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 postgresql pgbouncer\n", string(calls))
	require.Equal(t, 1, len(logs.with("installing")))
	require.Contains(t, logs.with("installing")[0], "native provider: installing postgresql and pgbouncer with apt-get, about 20 s; no Docker engine answers")

	// What was installed runs.
	s, err := Start(context.Background(), Options{Provider: ProviderNative, Logger: logs.logger()})
	require.NoError(t, err)
	defer s.Close(context.Background())
	connect(t, s.Transaction())
	require.Contains(t, logs.with("stack route:")[0], "native binaries: Postgres ")
	require.Contains(t, logs.with("stack route:")[0], strings.TrimSuffix(host.postgresDirs, "*/bin")+"15/bin")
}
