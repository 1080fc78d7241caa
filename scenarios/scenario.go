package scenarios

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Expectation is what a scenario's measurements must show.
type Expectation string

// The expectations.
const (
	// ExpectSafe: no double-run and no accepted stale write.
	ExpectSafe Expectation = "safe"
	// ExpectReproduces: a double-run must appear (a known limitation).
	ExpectReproduces Expectation = "reproduces"
	// ExpectFenced: leaders may overlap, but no stale write is accepted.
	ExpectFenced Expectation = "fenced"
	// ExpectReproducesOrOrphans: the advisory lock through a transaction
	// pool of more than one backend, where which backend a statement gets
	// is up to PgBouncer. Either two replicas lead at once (#556) or the
	// lock outlives its holder on a backend nobody owns (an orphaned lock);
	// a run with neither is clean in a way the strategy cannot explain and
	// fails.
	ExpectReproducesOrOrphans Expectation = "reproduces-or-orphans"
	// ExpectRegresses: a promotion that lost the last commits must take
	// the lease's token back (oracle.Loss.TokenRegressions): the plain
	// fence across PRIMARY_FAILOVER_LOSSY grants a token again, and its
	// history of grants and writes has no legal order. It needs a
	// standby (Standby); a run whose failover lost no grant could not
	// have shown one and is INCONCLUSIVE (the oracle's "grant lost"
	// condition).
	ExpectRegresses Expectation = "regresses"
)

// Scenario is one measured run, as data. Zero fields take the defaults in
// their comments.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Strategy names a registered lease strategy: strategy.Advisory,
	// strategy.AdvisoryUnguarded, strategy.AdvisoryWait, strategy.Fenced, or one given to
	// strategy.Register.
	Strategy string   `json:"strategy"`
	Topology Topology `json:"topology"`
	// Replicas is the number of competing replica processes, from 1 to
	// MaxReplicas; default 2.
	Replicas int `json:"replicas"`
	// Duration is how long the run is measured; default 5s.
	Duration time.Duration `json:"duration"`
	// PollInterval is the worker's poll interval; default 100ms.
	PollInterval time.Duration `json:"poll_interval"`
	// Work is the length of one piece of leader work; default 200ms.
	Work time.Duration `json:"work"`
	// TTL is the fenced lease's TTL; default 2s.
	TTL time.Duration `json:"ttl"`
	// Fault names a fault of the catalog, package fault; default
	// fault.None.
	Fault string `json:"fault"`
	// Unfenced makes the side-effect writes skip the fence, to show what
	// the fence prevents.
	Unfenced bool `json:"unfenced,omitempty"`
	// Standby runs the scenario on a stack with a streaming standby in
	// this mode (stack.ReplicationSync or stack.ReplicationAsync), which
	// the failover faults need; empty for one Postgres. The stack the run
	// is given must have one (stack.Options.Replication); the oracle is
	// then its third server, and what the replicas were acknowledged is
	// compared with what the primary holds after the failover
	// (oracle.Loss).
	Standby stack.ReplicationMode `json:"standby,omitempty"`
	// Jobs makes every replica run the durable job worker (package
	// worker) beside its leader work: each enqueues jobs, the leader
	// claims and completes them, and the report gives the acknowledged
	// enqueues a failover lost and the completed jobs it ran again
	// (oracle.Loss). It needs Standby, where the jobs are read back from
	// the new primary, and a built-in replica.
	Jobs   bool        `json:"jobs,omitempty"`
	Expect Expectation `json:"expect"`
	// Replica, when set, runs each replica as the user's command instead
	// of Strategy's lease. Strategy still says what the command's lease is
	// like: its traits decide which faults apply, its Setup runs, and the
	// chaos table's column for it is what each cell expects.
	Replica *replica.Command `json:"replica,omitempty"`
}

