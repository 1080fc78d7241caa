package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

var _ haBackend = (*nativeBackend)(nil)

// startNode starts a node of an HA pair in the stack's dir, in
// pgdata-NAME: a primary from initdb, a standby from pg_basebackup -R of
// the primary over loopback (initdb's pg_hba.conf lets the superuser
// replicate from 127.0.0.1 with its password).
func (b *nativeBackend) startNode(ctx context.Context, spec nodeSpec) (node, string, int, error) {
	pgdata := filepath.Join(b.dir, "pgdata-"+spec.name)
	if spec.primary == nil {
		if err := b.initdb(ctx, pgdata, spec.user, spec.password); err != nil {
			return nil, "", 0, err
		}
	} else if err := b.basebackup(ctx, pgdata, spec); err != nil {
		return nil, "", 0, err
	}
	if _, err := b.socketDir(); err != nil {
		return nil, "", 0, err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	p := b.postgresProcess(spec.name, pgdata, port, settingsHA...)
	if err := p.start(ctx); err != nil {
		return p, "", 0, err
	}
	if spec.primary == nil && spec.database != "postgres" {
		if err := b.createDatabase(ctx, filepath.Join(b.dir, "sock"), port, spec.user, spec.database); err != nil {
			return p, "", 0, err
		}
	}
	return p, "127.0.0.1", port, nil
}

// basebackup clones spec.primary into pgdata, writing standby.signal and
// a primary_conninfo that names the standby (application_name), so the
// primary's pg_stat_replication shows which node streams.
func (b *nativeBackend) basebackup(ctx context.Context, pgdata string, spec nodeSpec) error {
	_, port, err := splitHostPort(spec.primary.ep.DSN)
	if err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s application_name=%s", port, spec.user, spec.password, spec.name)
	cmd := exec.CommandContext(ctx, filepath.Join(b.binDir, "pg_basebackup"), "-D", pgdata, "-R", "-X", "stream", "-c", "fast", "--no-sync", "-d", conninfo)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred, Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup of %s: %w\n%s", spec.primary.name, err, out)
	}
	return nil
}

// routerHost is loopback: every client and bouncer of a native stack runs
// on this host.
func (b *nativeBackend) routerHost(context.Context) (string, error) { return "127.0.0.1", nil }

func (b *nativeBackend) forwardBouncers(host string, port int) { b.pgHost, b.pgPort = host, port }

// kill ends the server and every process it started at once with
// SIGKILL to its process group, as a crash of its machine would, and
// returns when it has exited. (SIGKILL to the postmaster alone would
// leave its backends serving their clients until they notice.)
func (p *process) kill(ctx context.Context) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("never started")
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL %s: %w", p.name, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// splitHostPort is the host and port of dsn.
func splitHostPort(dsn string) (string, int, error) {
	host, port, err := net.SplitHostPort(hostPort(dsn))
	if err != nil {
		return "", 0, fmt.Errorf("address of a DSN: %w", err)
	}
	n, err := strconv.Atoi(port)
	return host, n, err
}
