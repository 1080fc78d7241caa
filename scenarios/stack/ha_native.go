package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var _ haBackend = (*nativeBackend)(nil)

// startNode starts a node of an HA pair in the stack's dir, in
// pgdata-NAME: a primary from initdb, a standby from pg_basebackup -R of
// the primary over loopback (initdb's pg_hba.conf lets the superuser
// replicate from 127.0.0.1 with its password).
func (b *nativeBackend) startNode(ctx context.Context, spec nodeSpec) (node, string, int, error) {
	pgdata := filepath.Join(b.dir, "pgdata-"+spec.name)
	// A node that RebuildStandby starts again: its old data goes, with
	// the segment a killed server left (Close would remove both).
	if _, err := os.Stat(pgdata); err == nil {
		releaseSharedMemory(b.dir, slog.New(slog.DiscardHandler))
		if err := os.RemoveAll(pgdata); err != nil {
			return nil, "", 0, fmt.Errorf("remove the old %s: %w", pgdata, err)
		}
	}
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
	cmd := b.command(ctx, filepath.Join(b.binDir, "pg_basebackup"), "-D", pgdata, "-R", "-X", "stream", "-c", "fast", "--no-sync", "-d", conninfo)
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

// kill ends the server and every process it started, as a crash of its
// machine would, and returns when they are gone. Postgres puts each
// backend in a session of its own (setsid), so a signal to the
// postmaster's process group reaches none of them, and a SIGKILLed
// postmaster's backends go on serving their clients until they notice.
// So kill stops the postmaster first (it can neither fork nor react),
// SIGKILLs every child it has then, and the postmaster last.
func (p *process) kill(ctx context.Context) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("never started")
	}
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s: %w", p.name, err)
	}
	if err := pollUntil(ctx, time.Millisecond, func(context.Context) error {
		if st, _ := procState(pid); st != 'T' {
			return fmt.Errorf("%s (pid %d) is not stopped yet", p.name, pid)
		}
		return nil
	}); err != nil {
		return err
	}
	children := childrenOf(pid)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL %s: %w", p.name, err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Orphans are reaped by init; until then they are zombies.
	return pollUntil(ctx, time.Millisecond, func(context.Context) error {
		for _, c := range children {
			if st, err := procState(c); err == nil && st != 'Z' {
				return fmt.Errorf("%s's process %d still runs", p.name, c)
			}
		}
		return nil
	})
}

// procState is the state letter of process pid (R, S, T, Z, ...).
func procState(pid int) (byte, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 || i+2 >= len(raw) {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	return raw[i+2], nil
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
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