// MaxReplicas is the most replicas one run may have. The stack's PgBouncer
// session pool has 20 server connections (stack.Options.SessionPoolSize),
// and an advisory replica on a session-pooled lease endpoint (session,
// pinned) checks it with 3 connections at once before it keeps 1: with 9
// or more replicas starting together, their checks (2 connections each)
// and a leader's work connections can hold the whole pool while each
// check waits for its third, until every check times out. 10 replicas did
// so in measured runs; 8 leave room and passed on session and pinned.
const MaxReplicas = 8

// MaxReplicasWhy says in an error message why there is a MaxReplicas.
const MaxReplicasWhy = "more can exhaust the PgBouncer session pool of 20 connections while their endpoint checks (3 connections each) wait on one another"

// The ranges of a scenario's numbers. Validate holds every scenario to
// them, whether it comes from the catalog, a file, the command line's
// flags or the chaos matrix; the reason for each bound is in bounds.
const (
	MinDuration     = time.Second
	MaxDuration     = time.Hour
	MinPollInterval = time.Millisecond
	MaxPollInterval = 10 * time.Second
	MinWork         = time.Millisecond
	MaxWork         = time.Minute
	MinTTL          = 100 * time.Millisecond
	MaxTTL          = time.Minute
)

// bounds are the ranges Validate checks, each bound with the reason for
// it, in the order of Scenario's fields.
var bounds = []struct {
	field          string
	value          func(Scenario) int64
	min, max       int64
	show           func(int64) string
	whyMin, whyMax string
}{
	{"replicas", func(s Scenario) int64 { return int64(s.Replicas) }, 1, MaxReplicas, showInt,
		"a run needs a replica to lead", MaxReplicasWhy},
	{"duration", func(s Scenario) int64 { return int64(s.Duration) }, int64(MinDuration), int64(MaxDuration), showDuration,
		"a shorter run holds too few pieces of work to judge (5 at the default 200ms), and its fault comes at a third of it",
		"a longer run is more often a typo than a plan (1000000h is 114 years), and its report keeps every piece of work"},
	{"poll_interval", func(s Scenario) int64 { return int64(s.PollInterval) }, int64(MinPollInterval), int64(MaxPollInterval), showDuration,
		"each poll is a lease call on the server, and shorter polls are a busy loop on it",
		"the oracle tolerates a gap of 2 polls and 100ms in a leader's work, so longer polls would hide a leaderless window of that length"},
	{"work", func(s Scenario) int64 { return int64(s.Work) }, int64(MinWork), int64(MaxWork), showDuration,
		"each piece of work writes its start and end to the oracle, and below 1ms those writes are all a run measures",
		"a longer piece would outlast most runs and never end to be measured"},
	{"ttl", func(s Scenario) int64 { return int64(s.TTL) }, int64(MinTTL), int64(MaxTTL), showDuration,
		"a fenced lease renews through PgBouncer, and a shorter TTL expires before a renewal comes back on a loaded machine",
		"a run waits a TTL and a second after its fault, so a longer one stretches every run with a fault past a minute"},
}

func showInt(v int64) string { return fmt.Sprint(v) }

// showDuration writes a duration as a flag takes it, without the zero
// units time.Duration.String adds: 1h, not 1h0m0s.
func showDuration(v int64) string {
	s := time.Duration(v).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// FieldError is a field of a Scenario that a run cannot take, as Validate
// reports it: its JSON name, its value, and what is wrong with it, with
// the valid choices or the allowed range and the reason for the bound it
// crossed. A file reader shows it as is; a command line that set the
// field with a flag shows it under the flag's name (Flag).
type FieldError struct {
	// Field is the JSON name, such as "duration" or "topology.pool_size".
	Field string
	// Value is the value as given, such as "1000000h0m0s"; empty when the
	// field is missing or Problem names the value itself.
	Value string
	// Problem follows the value: "is above 1h: ...; use 1s to 1h".
	Problem string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("field %q: %s", e.Field, e.Problem)
	}
	return fmt.Sprintf("field %q: %s %s", e.Field, e.Value, e.Problem)
}

