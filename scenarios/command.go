package scenarios

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/fault"
)

// ReplicaCommand is a replica that is a program of the user's own, in any
// language, run instead of a built-in strategy's lease: the runner starts
// it once per replica with the protocol's DOUBLERUN_* variables (see the
// package documentation, "Replicas in any language"), behind the same
// proxies and bouncers as a built-in replica, in a process group of its
// own, and judges what it reports like a built-in replica's records.
//
// It reports its leader work over SQL (the doublerun.* functions the
// runner installs in the run's database) unless Log is set; then the
// runner reads its output and records each line that matches a pattern.
type ReplicaCommand struct {
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
func (c *ReplicaCommand) Mode() string {
	if c.Log != nil {
		return ModeLog
	}
	return ModeSQL
}

// The protocol's environment variables, set for every replica command.
const (
	EnvReplicaID    = "DOUBLERUN_REPLICA_ID"
	EnvLeaseName    = "DOUBLERUN_LEASE_NAME"
	EnvLeaseDSN     = "DOUBLERUN_LEASE_DSN"
	EnvWorkDSN      = "DOUBLERUN_WORK_DSN"
	EnvOracleDSN    = "DOUBLERUN_ORACLE_DSN"
	EnvTTLMillis    = "DOUBLERUN_TTL_MS"
	EnvPollMillis   = "DOUBLERUN_POLL_INTERVAL_MS"
	EnvWorkMillis   = "DOUBLERUN_WORK_MS"
	EnvUnfenced     = "DOUBLERUN_UNFENCED"
	EnvAppName      = "DOUBLERUN_APPLICATION_NAME"
	envProtocolPref = "DOUBLERUN_"
)

// ProtocolEnv lists the protocol's variables in the order the package
// documentation describes them.
var ProtocolEnv = []string{EnvReplicaID, EnvLeaseName, EnvLeaseDSN, EnvWorkDSN, EnvOracleDSN,
	EnvTTLMillis, EnvPollMillis, EnvWorkMillis, EnvUnfenced, EnvAppName}

// appName is the application_name a replica's lease and work connections
// carry, by which pg_stat_activity shows its backends.
func appName(replica string) string { return fault.AppName(replica) }

// env is the protocol's variables for spec's replica.
func (spec replicaSpec) env() []string {
	unfenced := "0"
	if spec.Unfenced {
		unfenced = "1"
	}
	return []string{
		EnvReplicaID + "=" + spec.Replica,
		EnvLeaseName + "=" + spec.LeaseName,
		EnvLeaseDSN + "=" + withAppName(spec.LeaseDSN, appName(spec.Replica)),
		EnvWorkDSN + "=" + withAppName(spec.WorkDSN, appName(spec.Replica)),
		EnvOracleDSN + "=" + withAppName(spec.OracleDSN, "doublerun-oracle-"+spec.Replica),
		EnvTTLMillis + "=" + strconv.FormatInt(spec.TTL.Milliseconds(), 10),
		EnvPollMillis + "=" + strconv.FormatInt(spec.PollInterval.Milliseconds(), 10),
		EnvWorkMillis + "=" + strconv.FormatInt(spec.Work.Milliseconds(), 10),
		EnvUnfenced + "=" + unfenced,
		EnvAppName + "=" + appName(spec.Replica),
	}
}

// specFromEnv reads the protocol's variables back into a spec: what
// `doublerun replica` runs on.
func specFromEnv(getenv func(string) string) (replicaSpec, error) {
	var missing []string
	get := func(name string) string {
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	ms := func(name string) time.Duration {
		v := get(name)
		n, err := strconv.ParseInt(v, 10, 64)
		if v != "" && (err != nil || n <= 0) {
			missing = append(missing, name+"="+v+" (not a positive number of milliseconds)")
		}
		return time.Duration(n) * time.Millisecond
	}
	spec := replicaSpec{
		Replica:      get(EnvReplicaID),
		LeaseName:    get(EnvLeaseName),
		LeaseDSN:     get(EnvLeaseDSN),
		WorkDSN:      get(EnvWorkDSN),
		OracleDSN:    get(EnvOracleDSN),
		TTL:          ms(EnvTTLMillis),
		PollInterval: ms(EnvPollMillis),
		Work:         ms(EnvWorkMillis),
		Unfenced:     getenv(EnvUnfenced) == "1",
		AppName:      getenv(EnvAppName),
	}
	if len(missing) > 0 {
		return spec, fmt.Errorf("missing or bad %s; this command is a replica that `doublerun run` starts with them set, not one to run by hand", strings.Join(missing, ", "))
	}
	return spec, nil
}

// withAppName sets application_name in a URL DSN's query.
func withAppName(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// commandEnv is the environment of a replica command: the runner's own
// without any DOUBLERUN_ variable (a child's name and spec among them),
// the scenario's Env, then the protocol's.
func (c *ReplicaCommand) commandEnv(spec replicaSpec) []string {
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

// validate appends to errs what is wrong with c.
func (c *ReplicaCommand) validate(bad func(field, value, problem string)) {
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

// ParseReplicaCommand reads a replica object as the "replica" field of a
// scenario file holds it, or a whole scenario file and takes its
// "replica": what `doublerun chaos --replica FILE` reads.
func ParseReplicaCommand(data []byte) (*ReplicaCommand, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object (%s); write {\"command\": [\"/usr/bin/python3\", \"lease.py\"]}", jsonProblem(data, err))
	}
	if inner, ok := probe["replica"]; ok {
		data = inner
	}
	c, err := decodeReplica(data)
	if err != nil {
		return nil, err
	}
	var errs fieldErrors
	c.validate(func(field, value, problem string) { errs = append(errs, &FieldError{field, value, problem}) })
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// decodeReplica reads a replica object strictly: a misspelt field is an
// error that lists the valid ones.
// replicaFieldProblem says what is wrong with the member of "replica"
// (data) that is of the wrong JSON kind, with its value, and what to
// write instead.
func replicaFieldProblem(data []byte, typ *json.UnmarshalTypeError) string {
	v := any(nil)
	_ = json.Unmarshal(data, &v)
	for _, k := range strings.Split(typ.Field, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	is, holds := "is "+article(typ.Value), false
	switch v.(type) {
	case map[string]any, []any:
		if typ.Value != "object" && typ.Value != "array" {
			is, holds = "holds "+article(typ.Value), true // a member or an element
		}
	}
	if raw, err := json.Marshal(v); err == nil && v != nil {
		is = string(raw) + " " + is
	}
	field, sub, _ := strings.Cut(typ.Field, ".")
	switch {
	case field == "command" && holds:
		return is + "; write each word of the command as a string, in double quotes"
	case field == "command":
		return is + `; write an array of the program and its arguments, such as ["python3", "lease.py"]`
	case field == "env" && holds:
		return is + "; write each value as a string, in double quotes"
	case field == "env" && sub == "":
		return is + `; write an object of names and string values, such as {"NAME": "value"}`
	case field == "log" && sub == "":
		return is + `; write an object of patterns, such as {"became_leader": "leader", "lost_leadership": "lost"}`
	}
	return is + "; write a string, in double quotes"
}

func decodeReplica(data []byte) (*ReplicaCommand, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c ReplicaCommand
	if err := dec.Decode(&c); err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			return nil, fmt.Errorf("field \"replica\": unknown field %s; valid: command, env, log (with became_leader, lost_leadership, work_started, work_ended)", f)
		}
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return nil, fmt.Errorf("field %q: %s", "replica."+typ.Field, replicaFieldProblem(data, typ))
		}
		return nil, fmt.Errorf("field \"replica\" is not a replica object (%s); write {\"command\": [\"prog\", \"arg\"], \"env\": {\"NAME\": \"value\"}}", jsonProblem(data, err))
	}
	return &c, nil
}
