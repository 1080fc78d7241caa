package stack

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostTools is where the native provider looks for binaries and how it
// installs missing ones; tests point it at fakes.
type hostTools struct {
	// postgresDirs is a glob of directories holding initdb and postgres,
	// searched after PATH, newest major first.
	postgresDirs string
	// pgbouncerPaths are searched after PATH.
	pgbouncerPaths []string
	// aptGet installs packages; root reports whether it may.
	aptGet string
	root   func() bool
	// lockPath serialises installs across processes.
	lockPath string
}

var host = hostTools{
	postgresDirs:   "/usr/lib/postgresql/*/bin",
	pgbouncerPaths: []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"},
	aptGet:         "apt-get",
	root:           func() bool { return os.Geteuid() == 0 },
	lockPath:       "/var/tmp/doublerun-apt.lock",
}

// installHint is the command that installs the native provider's binaries.
const installHint = "sudo apt-get install postgresql pgbouncer"

// missingBinaryError says that a binary the native provider needs is not
// installed where it looks (as opposed to a path the user set that is
// wrong). It is the one error installNative can fix.
type missingBinaryError struct{ msg string }

func (e *missingBinaryError) Error() string { return e.msg }

func findPostgresBinDir(override string) (string, error) {
	if override != "" {
		const fix = "set it to the directory holding initdb and postgres (such as /usr/lib/postgresql/15/bin) or unset it"
		st, err := os.Stat(override)
		switch {
		case err != nil:
			return "", fmt.Errorf("initdb not found in %s=%s; install package postgresql-15, %s", EnvPostgresBinDir, override, fix)
		case !st.IsDir():
			return "", fmt.Errorf("%s=%s is not a directory; %s", EnvPostgresBinDir, override, fix)
		}
		for _, bin := range []string{"initdb", "postgres"} {
			if err := executable(filepath.Join(override, bin)); err != nil {
				return "", fmt.Errorf("%s=%s has no %s (%v); %s", EnvPostgresBinDir, override, bin, err, fix)
			}
		}
		return override, nil
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			dir := filepath.Dir(real)
			if executable(filepath.Join(dir, "postgres")) == nil {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob(host.postgresDirs)
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, dir := range dirs {
		if executable(filepath.Join(dir, "initdb")) == nil && executable(filepath.Join(dir, "postgres")) == nil {
			return dir, nil
		}
	}
	return "", &missingBinaryError{fmt.Sprintf("postgres binaries (initdb, postgres) not found on PATH or in %s; run `%s`, set %s, or start Docker", host.postgresDirs, installHint, EnvPostgresBinDir)}
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func findPgBouncer(override string) (string, error) {
	if override != "" {
		const fix = "set it to the pgbouncer binary (such as /usr/sbin/pgbouncer) or unset it"
		st, err := os.Stat(override)
		switch {
		case err != nil:
			return "", fmt.Errorf("pgbouncer binary not found at %s=%s; install package pgbouncer, %s", EnvPgBouncerBin, override, fix)
		case st.IsDir():
			return "", fmt.Errorf("%s=%s is a directory, not the pgbouncer binary; %s", EnvPgBouncerBin, override, fix)
		}
		if err := executable(override); err != nil {
			return "", fmt.Errorf("%s=%s is not executable; %s", EnvPgBouncerBin, override, fix)
		}
		return override, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range host.pgbouncerPaths {
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", &missingBinaryError{fmt.Sprintf("pgbouncer binary not found on PATH or in %s; run `%s`, set %s, or start Docker", filepath.Dir(host.pgbouncerPaths[0]), installHint, EnvPgBouncerBin)}
}

// executable returns nil when path is a regular file someone may execute.
func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// missingPackages lists the Debian packages whose binaries the native
// provider looks for and does not find. A binary the user pointed at
// explicitly is never installed.
func missingPackages(opts Options) []string {
	var pkgs []string
	if _, err := findPostgresBinDir(opts.PostgresBinDir); isMissing(err) {
		pkgs = append(pkgs, "postgresql") // the suite's default major
	}
	if _, err := findPgBouncer(opts.PgBouncerBin); isMissing(err) {
		pkgs = append(pkgs, "pgbouncer")
	}
	return pkgs
}

func isMissing(err error) bool {
	_, ok := err.(*missingBinaryError)
	return ok
}

// installNative installs the native provider's missing binaries with
// apt-get, when running as root where apt-get exists (CI machines,
// containers), and says so in one line. Installs are serialised across
// processes (go test runs test binaries in parallel) and happen once: a
// process that waited for another's install finds the binaries and returns.
func installNative(ctx context.Context, log *slog.Logger, opts Options, why string) error {
	pkgs := missingPackages(opts)
	if len(pkgs) == 0 {
		return nil
	}
	cmdline := "apt-get install " + strings.Join(pkgs, " ")
	if !host.root() {
		return fmt.Errorf("%s not installed; run `sudo %s`, or start Docker", strings.Join(pkgs, " and "), cmdline)
	}
	if _, err := exec.LookPath(host.aptGet); err != nil {
		return fmt.Errorf("%s not installed and apt-get is not available; install Postgres and PgBouncer with the system's package manager, or start Docker", strings.Join(pkgs, " and "))
	}
	lock, err := lockFile(ctx, host.lockPath)
	if err != nil {
		return fmt.Errorf("native provider: %w", err)
	}
	defer lock.Close()
	if pkgs = missingPackages(opts); len(pkgs) == 0 {
		return nil // another process installed them while this one waited
	}
	log.Info(fmt.Sprintf("native provider: installing %s with apt-get, about 20 s; %s", strings.Join(pkgs, " and "), cmp.Or(why, "its binaries are missing")))
	for _, args := range [][]string{
		{"update", "-qq"},
		append([]string{"install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300"}, pkgs...),
	} {
		cmd := exec.CommandContext(ctx, host.aptGet, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s failed (%v: %s); run `%s` by hand to see why", args[0], err, lastLine(out), cmdline)
		}
	}
	if left := missingPackages(opts); len(left) > 0 {
		return fmt.Errorf("apt-get installed %s, but the binaries of %s are still not found; set %s and %s", strings.Join(pkgs, " "), strings.Join(left, " and "), EnvPostgresBinDir, EnvPgBouncerBin)
	}
	return nil
}

// lockFile takes an exclusive flock on path, creating it if need be and
// waiting for other processes until ctx ends, and returns the file
// locked: closing it unlocks it.
func lockFile(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func lastLine(out []byte) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return string(bytes.TrimSpace(lines[len(lines)-1]))
}

// describe is the native route line: which binaries, at which versions.
// The native provider runs whatever the host has; a version set asked for
// applies to the docker provider only, and the line says so when they
// differ.
func (b *nativeBackend) describe(ctx context.Context, opts Options) string {
	out, _ := b.command(ctx, filepath.Join(b.binDir, "postgres"), "--version").Output()
	pg := parsePostgresVersion(out)
	pgb := b.version(ctx)
	if b.root != "" {
		return fmt.Sprintf("native processes on %s: Postgres %s, PgBouncer %s (%s=docker runs each server in a container of its own)", b.rootFrom, pg, pgb, EnvProvider)
	}
	line := fmt.Sprintf("native binaries: Postgres %s from %s, PgBouncer %s from %s", pg, b.binDir, pgb, b.pgbouncer)
	if have := setName(pg, pgb); opts.versionsAsked && have != opts.versionSet.Name {
		line += fmt.Sprintf("; %s=%s applies to the docker provider, the host's binaries are %s", EnvVersions, opts.versionSet.Name, have)
	}
	return line
}

// postgresVersion runs `postgres --version` and returns the version part,
// such as "15.13 (Debian 15.13-0+deb12u1)".
func postgresVersion(ctx context.Context, bin string) string {
	out, _ := exec.CommandContext(ctx, bin, "--version").Output()
	return parsePostgresVersion(out)
}

// parsePostgresVersion is the version part of `postgres --version`'s
// output, "unknown" for none.
func parsePostgresVersion(out []byte) string {
	v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL)"))
	if v == "" {
		return "unknown"
	}
	return v
}
