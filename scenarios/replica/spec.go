package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/reexec"
)

// Spec is everything a replica process needs: the runner's to give, as a
// built-in replica's argument (ChildCommand) or as the protocol's
// variables of a replica command (Command.Environ).
type Spec struct {
	Replica      string        `json:"replica"`
	Strategy     string        `json:"strategy"`
	LeaseName    string        `json:"lease_name"`
	LeaseDSN     string        `json:"lease_dsn"`
	WorkDSN      string        `json:"work_dsn"`
	OracleDSN    string        `json:"oracle_dsn"`
	PollInterval time.Duration `json:"poll_interval"`
	Work         time.Duration `json:"work"`
	TTL          time.Duration `json:"ttl"`
	Unfenced     bool          `json:"unfenced"`
	// Acks makes the replica tell the oracle of each side-effect write
	// its commit acknowledged (oracle.Ack), on a stack with a standby,
	// whose failover may lose it.
	Acks bool `json:"acks,omitempty"`
	// Jobs makes the replica run the durable job worker on the work
	// endpoint beside its leader work, and tell the oracle of each
	// enqueue and completion it was acknowledged and each start of a
	// job (jobs.go); Scenario.Jobs.
	Jobs bool `json:"jobs,omitempty"`
	// AppName is the lease connection's application_name: the protocol's
	// DOUBLERUN_APPLICATION_NAME for a built-in lease run as a replica
	// command, and the same name in the runner's own replicas (Named).
	AppName string `json:"app_name,omitempty"`
}

// Named is spec with its replica's application_name (fault.AppName) on
// its lease and work connections, as the protocol gives a command's: the
// runner tells a replica's backends by it, for the traffic-path condition
// and for the faults that pick a backend.
func (spec Spec) Named() Spec {
	name := fault.AppName(spec.Replica)
	spec.AppName = name
	spec.LeaseDSN = withAppName(spec.LeaseDSN, name)
	spec.WorkDSN = withAppName(spec.WorkDSN, name)
	return spec
}

// childName is the name under which a built-in replica is this binary
// started again (package reexec); its argument is the Spec as JSON.
const childName = "scenario-replica"

func init() { reexec.Register(childName, runChild) }

// ChildCommand is the command that starts exe, this binary, again as the
// built-in replica of spec: the caller gives it its output, its process
// group and its death signal, and starts it.
func (spec Spec) ChildCommand(exe string) (*exec.Cmd, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return reexec.Command(context.Background(), exe, childName, string(raw)), nil
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

// env is the protocol's variables for spec's replica.
func (spec Spec) env() []string {
	unfenced := "0"
	if spec.Unfenced {
		unfenced = "1"
	}
	return []string{
		EnvReplicaID + "=" + spec.Replica,
		EnvLeaseName + "=" + spec.LeaseName,
		EnvLeaseDSN + "=" + withAppName(spec.LeaseDSN, fault.AppName(spec.Replica)),
		EnvWorkDSN + "=" + withAppName(spec.WorkDSN, fault.AppName(spec.Replica)),
		EnvOracleDSN + "=" + withAppName(spec.OracleDSN, "doublerun-oracle-"+spec.Replica),
		EnvTTLMillis + "=" + strconv.FormatInt(spec.TTL.Milliseconds(), 10),
		EnvPollMillis + "=" + strconv.FormatInt(spec.PollInterval.Milliseconds(), 10),
		EnvWorkMillis + "=" + strconv.FormatInt(spec.Work.Milliseconds(), 10),
		EnvUnfenced + "=" + unfenced,
		EnvAppName + "=" + fault.AppName(spec.Replica),
	}
}

// specFromEnv reads the protocol's variables back into a spec: what
// `doublerun replica` runs on.
func specFromEnv(getenv func(string) string) (Spec, error) {
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
	spec := Spec{
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
