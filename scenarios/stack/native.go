package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/doublerun/doublerun/pgbouncer"
)

// nativeBackend runs postgres and pgbouncer as child processes on loopback,
// in one temp dir per stack. As root it runs them as the postgres user,
// because both refuse to run as root.
//
// With a root (a directory holding a whole Debian filesystem, see
// root.go) the binaries are that filesystem's, run chrooted into it as its
// own postgres user; the stack's dir is visible at the same path inside
// and outside the root, so every path below means the same to the
// harness and to the servers.
type nativeBackend struct {
	dir      string
	root     string // "" for the host's own filesystem
	rootFrom string // what lends root its filesystem, for the route line
	// rootStack is the docker stack ID on the image root's container
	// (LabelStack), "" for none.
	rootStack string
	binDir    string // initdb and postgres, inside root
	pgbouncer string // inside root
	cred      *syscall.Credential
	uid, gid  int
	pgHost    string // where the bouncers forward to
	pgPort    int
	log       interface{ Info(string, ...any) }
	// release frees what lends the root its filesystem (an image's
	// container), after the servers and the dir are gone.
	release func(context.Context) error
}

func newNativeBackend(opts Options) (*nativeBackend, error) {
	return newNativeBackendIn(opts, "")
}

// newNativeBackendIn is newNativeBackend with its binaries under root ("":
// the host's).
func newNativeBackendIn(opts Options, root string) (*nativeBackend, error) {
	var binDir string
	var err error
	if root != "" {
		binDir, err = rootPostgresBinDir(root)
	} else {
		binDir, err = findPostgresBinDir(opts.PostgresBinDir)
	}
	if err != nil {
		return nil, err
	}
	b, err := newNativeBouncersIn(opts, root)
	if err != nil {
		return nil, err
	}
	b.binDir = binDir
	return b, nil
}

// newNativeBouncers returns a native backend that can start PgBouncers but
// has no Postgres of its own: set pgHost and pgPort before starting one.
// The external provider uses it to add bouncers in front of a Postgres it
// does not own, with the root the environment names (EnvNativeRoot) when
// that stack's own servers run in one, unless a pgbouncer binary is named
// (EnvPgBouncerBin).
func newNativeBouncers(opts Options) (*nativeBackend, error) {
	if opts.PgBouncerBin != "" {
		return newNativeBouncersIn(opts, "")
	}
	return newNativeBouncersIn(opts, opts.getenv(EnvNativeRoot))
}

func newNativeBouncersIn(opts Options, root string) (*nativeBackend, error) {
	if root != "" {
		return newRootedBouncers(opts, root)
	}
	bouncerBin, err := findPgBouncer(opts.PgBouncerBin)
	if err != nil {
		return nil, err
	}
	b := &nativeBackend{pgbouncer: bouncerBin, pgHost: "127.0.0.1", uid: -1, gid: -1, log: opts.Logger}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("native provider: running as root needs a 'postgres' user to run the servers (postgres and pgbouncer refuse root); install package postgresql-15 or run as a non-root user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		b.uid, b.gid = uid, gid
		b.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return b, b.makeDir()
}

// makeDir makes the stack's temp dir in nativeRoot(), with its owner file,
// and hands it to the servers' user.
func (b *nativeBackend) makeDir() error {
	parent := nativeRoot()
	dir, err := os.MkdirTemp(parent, nativeDirPrefix)
	if err != nil {
		return stackDirError(parent, err)
	}
	b.dir = dir
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(self().encode()), 0o644); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("native provider: %w", err)
	}
	if err := b.own(dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	return nil
}

// command is a helper program of the servers' (initdb, psql,
// pg_basebackup) run as their user, in its own process group, inside the
// root when there is one.
func (b *nativeBackend) command(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred, Setpgid: true, Chroot: b.root}
	if b.root != "" {
		cmd.Dir = "/"
	}
	return cmd
}

const (
	nativeDirPrefix = "doublerun-stack-"
	// ownerFile names the process that started the stack (owner.encode).
	ownerFile = "owner.pid"
)

// EnvStackDir names the directory in which the native provider makes each
// stack's temp dir, Postgres's data among it.
const EnvStackDir = "DOUBLERUN_STACK_DIR"

// shmDir is a tmpfs on most Linux hosts.
const shmDir = "/dev/shm"

// nativeRoot is where a native stack lives: DOUBLERUN_STACK_DIR when set,
// else /dev/shm when it is writable and has a GiB free, else the system's
// temp dir. A stack's data is thrown away with it, and on a tmpfs Postgres
// creates a test database in about 0.02 s of CPU instead of about 0.3 s on
// a disk, and the lease package's tests, which create about 60, took
// 11.3 s instead of 28.6 s against one shared stack.
func nativeRoot() string {
	if d := os.Getenv(EnvStackDir); d != "" {
		return d
	}
	var st syscall.Statfs_t
	if syscall.Access(shmDir, 2 /* W_OK */) == nil && syscall.Statfs(shmDir, &st) == nil &&
		uint64(st.Bavail)*uint64(st.Bsize) >= 1<<30 {
		return shmDir
	}
	return os.TempDir()
}

