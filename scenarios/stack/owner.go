package stack

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Labels on every container and network a docker stack creates, naming the
// process that owns it, so the next stack can remove what a killed owner
// left behind (see sweepDocker).
const (
	LabelOwnerPID   = "io.doublerun.owner.pid"
	LabelOwnerStart = "io.doublerun.owner.start"
	LabelOwnerBoot  = "io.doublerun.owner.boot"
	LabelOwnerHost  = "io.doublerun.owner.host"
)

// owner identifies the process that started a stack: its PID, the start
// time of that PID (so a reused PID is not mistaken for the owner), the
// kernel's boot ID (so PIDs of an earlier boot are not either) and the host
// name (so a Docker engine shared by several machines or containers only
// sweeps what its own host left behind).
type owner struct {
	PID   int
	Start uint64 // clock ticks after boot, field 22 of /proc/PID/stat
	Boot  string
	Host  string
}

// self is the owner record of this process.
func self() owner {
	o := owner{PID: os.Getpid()}
	o.Start, _ = processStart(o.PID)
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		o.Boot = strings.TrimSpace(string(b))
	}
	o.Host, _ = os.Hostname()
	return o
}

// gone reports whether the owner has certainly ended, as seen from me. When
// it cannot tell (another host, no PID), it says no: sweeping a live stack
// would pull servers from under a running test.
func (o owner) gone(me owner) bool {
	// Guard: no PID, no owner to judge (TestOwnerGone/NoPIDIsNeverGone).
	if o.PID <= 0 {
		return false
	}
	// Guard: a Docker engine can be shared by several hosts or containers,
	// whose PIDs mean nothing here (TestOwnerGone/AnotherHostIsNeverGone).
	if o.Host != "" && o.Host != me.Host {
		return false
	}
	if o.Boot != "" && me.Boot != "" && o.Boot != me.Boot {
		return true // that boot has ended, and every process of it
	}
	// Guard: only a PID that no longer runs is dead; EPERM means it runs
	// under another user (TestOwnerGone/LiveOwnerIsNotGone).
	if errors.Is(syscall.Kill(o.PID, 0), syscall.ESRCH) {
		return true
	}
	// The PID runs; it is the owner unless it started at another time.
	if o.Start != 0 {
		if start, err := processStart(o.PID); err == nil && start != o.Start {
			return true
		}
	}
	return false
}

func (o owner) labels() map[string]string {
	return map[string]string{
		LabelOwnerPID:   strconv.Itoa(o.PID),
		LabelOwnerStart: strconv.FormatUint(o.Start, 10),
		LabelOwnerBoot:  o.Boot,
		LabelOwnerHost:  o.Host,
	}
}

func ownerFromLabels(l map[string]string) owner {
	o := owner{Boot: l[LabelOwnerBoot], Host: l[LabelOwnerHost]}
	o.PID, _ = strconv.Atoi(l[LabelOwnerPID])
	o.Start, _ = strconv.ParseUint(l[LabelOwnerStart], 10, 64)
	return o
}

// encode writes the owner as the key=value lines of a native stack's owner
// file.
func (o owner) encode() string {
	return fmt.Sprintf("pid=%d\nstart=%d\nboot=%s\nhost=%s\n", o.PID, o.Start, o.Boot, o.Host)
}

// parseOwner reads an owner file: key=value lines, or a bare PID as
// written by earlier versions.
func parseOwner(s string) owner {
	s = strings.TrimSpace(s)
	if pid, err := strconv.Atoi(s); err == nil {
		return owner{PID: pid}
	}
	l := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			l["io.doublerun.owner."+k] = v
		}
	}
	return ownerFromLabels(l)
}

// processStart returns the start time of pid in clock ticks after boot.
func processStart(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis start at field 3.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(string(raw[i+1:]))
	const startField = 22 - 3
	if len(fields) <= startField {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.ParseUint(fields[startField], 10, 64)
}
