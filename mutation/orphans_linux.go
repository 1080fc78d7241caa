package mutation

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"syscall"
	"time"
)

// reapOrphans kills, every interval until ctx ends, each process of the
// process group pgid whose parent has left the group: a test binary whose
// go command gremlins killed at its timeout. gremlins kills only the go
// command, and the test binary it leaves behind keeps running (a mutant
// that allocates without end grew one to 10 GB in four minutes) beside
// every mutant that follows. The group's leader, gremlins itself, is left
// alone.
func reapOrphans(ctx context.Context, pgid int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, pid := range orphansOf(pgid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// orphansOf lists the processes of group pgid, other than its leader,
// whose parent is not in the group.
func orphansOf(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type proc struct{ ppid, pgrp int }
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, pgrp, ok := readStat(pid); ok {
			procs[pid] = proc{ppid, pgrp}
		}
	}
	var out []int
	for pid, p := range procs {
		if p.pgrp != pgid || pid == pgid {
			continue
		}
		if parent, ok := procs[p.ppid]; !ok || parent.pgrp != pgid {
			out = append(out, pid)
		}
	}
	return out
}

// readStat reads a process's parent and process group from
// /proc/PID/stat: "pid (comm) state ppid pgrp ...", where comm may hold
// spaces and parentheses, so the fields are counted from its last ')'.
func readStat(pid int) (ppid, pgrp int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseStat(data)
}

func parseStat(data []byte) (ppid, pgrp int, ok bool) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	return ppid, pgrp, err1 == nil && err2 == nil
}
