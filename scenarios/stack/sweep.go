package stack

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RunDirPrefix begins the name of the temp dir a scenario run keeps its
// replicas' logs in when it writes no report (see TempDir).
const RunDirPrefix = "doublerun-run-"

// ownedDirPrefixes are the temp dirs doublerun makes with an owner file,
// which the sweep removes once their owner has ended: a native stack's and
// a run's.
var ownedDirPrefixes = []string{nativeDirPrefix, RunDirPrefix}

// TempDir makes a directory in the system's temp dir for a run's files,
// named RunDirPrefix followed by a random number, with an owner file that
// names this process. The caller removes it when done; if this process is
// killed first, the next stack started on the machine removes it (see
// "Leftovers" in the package documentation).
func TempDir() (string, error) {
	dir, err := os.MkdirTemp("", RunDirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(self().encode()), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepOwnedDirs removes what processes killed outright left in the places
// doublerun makes temp dirs: the native stacks' root and the system's temp
// dir. Start calls it for every provider, since a run's temp dir is made
// whatever the provider.
func sweepOwnedDirs(log interface{ Info(string, ...any) }) {
	me := self()
	roots := []string{nativeRoot()}
	if tmp := os.TempDir(); tmp != roots[0] {
		roots = append(roots, tmp)
	}
	for _, root := range roots {
		sweepStaleDirs(root, me, log)
	}
}

// sweepStaleDirs removes the temp dirs under root whose owner has died.
// Close removes a stack's dir, and a run its own, but a process that panics
// or is killed on a timeout never gets to; a native stack's servers die
// with it (Pdeathsig), and what they leave is removed here: first the
// shared memory its Postgres kept (releaseSharedMemory), then the dir.
// Dirs without an owner file, or whose owner still runs, are left alone,
// and so is a dead stack's dir while its Postgres's processes are still
// exiting: the dir is the only record of which segment is the stack's, so
// it stays until a later sweep can remove both.
func sweepStaleDirs(root string, me owner, log interface{ Info(string, ...any) }) {
	for _, prefix := range ownedDirPrefixes {
		dirs, _ := filepath.Glob(filepath.Join(root, prefix+"*"))
		for _, dir := range dirs {
			raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
			if err != nil {
				continue
			}
			o := parseOwner(string(raw))
			// Guard: nothing of a live owner's stack is touched
			// (TestSweepReleasesOnlyTheDeadStacksSharedMemory/LiveOwnersSegmentIsKept).
			if !o.gone(me) {
				continue
			}
			if !releaseSharedMemory(dir, log) {
				continue // its Postgres is still going down: the next sweep
			}
			if err := os.RemoveAll(dir); err == nil {
				log.Info("removed the temp dir of a process that died", "dir", dir, "owner_pid", o.PID)
			}
		}
	}
}

// releaseSharedMemory removes the System V shared memory segment that the
// Postgres of the dead native stack in dir left.
//
// Postgres keeps one small System V segment (its header; 56 bytes) for as
// long as its postmaster or any backend runs, and removes it only on a
// clean shutdown. After a SIGKILL the segment stays; Postgres itself
// removes it at its next start on the same data directory, which never
// comes once the sweep removes the directory, so the sweep removes it
// first. (Its dynamic shared memory segments are files in the data
// directory, pg_dynshmem, and go with it: the native provider starts
// Postgres with dynamic_shared_memory_type=mmap, see startPostgres.)
//
// How it knows the segment is this stack's and no other Postgres's:
//   - the stack's own data directory names it: postmaster.pid, which
//     Postgres writes at start and removes only on a clean shutdown, holds
//     the postmaster's PID (line 1) and the segment's key and ID (line 7);
//   - the segment with that ID still has that key (Postgres derives the key
//     from the data directory's inode, so another data directory's segment
//     has another key, unless the ID was reused for it as well);
//   - its creator is that postmaster: a segment another server created
//     after this one's was gone, under a reused ID, has another creator;
//   - no process is attached to it, which is Postgres's own test for a
//     segment it may reclaim: every process of a running Postgres is.
//
// A segment that fails any of these is left alone.
//
// It reports whether the dir may go: yes when the dir names no segment,
// the segment is gone, is another server's, or was removed here; no while
// the stack's own segment still has processes attached (a SIGKILLed
// postmaster's backends take a moment to notice and exit), since without
// the dir nothing would say whose it is.
//
// A stack with a standby has a data directory per server (pgdata,
// pgdata-pg1, pgdata-pg2); each is judged on its own, and the dir may go
// only when every one may.
func releaseSharedMemory(dir string, log interface{ Info(string, ...any) }) bool {
	all := true
	pidFiles, _ := filepath.Glob(filepath.Join(dir, "pgdata*", "postmaster.pid"))
	for _, f := range pidFiles {
		all = releaseSegment(dir, f, log) && all
	}
	return all
}

// releaseSegment is releaseSharedMemory for the data directory whose
// postmaster.pid is pidFile.
func releaseSegment(dir, pidFile string, log interface{ Info(string, ...any) }) bool {
	pm, ok := readPostmasterPID(pidFile)
	if !ok {
		return true
	}
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(pm.shmID, unix.IPC_STAT, &desc); err != nil {
		return true // gone already
	}
	switch pm.owns(desc) {
	case segmentOthers:
		return true
	case segmentInUse:
		return false
	}
	if _, err := unix.SysvShmCtl(pm.shmID, unix.IPC_RMID, nil); err != nil {
		return false
	}
	log.Info("removed the shared memory segment of a native stack whose owner died",
		"dir", dir, "postmaster_pid", pm.pid, "shm_key", pm.shmKey, "shm_id", pm.shmID)
	return true
}

// segmentState is what a dead stack's postmaster.pid makes of a segment.
type segmentState int

const (
	// segmentOthers: another server's, never to be touched.
	segmentOthers segmentState = iota
	// segmentInUse: the stack's own, with processes still attached.
	segmentInUse
	// segmentLeft: the stack's own, left behind; the sweep removes it.
	segmentLeft
)

// postmasterPID is what a data directory's postmaster.pid says of the
// postmaster and its System V segment.
type postmasterPID struct {
	pid    int32
	shmKey int32 // key_t, which Postgres prints unsigned
	shmID  int
}

// owns says whether the segment described by desc is the one the
// postmaster of the file created, and whether anybody still uses it; see
// releaseSharedMemory for why each test is there.
func (p postmasterPID) owns(desc unix.SysvShmDesc) segmentState {
	// Guard: the key Postgres took from the data directory's inode
	// (TestSweepReleasesOnlyTheDeadStacksSharedMemory/AnotherKeyIsKept).
	if desc.Perm.Key != p.shmKey {
		return segmentOthers
	}
	// Guard: created by the dead stack's postmaster, not by a server that
	// got the same ID later
	// (TestSweepReleasesOnlyTheDeadStacksSharedMemory/AnotherCreatorIsKept).
	if desc.Cpid != p.pid {
		return segmentOthers
	}
	// Guard: attached to no process; a running server is
	// (TestSweepReleasesOnlyTheDeadStacksSharedMemory/AttachedSegmentIsKept).
	if desc.Nattch != 0 {
		return segmentInUse
	}
	return segmentLeft
}

// readPostmasterPID reads the postmaster's PID and its segment's key and
// ID from a postmaster.pid: line 1 is the PID, line 7 "KEY ID" as Postgres
// writes them (LOCK_FILE_LINE_SHMEM_KEY). ok is false when the file or
// either line is missing, as after a clean shutdown.
func readPostmasterPID(path string) (postmasterPID, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return postmasterPID{}, false
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) < 7 {
		return postmasterPID{}, false
	}
	pid, err1 := strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 32)
	fields := strings.Fields(lines[6])
	if err1 != nil || len(fields) != 2 {
		return postmasterPID{}, false
	}
	key, err2 := strconv.ParseUint(fields[0], 10, 64)
	id, err3 := strconv.Atoi(fields[1])
	if err := errors.Join(err2, err3); err != nil || pid <= 0 {
		return postmasterPID{}, false
	}
	// key_t is a C int that Postgres prints as unsigned long: its low 32
	// bits are the key.
	return postmasterPID{pid: int32(pid), shmKey: int32(uint32(key)), shmID: id}, true
}
