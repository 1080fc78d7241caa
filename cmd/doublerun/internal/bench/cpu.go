package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat. Linux
// reports them in USER_HZ, which is 100 on every architecture it runs on.
const clockTick = 10 * time.Millisecond

// cpu is CPU time, user plus system, of the three parties to a run.
type cpu struct {
	Worker, Postgres, Bouncer time.Duration
}

func (c cpu) total() time.Duration { return c.Worker + c.Postgres + c.Bouncer }

func (c cpu) sub(o cpu) cpu {
	return cpu{Worker: c.Worker - o.Worker, Postgres: c.Postgres - o.Postgres, Bouncer: c.Bouncer - o.Bouncer}
}

// procs names the processes whose CPU time a run counts.
type procs struct {
	postmaster int // Postgres: the postmaster and every process it forked
	bouncer    int
}

// read returns the CPU time used so far by this process (the worker), by
// Postgres and by PgBouncer.
//
// Postgres is a tree: the postmaster forks a backend per connection, the
// autovacuum workers, the checkpointer and so on. Its CPU time is the
// postmaster's own, plus that of its children still alive, plus that of
// the children it has reaped (cutime and cstime). The difference of two
// readings then counts every child that ran in between, whether it was
// born before, during or after the first reading.
func (p procs) read() (cpu, error) {
	self, err := statTimes("self")
	if err != nil {
		return cpu{}, err
	}
	pg, err := treeTimes(p.postmaster)
	if err != nil {
		return cpu{}, err
	}
	b, err := statTimes(strconv.Itoa(p.bouncer))
	if err != nil {
		return cpu{}, err
	}
	return cpu{Worker: self.own(), Postgres: pg, Bouncer: b.own() + b.reaped()}, nil
}

// times are the CPU fields of /proc/<pid>/stat, in clock ticks.
type times struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

func (t times) own() time.Duration    { return time.Duration(t.utime+t.stime) * clockTick }
func (t times) reaped() time.Duration { return time.Duration(t.cutime+t.cstime) * clockTick }

// statTimes reads /proc/<pid>/stat. "pid (comm) state ppid ...": comm may
// hold spaces and parentheses, so the fields are counted from the last ')'.
func statTimes(pid string) (times, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return times{}, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return times{}, fmt.Errorf("unexpected /proc/%s/stat: %q", pid, data)
	}
	// After ") ": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := bytes.Fields(data[i+1:])
	if len(f) < 15 {
		return times{}, fmt.Errorf("unexpected /proc/%s/stat: %q", pid, data)
	}
	var t times
	var nums [5]int64
	for j, k := range []int{1, 11, 12, 13, 14} {
		if nums[j], err = strconv.ParseInt(string(f[k]), 10, 64); err != nil {
			return times{}, fmt.Errorf("/proc/%s/stat field %d: %w", pid, k+3, err)
		}
	}
	t.ppid = int(nums[0])
	t.utime, t.stime, t.cutime, t.cstime = nums[1], nums[2], nums[3], nums[4]
	return t, nil
}

// treeTimes is the CPU time of root, its live children and its reaped
// children. Postgres forks no grandchildren, so one level is the tree.
func treeTimes(root int) (time.Duration, error) {
	r, err := statTimes(strconv.Itoa(root))
	if err != nil {
		return 0, fmt.Errorf("postgres (pid %d): %w", root, err)
	}
	total := r.own() + r.reaped()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		t, err := statTimes(e.Name())
		if err != nil || t.ppid != root {
			continue // gone since the listing, or not a child
		}
		total += t.own()
	}
	return total, nil
}

// loadavg returns the one-minute load average, or -1 if it cannot be read.
func loadavg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := bytes.Fields(data)
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil {
		return -1
	}
	return v
}
