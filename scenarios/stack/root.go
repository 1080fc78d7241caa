package stack

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvNativeRoot names a directory holding a whole Debian filesystem with
// Postgres and PgBouncer installed (a local image's, see imageRoot). The
// native provider then runs that filesystem's binaries, chrooted into it,
// instead of the host's. A stack whose servers run so sets it in its Env,
// so that an external stack built from Env adds its bouncers from the same
// filesystem, at the same version.
const EnvNativeRoot = "DOUBLERUN_NATIVE_ROOT"

// rootBouncer is where Debian's pgbouncer package puts the binary.
const rootBouncer = "/usr/sbin/pgbouncer"

// rootPostgresBinDir is the directory, as seen inside root, of the newest
// Postgres major installed there.
func rootPostgresBinDir(root string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(root, "usr/lib/postgresql/*/bin"))
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, dir := range dirs {
		if executable(filepath.Join(dir, "initdb")) == nil && executable(filepath.Join(dir, "postgres")) == nil {
			return "/" + strings.TrimPrefix(strings.TrimPrefix(dir, root), "/"), nil
		}
	}
	return "", fmt.Errorf("%s=%s holds no Postgres (initdb and postgres in usr/lib/postgresql/*/bin); unset it", EnvNativeRoot, root)
}

// newRootedBouncers is newNativeBouncers with the binaries of root, run
// chrooted into it as its postgres user. Only root may chroot.
func newRootedBouncers(opts Options, root string) (*nativeBackend, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s=%s: only root can run servers inside another filesystem; unset it, or run as root", EnvNativeRoot, root)
	}
	if err := executable(filepath.Join(root, rootBouncer)); err != nil {
		return nil, fmt.Errorf("%s=%s holds no pgbouncer (%v); unset it", EnvNativeRoot, root, err)
	}
	uid, gid, err := rootUser(root, "postgres")
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w; unset it", EnvNativeRoot, root, err)
	}
	b := &nativeBackend{root: root, pgbouncer: rootBouncer, pgHost: "127.0.0.1", uid: uid, gid: gid, log: opts.Logger,
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := b.makeDir(); err != nil {
		return nil, err
	}
	// The servers open the dir by the host's path, so the root must show
	// the host's directory there (imageRoot binds it).
	if _, err := os.Stat(filepath.Join(root, b.dir, ownerFile)); err != nil {
		os.RemoveAll(b.dir)
		return nil, fmt.Errorf("%s=%s does not show the stack's dir %s at the same path inside it; bind %s there, or unset it", EnvNativeRoot, root, b.dir, filepath.Dir(b.dir))
	}
	return b, nil
}

// rootUser is the uid and gid of name in root's /etc/passwd: the servers
// run as the root's own postgres user, whom its libc can look up.
func rootUser(root, name string) (uid, gid int, err error) {
	f, err := os.Open(filepath.Join(root, "etc/passwd"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 4 || fields[0] != name {
			continue
		}
		uid, uerr := strconv.Atoi(fields[2])
		gid, gerr := strconv.Atoi(fields[3])
		if uerr != nil || gerr != nil {
			return 0, 0, fmt.Errorf("etc/passwd: bad entry for %s", name)
		}
		return uid, gid, nil
	}
	return 0, 0, fmt.Errorf("etc/passwd has no %s user", name)
}

// sharedEnv names the root in Env, so that the bouncers an external stack
// adds run from it too.
func (b *nativeBackend) sharedEnv() []string {
	if b.root == "" {
		return nil
	}
	return []string{EnvNativeRoot + "=" + b.root}
}

// isImageRootProcess reports whether pid, under the proc filesystem at
// proc, is an image root's first process (sleep infinity). The engine
// names its containers' PIDs in its own PID namespace: where that is not
// this process's (the harness in a container of its own, driving the
// host's engine), the PID names another process or none, and chrooting
// into another process's filesystem would run binaries that are not the
// image's under a route line that says they are.
func isImageRootProcess(proc string, pid int) bool {
	cmdline, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	return err == nil && string(cmdline) == "sleep\x00infinity\x00"
}

// awaitImageRootProcess waits for isImageRootProcess. The engine reports a
// container running while its first process may still be the runtime's
// init, before it executes sleep (seen on every stack of one test run), so
// an answer is final only once that process is sleep, or after
// imageRootExecWait.
func awaitImageRootProcess(ctx context.Context, proc string, pid int) bool {
	deadline := time.Now().Add(imageRootExecWait)
	for {
		if isImageRootProcess(proc, pid) {
			return true
		}
		if _, err := os.Stat(filepath.Join(proc, strconv.Itoa(pid))); err != nil {
			return false // no such process here: it will not become one
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// imageRootExecWait bounds the wait for the runtime's init to execute
// sleep: milliseconds where it was seen, and a process that is not the
// container's never becomes sleep, so a generous bound costs nothing.
const imageRootExecWait = 10 * time.Second
