package stacktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// NeedPackage makes sure Debian package pkg is installed, as the native
// provider installs its own: present reports whether what the test needs
// of it is there; when it is not and the test runs as root where apt-get
// exists, pkg is installed (apt-get update, then install), serialised
// across test processes, which then find it present. Otherwise the test
// fails with the command to run: a test that needs a package is never
// skipped for the lack of it.
func NeedPackage(t testing.TB, pkg string, present func() error) {
	t.Helper()
	if present() == nil {
		return
	}
	if _, err := exec.LookPath("apt-get"); os.Geteuid() != 0 || err != nil {
		t.Fatalf("%s is not installed (%v); run `sudo apt-get install %s`", pkg, present(), pkg)
	}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "doublerun-apt.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("install %s: %v", pkg, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("install %s: lock: %v", pkg, err)
	}
	if present() == nil {
		return // another test process installed it while this one waited
	}
	t.Logf("installing %s with apt-get", pkg)
	for _, args := range [][]string{
		{"update", "-qq"},
		{"install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", pkg},
	} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %s %s failed (%v): %s", args[0], pkg, err, out)
		}
	}
	if err := present(); err != nil {
		t.Fatalf("%s installed, still not usable: %v", pkg, err)
	}
}
