package replica

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// Command is a replica that is a program of the user's own, in any
// language, run instead of a built-in strategy's lease: the runner starts
// it once per replica with the protocol's DOUBLERUN_* variables (see the
// package documentation, "Replicas in any language"), behind the same
// proxies and bouncers as a built-in replica, in a process group of its
// own, and judges what it reports like a built-in replica's records.
//
// It reports its leader work over SQL (the doublerun.* functions the
// runner installs in the run's database) unless Log is set; then the
// runner reads its output and records each line that matches a pattern.
type Command struct {
	// Command is the program and its arguments; the program is looked up
	// in PATH when it has no slash.
	Command []string `json:"command"`
	// Env is added to the runner's environment for the program; names
	// starting with DOUBLERUN_ are the protocol's and cannot be set.
	Env map[string]string `json:"env,omitempty"`
	// Log, when set, judges the program from its stdout and stderr instead
	// of SQL reports: for a program that cannot be changed.
	Log *LogPatterns `json:"log,omitempty"`
}

// LogPatterns are the regular expressions (Go's syntax, RE2) that log
// mode matches against each line a replica prints. Give became_leader and
// lost_leadership, work_started and work_ended, or all four: without the
// work patterns, holding leadership is the leader work the oracle
// measures.
type LogPatterns struct {
	BecameLeader   string `json:"became_leader,omitempty"`
	LostLeadership string `json:"lost_leadership,omitempty"`
	WorkStarted    string `json:"work_started,omitempty"`
	WorkEnded      string `json:"work_ended,omitempty"`
}

// ProtocolMode names how a replica reports its work.
const (
	// ModeBuiltIn is a strategy's lease run by this binary.
	ModeBuiltIn = "built-in"
	// ModeSQL is a command that calls the doublerun.* functions.
	ModeSQL = "sql"
	// ModeLog is a command judged by the lines it prints.
	ModeLog = "log"
)

// Mode is how c's replicas report: ModeSQL or ModeLog.
func (c *Command) Mode() string {
	if c.Log != nil {
		return ModeLog
	}
	return ModeSQL
}

// Environ is the environment of a replica command of spec: the runner's
// own without any DOUBLERUN_ variable (a child's name and spec among
// them), the scenario's Env, then the protocol's.
func (c *Command) Environ(spec Spec) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envProtocolPref) {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		out = append(out, k+"="+c.Env[k])
	}
	return append(out, spec.env()...)
}

// Validate tells bad everything that is wrong with c, each as the field of
// a scenario file that holds it ("replica.command", "replica.log", ...),
// its value, and the problem with what to write instead.
func (c *Command) Validate(bad func(field, value, problem string)) {
	if len(c.Command) == 0 || strings.TrimSpace(c.Command[0]) == "" {
		bad("replica.command", "", `missing; give the program and its arguments, such as ["/usr/bin/python3", "lease.py"]`)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		switch {
		case strings.HasPrefix(k, envProtocolPref):
			bad("replica.env."+k, "", "is the protocol's, set by the runner for each replica; rename it")
		case k == "" || strings.ContainsAny(k, "= \x00"):
			bad("replica.env", fmt.Sprintf("%q", k), "is not a variable name; use letters, digits and '_'")
		}
	}
	if c.Log == nil {
		return
	}
	p := c.Log
	for _, f := range []struct{ field, re string }{
		{"became_leader", p.BecameLeader}, {"lost_leadership", p.LostLeadership},
		{"work_started", p.WorkStarted}, {"work_ended", p.WorkEnded},
	} {
		if f.re == "" {
			continue
		}
		if _, err := regexp.Compile(f.re); err != nil {
			bad("replica.log."+f.field, fmt.Sprintf("%q", f.re), fmt.Sprintf("is not a regular expression (%s); write Go's RE2 syntax, with backslashes doubled in JSON", strings.TrimPrefix(err.Error(), "error parsing regexp: ")))
		}
	}
	leader := p.BecameLeader != "" || p.LostLeadership != ""
	work := p.WorkStarted != "" || p.WorkEnded != ""
	switch {
	case !leader && !work:
		bad("replica.log", "", "has no pattern; give became_leader and lost_leadership, or work_started and work_ended")
	case leader && (p.BecameLeader == "" || p.LostLeadership == "") && !work:
		bad("replica.log", "", "needs became_leader and lost_leadership together (or work_started and work_ended); give the missing one")
	case work && (p.WorkStarted == "" || p.WorkEnded == ""):
		bad("replica.log", "", "needs work_started and work_ended together; give the missing one")
	}
}

// Check finds the program of c, so that a command that is not there is
// one line before anything starts.
func (c *Command) Check() error {
	if _, err := exec.LookPath(c.Command[0]); err != nil {
		var why string
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
			why = "not found"
		case errors.Is(err, os.ErrPermission):
			why = "not executable"
		default:
			why = err.Error()
		}
		return fmt.Errorf("replica command %q: %s; install it, or give its full path as the first word of \"replica.command\"", c.Command[0], why)
	}
	return nil
}
