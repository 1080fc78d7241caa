package scenarios

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/doublerun/doublerun/scenarios/internal/wait"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/replica"
)

// The parent side of a replica: the runner starts each replica as this
// binary again, behind proxies of its own, watches it, and stops it.
// Package scenarios/replica is what the started process does.

// proc is one replica process the runner started.
type proc struct {
	id   string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error

	// command is set for a replica that is the user's command
	// (Scenario.Replica); leftBehind, once done, says its process group
	// outlived it and was killed. lines counts what log mode read from
	// it, matched the lines that matched a pattern.
	command    bool
	leftBehind bool
	lines      *replica.LogMatcher
	// killed says a fault killed it (Target.Killed): its exit is that
	// fault's, already an event.
	killed atomic.Bool
}

// ended reports whether the process has exited and been waited for.
func (p *proc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (r *run) startReplicas(ctx context.Context) error {
	r.toxics = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	r.proxies = map[string][]*toxiproxy.Proxy{}
	r.defer_(func() {
		for _, ps := range r.proxies {
			for _, p := range ps {
				p.Stop()
			}
		}
	})
	for i := range r.sc.Replicas {
		id := fmt.Sprintf("r%d", i+1)
		leaseDSN, err := r.proxy(id, "lease", r.leaseEP.DSN)
		if err != nil {
			return err
		}
		workDSN := leaseDSN
		if r.workEP.DSN != r.leaseEP.DSN {
			if workDSN, err = r.proxy(id, "work", r.workEP.DSN); err != nil {
				return err
			}
		}
		spec := replica.Spec{
			Replica:      id,
			Strategy:     r.sc.Strategy,
			LeaseName:    "doublerun-" + r.sc.Name,
			LeaseDSN:     leaseDSN,
			WorkDSN:      workDSN,
			OracleDSN:    r.oracleEP.DSN,
			PollInterval: r.sc.PollInterval,
			Work:         r.sc.Work,
			TTL:          r.sc.TTL,
			Unfenced:     r.sc.Unfenced,
			Acks:         r.sc.Standby != "",
			Jobs:         r.sc.Jobs,
		}
		start := r.startReplica
		if r.sc.Replica != nil {
			start = r.startCommand
		}
		if err := start(ctx, spec); err != nil {
			return err
		}
	}
	return nil
}

// proxy starts a toxiproxy proxy for replica in front of dsn's server and
// returns dsn pointed at it, so a fault can cut one replica's path alone.
func (r *run) proxy(replica, role, dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	p := toxiproxy.NewProxy(r.toxics, replica+"-"+role, "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("start proxy for %s: %w", replica, err)
	}
	r.proxies[replica] = append(r.proxies[replica], p)
	u.Host = p.Listen
	return u.String(), nil
}

func (r *run) startReplica(_ context.Context, spec replica.Spec) error {
	cmd, err := spec.Named().ChildCommand(r.exe)
	if err != nil {
		return err
	}
	logPath := filepath.Join(r.dir, "replicas", spec.Replica+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group so faults can signal one replica alone; Pdeathsig
	// so no replica outlives a runner that is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start replica %s: %w", spec.Replica, err)
	}
	rp := &proc{id: spec.Replica, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		rp.err = cmd.Wait()
		logf.Close()
		r.replicaExited(rp)
		close(rp.done)
	}()
	r.mu.Lock()
	r.replicas = append(r.replicas, rp)
	r.mu.Unlock()
	if r.opts.onReplica != nil {
		r.opts.onReplica(cmd.Process.Pid)
	}
	return nil
}

// waitSaid is how often waitForLeader says that it is still waiting:
// replicas that start normally report work well within it.
const waitSaid = 5 * time.Second

// waitForLeader waits for the first piece of leader work and starts the
// measurement there, so start-up time is not counted as leaderless.
func (r *run) waitForLeader(ctx context.Context) (time.Time, error) {
	deadline := time.Now().Add(r.opts.LeaderWait)
	// A replica that reports nothing holds the run for the whole wait,
	// however short its duration: say so once the wait is longer than a
	// start-up, and again as it goes on.
	began := time.Now()
	say := began.Add(waitSaid)
	for {
		if time.Now().After(say) {
			r.log.Info("waiting for leader work", "scenario", r.sc.Name, "waited", time.Since(began).Round(time.Second),
				"up_to", r.opts.LeaderWait,
				"why", "the measurement starts at the first piece of leader work a replica reports; none has yet")
			say = say.Add(waitSaid)
		}
		led, err := oracle.AnyWork(ctx, r.conn)
		if err != nil {
			return time.Time{}, err
		}
		if led {
			return oracle.LogEvent(ctx, r.conn, oracle.EventMeasureStart, "", "")
		}
		r.mu.Lock()
		for _, rp := range r.replicas {
			if !rp.ended() {
				continue
			}
			r.mu.Unlock()
			if rp.command {
				return time.Time{}, r.exitedAtOnce(rp)
			}
			return time.Time{}, fmt.Errorf("replica %s exited before any leader work (%v); its log: %s%s", rp.id, rp.err, rp.log, tailFile(rp.log))
		}
		r.mu.Unlock()
		if time.Now().After(deadline) && r.sc.Replica != nil {
			return time.Time{}, errSilent
		}
		if time.Now().After(deadline) {
			hint := ""
			if reexec.IsTestBinary() {
				hint = "; a test binary must call reexec.Main() first in TestMain"
			}
			return time.Time{}, fmt.Errorf("no replica became leader within %s%s; replica logs in %s", r.opts.LeaderWait, hint, filepath.Join(r.dir, "replicas"))
		}
		if err := wait.Sleep(ctx, 50*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// stopGrace is how long the replicas have, from the SIGTERM to their
// groups, to stop before the runner kills what is left: one deadline for
// all of them, so a run stops within it however many replicas ignore the
// signal.
const stopGrace = 15 * time.Second

// stopReplicas asks every replica to stop, then kills those that have not
// when the grace period ends, or at once when ctx is cancelled (Ctrl-C):
// a user who interrupts does not wait for the grace.
func (r *run) stopReplicas(ctx context.Context) {
	r.mu.Lock()
	reps := append([]*proc(nil), r.replicas...)
	r.mu.Unlock()
	grace := r.opts.stopGrace
	r.log.Info("stopping replicas", "scenario", r.sc.Name, "grace", grace)
	for _, rp := range reps {
		// The whole group: a command's children stop with it.
		_ = syscall.Kill(-rp.cmd.Process.Pid, syscall.SIGCONT) // a frozen replica cannot stop
		_ = syscall.Kill(-rp.cmd.Process.Pid, syscall.SIGTERM)
	}
	// One deadline, shared: a channel from time.After fires once, and the
	// replicas after the first that needed it would wait for ever.
	// Caught by TestStopKillsEveryReplicaAtOneDeadline, and the context by
	// TestRunInterruptedDuringTheGracePeriod.
	deadline, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	var left []*proc
	for _, rp := range reps {
		select {
		case <-rp.done:
			continue
		case <-deadline.Done():
		}
		select {
		case <-rp.done:
		default:
			left = append(left, rp)
		}
	}
	why := fmt.Sprintf("did not stop within %s", grace)
	if ctx.Err() != nil {
		why = "the run was interrupted before it stopped"
	}
	// Every group still running is killed at the deadline before any is
	// waited for: a command's exit takes up to a second more (its log is
	// drained, its group checked for what it left behind), which would
	// push the next replica's kill past the deadline.
	for _, rp := range left {
		_ = syscall.Kill(-rp.cmd.Process.Pid, syscall.SIGKILL)
	}
	for _, rp := range left {
		// Killed, then logged: every record the replica made comes before
		// its death in the history, which doublerun check relies on.
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = oracle.LogEvent(ectx, r.conn, oracle.EventReplicaKilled, rp.id, why)
		ecancel()
	}
	for _, rp := range left {
		<-rp.done
	}
}

// killReplicas kills every replica still running, and waits for each.
func (r *run) killReplicas() {
	r.mu.Lock()
	reps := append([]*proc(nil), r.replicas...)
	r.mu.Unlock()
	for _, rp := range reps {
		// The group even when its leader is gone: what a command left
		// behind, or its children when the run is cut short.
		_ = syscall.Kill(-rp.cmd.Process.Pid, syscall.SIGKILL)
		<-rp.done
	}
}

// replicaExited logs the exit of a built-in replica that exited before
// the runner stopped it (a fault's SIGKILL is the fault's own event):
// its open work ends there (oracle.Load), and it no longer contends
// (oracle.Validity). Caught by TestAReplicaThatExitsIsAnEvent.
func (r *run) replicaExited(rp *proc) {
	if r.stopping.Load() || rp.killed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = oracle.LogEvent(ctx, r.conn, oracle.EventReplicaStopped, rp.id, r.exitDetail(rp))
}

// exitDetail says how a replica exited before the run ended: its exit
// status and the last line of its output.
func (r *run) exitDetail(rp *proc) string {
	status := "exit 0"
	if rp.err != nil {
		status = rp.err.Error()
	}
	d := "exited before the run ended: " + status
	if last := lastLine(rp.log); last != "" {
		d += fmt.Sprintf("; its last line: %q", last)
	}
	return d
}

func tailFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return "\n" + string(data)
}