// stackDirError says why no stack dir could be made in root, naming
// DOUBLERUN_STACK_DIR when root came from it.
func stackDirError(root string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if d := os.Getenv(EnvStackDir); d != "" && d == root {
		return fmt.Errorf("native provider: cannot make the stack's temp dir in %s=%s (%v); set it to a directory you can write to, or unset it", EnvStackDir, d, err)
	}
	return fmt.Errorf("native provider: cannot make the stack's temp dir in %s (%v); set %s to a directory you can write to", root, err, EnvStackDir)
}

// own hands path to the user the servers run as.
func (b *nativeBackend) own(path string) error {
	if b.cred == nil {
		return nil
	}
	if err := os.Chown(path, b.uid, b.gid); err != nil {
		return fmt.Errorf("native provider: chown %s: %w", path, err)
	}
	return nil
}

func (b *nativeBackend) writeFile(name, content string, mode os.FileMode) (string, error) {
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		return "", fmt.Errorf("native provider: write %s: %w", p, err)
	}
	return p, b.own(p)
}

func (b *nativeBackend) startPostgres(ctx context.Context, user, password, db string) (node, string, int, error) {
	pgdata := filepath.Join(b.dir, "pgdata")
	template, err := b.unpackTemplate(ctx, pgdata, user)
	if err != nil {
		return nil, "", 0, err
	}
	if !template {
		if err := b.initdb(ctx, pgdata, user, password); err != nil {
			return nil, "", 0, err
		}
	}
	sock, err := b.socketDir()
	if err != nil {
		return nil, "", 0, err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	b.pgPort = port
	p := b.postgresProcess("postgres", pgdata, port)
	if err := p.start(ctx); err != nil {
		return p, "", 0, err
	}
	var sqls []string
	if template {
		// The image's cluster has no password for its superuser.
		sqls = append(sqls, fmt.Sprintf("ALTER ROLE %q PASSWORD '%s'", user, strings.ReplaceAll(password, "'", "''")))
	}
	if db != "postgres" {
		sqls = append(sqls, fmt.Sprintf("CREATE DATABASE %q", db))
	}
	if err := b.psql(ctx, sock, port, user, sqls...); err != nil {
		return p, "", 0, err
	}
	return p, "127.0.0.1", port, nil
}

// templatePath is where doublerun's images keep a cluster made at build
// time for user (images/build.sh, bake_template), inside their root.
func templatePath(user string) string { return "/var/lib/postgresql/template-" + user + ".tar" }

// unpackTemplate makes pgdata a copy of the image's cluster when the
// backend runs in an image's root that has one for user, and reports
// whether it did. Unpacking costs 0.04 core-seconds, initdb 0.55 (on a
// tmpfs, both in a container of doublerun/postgres:17-local), and every
// stack starts a Postgres. Its copies share the template's system
// identifier, so an HA pair's primary, beside its oracle, runs initdb
// (startNode).
func (b *nativeBackend) unpackTemplate(ctx context.Context, pgdata, user string) (bool, error) {
	if b.root == "" {
		return false, nil
	}
	tar := templatePath(user)
	if _, err := os.Stat(filepath.Join(b.root, tar)); err != nil {
		return false, nil
	}
	if err := os.Mkdir(pgdata, 0o700); err != nil {
		return false, fmt.Errorf("native provider: %w", err)
	}
	if err := b.own(pgdata); err != nil {
		return false, err
	}
	if out, err := b.command(ctx, "/bin/tar", "-xf", tar, "-C", pgdata).CombinedOutput(); err != nil {
		return false, fmt.Errorf("unpack the image's cluster %s: %w\n%s", tar, err, out)
	}
	return true, nil
}

// initdb initialises a cluster in pgdata whose superuser is user.
func (b *nativeBackend) initdb(ctx context.Context, pgdata, user, password string) error {
	pwfile, err := b.writeFile("pwfile", password+"\n", 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(pwfile)
	initdb := b.command(ctx, filepath.Join(b.binDir, "initdb"), "-D", pgdata, "-U", user,
		"--pwfile="+pwfile, "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// socketDir makes, once, the directory every Postgres of the stack puts
// its Unix socket in; the socket's name has the port in it.
func (b *nativeBackend) socketDir() (string, error) {
	sock := filepath.Join(b.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil && !os.IsExist(err) {
		return "", err
	}
	return sock, b.own(sock)
}

// postgresProcess is a Postgres on pgdata, listening on port; args are
// settings beside the stack's usual ones, which they override.
func (b *nativeBackend) postgresProcess(name, pgdata string, port int, args ...string) *process {
	return &process{
		name: name,
		path: filepath.Join(b.binDir, "postgres"),
		args: append([]string{"-D", pgdata, "-p", strconv.Itoa(port), "-k", filepath.Join(b.dir, "sock"),
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			// Dynamic shared memory as files in pgdata/pg_dynshmem rather
			// than /dev/shm/PostgreSQL.<random>: the names in /dev/shm are
			// shared by every Postgres on the machine and nothing says which
			// server made one, so a killed stack left two (about 1.1 MB)
			// that no sweep could tell from another server's. In the stack's
			// dir they go with it. Postgres's manual discourages mmap for
			// the writes back to disk, except where pg_dynshmem is on a RAM
			// disk, as the stack's dir is when /dev/shm has room (nativeRoot).
			"-c", "dynamic_shared_memory_type=mmap"}, args...),
		logPath: filepath.Join(b.dir, name+".log"),
		cred:    b.cred,
		root:    b.root,
		stopSig: syscall.SIGINT, // fast shutdown
		uid:     b.uid,
		gid:     b.gid,
	}
}

// createDatabase waits for the server through its socket and creates db.
func (b *nativeBackend) createDatabase(ctx context.Context, sock string, port int, user, db string) error {
	return b.psql(ctx, sock, port, user, fmt.Sprintf("CREATE DATABASE %q", db))
}

// psql waits for the server through its socket and runs each statement
// in sqls on its own (CREATE DATABASE cannot share a transaction) in one
// session, as user in database postgres. No statements, no session.
func (b *nativeBackend) psql(ctx context.Context, sock string, port int, user string, sqls ...string) error {
	if len(sqls) == 0 {
		return nil
	}
	args := []string{"-h", sock, "-p", strconv.Itoa(port), "-U", user, "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q"}
	for _, sql := range sqls {
		args = append(args, "-c", sql)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := b.command(ctx, filepath.Join(b.binDir, "psql"), args...).CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w\n%s", sqls[len(sqls)-1], err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *nativeBackend) startPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (node, string, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	cfg.ListenAddr = "127.0.0.1"
	cfg.ListenPort = port
	cfg.AuthFile = filepath.Join(b.dir, name+".userlist.txt")
	cfg.Databases = bouncerDatabases(cfg.Databases, b.pgHost, b.pgPort)
	cfg.Version = b.version(ctx)
	ini, err := cfg.Ini()
	if err != nil {
		return nil, "", 0, err
	}
	if _, err := b.writeFile(name+".userlist.txt", cfg.Userlist(), 0o600); err != nil {
		return nil, "", 0, err
	}
	iniPath, err := b.writeFile(name+".ini", ini, 0o600)
	if err != nil {
		return nil, "", 0, err
	}
	p := &process{
		name:    "pgbouncer " + name,
		path:    b.pgbouncer,
		args:    []string{iniPath},
		logPath: filepath.Join(b.dir, name+".log"),
		cred:    b.cred,
		root:    b.root,
		stopSig: pgbouncerStopSignal(cfg.Version), // immediate shutdown
		uid:     b.uid,
		gid:     b.gid,
	}
	if err := p.start(ctx); err != nil {
		return p, "", 0, err
	}
	return p, "127.0.0.1", port, nil
}

func (b *nativeBackend) version(ctx context.Context) string {
	out, err := b.command(ctx, b.pgbouncer, "--version").Output()
	if err != nil {
		return ""
	}
	v, err := pgbouncer.ParseVersion(string(out))
	if err != nil {
		return ""
	}
	return v.String()
}

func (b *nativeBackend) close(ctx context.Context) error {
	// A server KillPrimary killed left its System V segment, which only a
	// clean shutdown removes; its processes are gone, so it can go now.
	releaseSharedMemory(b.dir, slog.New(slog.DiscardHandler))
	var err error
	if rmErr := os.RemoveAll(b.dir); rmErr != nil {
		err = fmt.Errorf("native provider: remove %s: %w", b.dir, rmErr)
	}
	if b.release != nil {
		err = errors.Join(err, b.release(ctx))
	}
	return err
}

// process is one server run as a child process. It can be stopped and
// started again with the same arguments.
type process struct {
	name     string
	path     string
	args     []string
	logPath  string
	cred     *syscall.Credential
	root     string // chroot, "" for none
	stopSig  syscall.Signal
	uid, gid int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *process) start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return nil // already running
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log %s: %w", p.logPath, err)
	}
	if p.uid >= 0 {
		_ = os.Chown(p.logPath, p.uid, p.gid)
	}
	// Not CommandContext: a server outlives the context that started it.
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// Own process group, so a terminal's Ctrl-C reaches the harness, which
	// then shuts the servers down in order; Pdeathsig, so a harness that is
	// killed outright does not leave servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL, Chroot: p.root}
	if p.root != "" {
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.path, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		if err == nil {
			p.err = errors.New("exited with status 0")
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited returns an error once the process has ended.
func (p *process) exited() error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	default:
		return nil
	}
}

func (p *process) setPgBouncerVersion(version string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopSig = pgbouncerStopSignal(version)
}

func (p *process) stop(ctx context.Context) error {
	p.mu.Lock()
	cmd, done, sig := p.cmd, p.done, p.stopSig
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

func (p *process) terminate(ctx context.Context) error { return p.stop(ctx) }

func (p *process) logs(context.Context) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("--- %s log (%s) ---\n%s", p.name, p.logPath, tail(data, 40))
}

func tail(data []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