// Flag is the error with the field named as the flag name that set it,
// such as "--duration 1000000h0m0s is above 1h: ...".
func (e *FieldError) Flag(name string) string {
	if e.Value == "" {
		return fmt.Sprintf("--%s: %s", name, e.Problem)
	}
	return fmt.Sprintf("--%s %s %s", name, e.Value, e.Problem)
}

// FieldErrors returns the FieldErrors that err, an error of Validate,
// joins, in the order of Scenario's fields.
func FieldErrors(err error) []*FieldError {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var out []*FieldError
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

// The defaults of a Scenario's zero fields.
const (
	DefaultReplicas     = 2
	DefaultDuration     = 5 * time.Second
	DefaultPollInterval = 100 * time.Millisecond
	DefaultWork         = 200 * time.Millisecond
	DefaultTTL          = 2 * time.Second
)

// WithDefaults returns s with every zero field set to its default. Run
// applies them where a run starts; everything before it keeps the zero,
// which means the default.
func (s Scenario) WithDefaults() Scenario {
	s.Replicas = cmp.Or(s.Replicas, DefaultReplicas)
	s.Duration = cmp.Or(s.Duration, DefaultDuration)
	s.PollInterval = cmp.Or(s.PollInterval, DefaultPollInterval)
	s.Work = cmp.Or(s.Work, DefaultWork)
	s.TTL = cmp.Or(s.TTL, DefaultTTL)
	s.Fault = cmp.Or(s.Fault, fault.None)
	if s.Topology.Kind.TransactionPooled() {
		s.Topology.PoolSize = cmp.Or(s.Topology.PoolSize, 1)
	}
	return s
}

// Validate reports everything that is wrong with s as the run would take
// it (a zero field is its default), on one line: each complaint a
// *FieldError (FieldErrors lists them) that names its field and the valid
// choices or the range and why, in the order of Scenario's fields. It is the one check of a scenario: the
// catalog, a file (ParseScenario), the command line's flags and the chaos
// matrix all rely on it, and Run calls it before anything starts.
func (s Scenario) Validate() error {
	given := s
	s = s.WithDefaults()
	var errs fieldErrors
	bad := func(field, value, problem string) { errs = append(errs, &FieldError{field, value, problem}) }
	switch {
	case s.Name == "":
		bad("name", "", "missing; name the scenario (its reports go under that name)")
	case strings.ContainsAny(s.Name, `\`) || strings.Contains(s.Name, ".."):
		bad("name", fmt.Sprintf("%q", s.Name), "cannot name a report directory; use letters, digits, '-' and '/'")
	}
	_, strategyOK := strategy.Lookup(s.Strategy)
	switch {
	case s.Strategy == "":
		bad("strategy", "", "missing; one of "+strings.Join(strategy.Names(), ", "))
	case !strategyOK:
		bad("strategy", "", fmt.Sprintf("unknown strategy %q; valid: %s", s.Strategy, strings.Join(strategy.Names(), ", ")))
	}
	_, topologyErr := ParseTopology(string(s.Topology.Kind))
	switch {
	case s.Topology.Kind == "":
		bad("topology.kind", "", "missing; one of "+topologyNames())
	case topologyErr != nil:
		bad("topology.kind", "", topologyErr.Error())
	}
	// Caught by TestStrategyRefusalMatchesTheLease/advisory-wait.
	if err := CheckStrategyTopology(s.Strategy, s.Topology.Kind); err != nil {
		bad("topology.kind", "", err.Error())
	}
	switch {
	case given.Topology.PoolSize != 0 && topologyErr == nil && !s.Topology.Kind.TransactionPooled():
		bad("topology.pool_size", "", fmt.Sprintf("topology %s has no transaction pool; leave pool_size out", s.Topology.Kind))
	case s.Topology.Kind.TransactionPooled() && stack.CheckPoolSize(s.Topology.PoolSize) != nil:
		bad("topology.pool_size", fmt.Sprint(s.Topology.PoolSize), fmt.Sprintf("is not from 1 to %d: %s; use 1 to %d", stack.MaxPoolSize, stack.MaxPoolSizeWhy, stack.MaxPoolSize))
	}
	for _, b := range bounds {
		v := b.value(s)
		rng := fmt.Sprintf("use %s to %s", b.show(b.min), b.show(b.max))
		switch {
		case v < b.min:
			bad(b.field, b.show(v), fmt.Sprintf("is below %s: %s; %s", b.show(b.min), b.whyMin, rng))
		case v > b.max:
			bad(b.field, b.show(v), fmt.Sprintf("is above %s: %s; %s", b.show(b.max), b.whyMax, rng))
		}
	}
	// A double-run is two replicas leading at once: a run that expects
	// one and has a single replica fails after its whole duration
	// (TestValidateHoldsEveryBound).
	if s.Replicas == 1 && (s.Expect == ExpectReproduces || s.Expect == ExpectReproducesOrOrphans) {
		bad("replicas", "1", fmt.Sprintf("is too few for expect %s: a double-run needs two replicas leading at once; use 2 to %d", s.Expect, MaxReplicas))
	}
	if err := s.Standby.Check(); err != nil {
		bad("standby", "", err.Error())
	} else if s.Expect == ExpectRegresses && s.Standby == "" {
		// Caught by TestValidateHoldsEveryBound.
		bad("standby", "", "missing for expect regresses: a token regresses only where a promotion lost the last commits; set \"standby\": \"async\" with fault PRIMARY_FAILOVER_LOSSY")
	}
	if err := fault.CheckName(s.Fault); err != nil {
		bad("fault", "", err.Error())
	} else if f, ok := fault.Lookup(s.Fault); ok && strategyOK && topologyErr == nil && !f.Available(s.FaultSetting()) {
		// Which faults apply depends on the strategy's traits and the
		// topology: with either unknown, there is nothing to say.
		bad("fault", s.Fault, fmt.Sprintf("does not apply to strategy %s on topology %s; pick another fault or topology", s.Strategy, s.Topology))
	}
	if s.Replica != nil {
		s.Replica.Validate(bad)
	}
	// Caught by TestParseScenarioNamesTheBadField/JobsNeedAStandby.
	if s.Jobs && s.Standby == "" {
		bad("jobs", "true", `needs "standby": the jobs a failover lost are counted on the primary a failover left; add "standby": "async" (or "sync")`)
	}
	if s.Jobs && s.Replica != nil {
		bad("jobs", "true", `runs the built-in job worker, and "replica" runs a command of your own instead; drop one of the two`)
	}
	switch s.Expect {
	case ExpectSafe, ExpectReproduces, ExpectFenced, ExpectReproducesOrOrphans, ExpectRegresses:
	case "":
		bad("expect", "", "missing; one of "+expectationNames)
	default:
		bad("expect", "", fmt.Sprintf("unknown expectation %q; valid: %s", s.Expect, expectationNames))
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// fieldErrors is Validate's error: its complaints, on one line.
type fieldErrors []error

func (e fieldErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e fieldErrors) Unwrap() []error { return e }

// expectationNames lists the expectations for Validate's messages.
const expectationNames = "safe, reproduces, fenced, reproduces-or-orphans, regresses"

// FaultSetting is what the fault catalog may know of a run of s: its
// strategy's traits (none for a strategy not registered), whether its work
// goes through PgBouncer, its TTL and the length of a piece of work,
// defaults applied.
func (s Scenario) FaultSetting() fault.Setting {
	s = s.WithDefaults()
	st, _ := strategy.Lookup(s.Strategy)
	return fault.Setting{
		ReportsBackendPID: st.ReportsBackendPID,
		AdvisoryLock:      st.AdvisoryLock,
		Pooled:            s.Topology.Kind.Pooled(),
		AppNames:          s.Replica != nil,
		TTL:               s.TTL,
		Work:              s.Work,
		Replication:       s.Standby,
	}
}

// faultHold is how long s's fault holds the leader out (fault.HeldFor),
// zero for a fault that acts once and for none: what the oracle's
// newer-term condition asks of a run judged by its stale writes.
func (s Scenario) faultHold() time.Duration {
	f, ok := fault.Lookup(s.Fault)
	if !ok {
		return 0
	}
	return fault.HeldFor(f, s.FaultSetting())
}

// Catalog is the built-in scenarios. Issue556 and its fixes are the ones
// `doublerun repro 556` runs.
var Catalog = []Scenario{
	{Name: "advisory-direct", Strategy: strategy.Advisory, Topology: Topology{Kind: Direct}, Expect: ExpectSafe,
		Description: "the original lease on a direct connection"},
	{Name: "advisory-session", Strategy: strategy.Advisory, Topology: Topology{Kind: Session}, Expect: ExpectSafe,
		Description: "the original lease through PgBouncer session pooling"},
	Issue556,
	{Name: "advisory-unguarded-transaction", Strategy: strategy.AdvisoryUnguarded, Topology: Topology{Kind: Transaction, PoolSize: 1}, Expect: ExpectReproduces,
		Description: "the original lease without its PID guard through transaction pooling (pool of one)"},
	Issue556Pinned,
	{Name: "fenced-direct", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Expect: ExpectSafe,
		Description: "the table lease on a direct connection"},
	{Name: "fenced-session", Strategy: strategy.Fenced, Topology: Topology{Kind: Session}, Expect: ExpectSafe,
		Description: "the table lease through session pooling"},
	Issue556Fenced,
	Issue556Alias,
}

// The #556 reproduction and its three fixes.
var (
	Issue556 = Scenario{Name: "issue-556", Strategy: strategy.Advisory, Topology: Topology{Kind: Transaction, PoolSize: 1}, Expect: ExpectReproduces,
		Description: "#556: the advisory lease through transaction pooling with a pool of one: two leaders on one backend"}
	Issue556Pinned = Scenario{Name: "issue-556-pinned", Strategy: strategy.Advisory, Topology: Topology{Kind: Pinned, PoolSize: 1}, Expect: ExpectSafe,
		Description: "#556 fix: the lease on a session-pinned endpoint, the work through the transaction pool"}
	Issue556Fenced = Scenario{Name: "issue-556-fenced", Strategy: strategy.Fenced, Topology: Topology{Kind: Transaction, PoolSize: 1}, Expect: ExpectSafe,
		Description: "#556 fix: the fenced table lease through transaction pooling"}
	Issue556Alias = Scenario{Name: "issue-556-alias", Strategy: strategy.Advisory, Topology: Topology{Kind: Alias, PoolSize: 1}, Expect: ExpectSafe,
		Description: "#556 fix on one PgBouncer: the lease on a session-mode name of the database, the work on its transaction-mode name"}
)

// GuardScenarios returns the runs that show what the PID guard does at
// pool sizes 2 to 4: the guarded and the unguarded advisory lease.
func GuardScenarios() []Scenario {
	var out []Scenario
	for _, size := range []int{2, 3, 4} {
		for _, strategy := range []string{strategy.AdvisoryUnguarded, strategy.Advisory} {
			out = append(out, Scenario{
				Name:     fmt.Sprintf("%s-transaction-pool%d", strategy, size),
				Strategy: strategy, Topology: Topology{Kind: Transaction, PoolSize: size},
				Expect:      ExpectReproduces,
				Description: fmt.Sprintf("%s through transaction pooling with a pool of %d", strategy, size),
			})
		}
	}
	return out
}

// All returns the catalog and the guard scenarios.
func All() []Scenario { return append(slices.Clone(Catalog), GuardScenarios()...) }

// Lookup finds a built-in scenario by name; the error lists the valid names.
func Lookup(name string) (Scenario, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q; valid: %s", name, strings.Join(Names(), ", "))
}

// Names lists the built-in scenarios.
func Names() []string {
	var names []string
	for _, s := range All() {
		names = append(names, s.Name)
	}
	return names
}
