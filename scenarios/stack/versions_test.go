package stack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLookupVersionSet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want, err string
	}{
		{name: "pg15-pgbouncer1.18", want: "pg15-pgbouncer1.18"},
		{name: "pg17-pgbouncer1.24", want: "pg17-pgbouncer1.24"},
		{name: "pg16-pgbouncer1.22", err: `unknown version set "pg16-pgbouncer1.22"; use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24`},
		{name: "all", err: `version set "all" is for the chaos matrix; a stack runs one set: use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := LookupVersionSet(tc.name)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, set.Name)
		})
	}
	require.Equal(t, "pg17-pgbouncer1.24", DefaultVersions, "the newest set is the default")
}

func TestOptionsPickTheVersionSet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opts  Options
		env   map[string]string
		want  string
		asked bool
	}{
		{name: "DefaultIsTheNewest", want: DefaultVersions},
		{name: "FromTheEnvironment", env: map[string]string{EnvVersions: " pg15-pgbouncer1.18 "}, want: "pg15-pgbouncer1.18", asked: true},
		{name: "OptionBeatsTheEnvironment", opts: Options{Versions: "pg17-pgbouncer1.24"}, env: map[string]string{EnvVersions: "pg15-pgbouncer1.18"}, want: "pg17-pgbouncer1.24", asked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.lookupEnv = lookup(tc.env)
			got, err := tc.opts.resolve()
			require.NoError(t, err)
			require.Equal(t, tc.want, got.Versions)
			require.Equal(t, tc.want, got.versionSet.Name)
			require.Equal(t, tc.asked, got.versionsAsked)
			require.Empty(t, got.PostgresImage, "images are resolved at start, never defaulted here")
		})
	}
	_, err := Options{lookupEnv: lookup(map[string]string{EnvVersions: "pg9"})}.resolve()
	require.ErrorContains(t, err, `unknown version set "pg9"`)
}

func TestSetNameFromServerVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ postgres, pgbouncer, want string }{
		{"15.13 (Debian 15.13-0+deb12u1)", "1.18.0", "pg15-pgbouncer1.18"},
		{"17.12 (Debian 17.12-0+deb13u1)", "PgBouncer 1.24.1", "pg17-pgbouncer1.24"},
		{"9.6.24", "1.9", "pg9-pgbouncer1.9"},
		{"", "", "pg?-pgbouncer?"},
	} {
		require.Equal(t, tc.want, setName(tc.postgres, tc.pgbouncer), "%q %q", tc.postgres, tc.pgbouncer)
	}
}

func TestPgBouncerStopSignalByVersion(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]syscall.Signal{
		"1.18.0": syscall.SIGTERM, "1.22.1": syscall.SIGTERM, "1.23.0": syscall.SIGQUIT,
		"1.24.1": syscall.SIGQUIT, "2.0.0": syscall.SIGQUIT, "": syscall.SIGTERM,
	} {
		require.Equal(t, want, pgbouncerStopSignal(version), version)
	}
}

// The shell script that builds the local images has its own table of
// version sets; it must name the same images as the Go table.
func TestBuildScriptKnowsEveryVersionSet(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("bash", "images/build.sh", "--list").Output()
	require.NoError(t, err)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		got = append(got, strings.Join(strings.Fields(line), " "))
	}
	var want []string
	for _, s := range VersionSets() {
		want = append(want, strings.Join([]string{s.Name, s.Suite, s.Postgres, s.PgBouncer, s.LocalPostgresImage, s.LocalPgBouncerImage}, " "))
	}
	require.Equal(t, want, got)

	out, err = exec.Command("bash", "images/build.sh", "pg99-pgbouncer9").CombinedOutput()
	require.Error(t, err)
	require.Equal(t, "images: unknown version set 'pg99-pgbouncer9'; known: pg15-pgbouncer1.18 pg17-pgbouncer1.24 \n", string(out))
}

// build.sh takes its Debian mirror from the host's apt sources: the first
// source serving the host's own suite, in one-line or deb822 form.
func TestBuildScriptFindsMirrorInAptSources(t *testing.T) {
	t.Parallel()
	const osRelease = "ID=debian\nVERSION_CODENAME=bookworm\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{
			name: "OneLineSourcesList",
			files: map[string]string{"sources.list": "# comment\ndeb-src http://src.example/debian bookworm main\n" +
				"deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main\n"},
			want: "http://one.example/debian",
		},
		{
			name: "Deb822SkipsOtherSuitesAndDisabledStanzas",
			files: map[string]string{"sources.list.d/debian.sources": "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n" +
				"Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n" +
				"# a comment\nTypes: deb deb-src\nURIs: http://822.example/debian http://second.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /k.gpg\n"},
			want: "http://822.example/debian",
		},
		{
			name: "IgnoresOtherRepositoriesAndDisabledFiles",
			files: map[string]string{
				"sources.list.d/vendor.list":             "deb https://vendor.example/apt stable main\n",
				"sources.list.d/x.sources.disabled":      "Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\n",
				"sources.list.d/z-debian.sources":        "Types: deb\nURIs: http://z.example/debian\nSuites: bookworm\n",
				"sources.list.d/nodesource.sources.off":  "Types: deb\nURIs: http://node.example/\nSuites: nodistro\n",
				"sources.list.d/a-other-suite.sources":   "Types: deb\nURIs: http://trixie.example/debian\nSuites: trixie\n",
				"sources.list.d/b-not-deb-types.sources": "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n",
			},
			want: "http://z.example/debian",
		},
		{name: "NothingFound", files: map[string]string{"sources.list": "deb http://x.example/ubuntu noble main\n"}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc/os-release"), []byte(osRelease), 0o644))
			for name, content := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/apt", name), []byte(content), 0o644))
			}
			out, err := exec.Command("bash", "images/build.sh", "--mirror", root).Output()
			require.NoError(t, err)
			require.Equal(t, tc.want, strings.TrimSpace(string(out)))
		})
	}
}

// Every endpoint reports the Postgres version behind it, read from the
// running server, and the stack names its versions.
func TestStackReportsServerVersions(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	conn := connect(t, s.Postgres())
	var serverVersion string
	require.NoError(t, conn.QueryRow(context.Background(), "SHOW server_version").Scan(&serverVersion))

	v := s.Versions()
	require.Equal(t, serverVersion, v.Postgres)
	require.Equal(t, s.Transaction().Version, v.PgBouncer)
	require.NotEmpty(t, v.PgBouncer)
	for _, ep := range s.Endpoints() {
		require.Equal(t, serverVersion, ep.PostgresVersion, ep.Name)
	}
	require.Equal(t, setName(serverVersion, v.PgBouncer), v.Set)
	require.NotContains(t, v.Set, "?")

	opts, err := Options{}.resolve()
	require.NoError(t, err)
	switch s.Provider() {
	case ProviderDocker:
		if opts.PostgresImage == "" && opts.PgBouncerImage == "" {
			require.Equal(t, opts.versionSet.Name, v.Set, "the docker provider runs the version set asked for")
		}
	case ProviderNative:
		if nb, ok := s.backend.(*nativeBackend); ok && nb.root != "" {
			require.Equal(t, opts.versionSet.Name, v.Set, "native processes on an image's filesystem run the version set asked for")
			break
		}
		bin, err := findPostgresBinDir(opts.PostgresBinDir)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(postgresVersion(context.Background(), filepath.Join(bin, "postgres")), strings.Fields(v.Postgres)[0]),
			"the native provider runs the host's binaries")
	}
}
