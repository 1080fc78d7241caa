package scenarios_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/strategy"
)

// Every example file is a valid scenario.
func TestScenarioFilesInTestdataParse(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../testdata/scenarios/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		sc, err := ParseScenario(data, "fallback")
		require.NoError(t, err, f)
		require.Equal(t, strings.TrimSuffix(filepath.Base(f), ".json"), sc.Name, "%s: named after its file", f)
		require.NoError(t, sc.Validate(), f)
	}
}

// A report's scenario object runs again as it stands.
func TestParseScenarioReadsReportJSONsScenario(t *testing.T) {
	t.Parallel()
	for _, sc := range All() {
		sc = sc.WithDefaults()
		data, err := json.Marshal(sc)
		require.NoError(t, err)
		back, err := ParseScenario(data, "")
		require.NoError(t, err, sc.Name)
		require.Equal(t, sc, back)
	}
	whole, err := json.Marshal(Report{Schema: ReportSchema, Scenario: Issue556Alias.WithDefaults()})
	require.NoError(t, err)
	back, err := ParseScenario(whole, "")
	require.NoError(t, err, "a whole report.json runs its scenario again")
	require.Equal(t, Issue556Alias.WithDefaults(), back)
	sc, err := ParseScenario([]byte(`{"strategy": "fenced", "topology": {"kind": "direct"}, "duration": "3s", "expect": "safe"}`), "from-file")
	require.NoError(t, err)
	require.Equal(t, "from-file", sc.Name, "a missing name takes the file's")
	require.Equal(t, 3*time.Second, sc.Duration)
}

// A bad file gets one line naming the field and the fix.
func TestParseScenarioNamesTheBadField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, json, want string }{
		{"NotAnObject", `[1]`, `not a JSON object (it is an array); write one like the "scenario" object of a report.json, see testdata/scenarios`},
		{"NotJSON", "{\n  \"strategy\": fenced\n}", `not a JSON object (invalid character 'e' in literal false (expecting 'a'), at line 2, column 16); write one like the "scenario" object of a report.json, see testdata/scenarios`},
		{"Empty", ``, `not a JSON object (the file is empty); write one like the "scenario" object of a report.json, see testdata/scenarios`},
		{"Truncated", `{"strategy": "fenced"`, `not a JSON object (it ends before the object closes); write one like the "scenario" object of a report.json, see testdata/scenarios`},
		{"TrailingData", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe"} {"x": 1}`,
			`more follows the JSON object, at line 1, column 74; a file holds one scenario: remove what comes after its closing brace`},
		{"DuplicateKey", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "strategy": "advisory"}`,
			`field "strategy" is there twice; keep one`},
		{"DuplicateKeyInTopology", `{"strategy": "fenced", "topology": {"kind": "direct", "kind": "session"}, "expect": "safe"}`,
			`field "topology.kind" is there twice; keep one`},
		{"UnknownField", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "pool": 2}`,
			`field "pool": no such field; valid: name, description, strategy, topology, replicas, duration, poll_interval, work, ttl, fault, unfenced, standby, jobs, expect`},
		{"UnknownStandby", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "standby": "semi"}`,
			`field "standby": replication mode "semi" is not one of "sync" and "async"`},
		{"JobsNotABool", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "standby": "async", "jobs": "yes"}`,
			`field "jobs": "yes" is not true or false`},
		{"JobsNeedAStandby", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "jobs": true}`,
			`field "jobs": true needs "standby": the jobs a failover lost are counted on the primary a failover left; add "standby": "async" (or "sync")`},
		{"JobsAreTheBuiltInWorkers", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "standby": "async", "jobs": true, "replica": {"command": ["/bin/true"]}}`,
			`field "jobs": true runs the built-in job worker, and "replica" runs a command of your own instead; drop one of the two`},
		{"FailoverNeedsAStandby", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "fault": "PRIMARY_FAILOVER"}`,
			`field "fault": PRIMARY_FAILOVER does not apply to strategy fenced on topology direct`},
		{"BadDuration", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "duration": "5 seconds"}`,
			`field "duration": "5 seconds" is not a duration; write nanoseconds as report.json does (5000000000) or a string such as "5s"`},
		{"UnknownStrategy", `{"strategy": "zookeeper", "topology": {"kind": "direct"}, "expect": "safe"}`,
			`field "strategy": unknown strategy "zookeeper"; valid: `},
		{"MissingTopology", `{"strategy": "fenced", "expect": "safe"}`,
			`field "topology.kind": missing; one of direct, session, transaction, pinned, alias`},
		{"TopologyField", `{"strategy": "fenced", "topology": {"kind": "direct", "size": 2}, "expect": "safe"}`,
			`field "topology.size": no such field; valid: kind, pool_size`},
		{"PoolSizeWithoutPool", `{"strategy": "fenced", "topology": {"kind": "session", "pool_size": 2}, "expect": "safe"}`,
			`field "topology.pool_size": topology session has no transaction pool; leave pool_size out`},
		{"MissingExpect", `{"strategy": "fenced", "topology": {"kind": "direct"}}`,
			`field "expect": missing; one of safe, reproduces, fenced, reproduces-or-orphans`},
		{"TooManyReplicas", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "replicas": 9}`,
			`field "replicas": 9 is above 8: ` + MaxReplicasWhy + `; use 1 to 8`},
		{"NegativeReplicas", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "replicas": -2}`,
			`field "replicas": -2 is below 1: a run needs a replica to lead; use 1 to 8`},
		{"OneReplicaCannotDoubleRun", `{"strategy": "advisory", "topology": {"kind": "transaction"}, "expect": "reproduces", "replicas": 1}`,
			`field "replicas": 1 is too few for expect reproduces: a double-run needs two replicas leading at once; use 2 to 8`},
		{"DurationTooLong", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "duration": 9223372036854775807}`,
			`field "duration": 2562047h47m16.854775807s is above 1h: `},
		{"NegativeDuration", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "duration": "-5s"}`,
			`field "duration": -5s is below 1s: `},
		{"PollOneNanosecond", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "poll_interval": 1}`,
			`field "poll_interval": 1ns is below 1ms: each poll is a lease call on the server, and shorter polls are a busy loop on it; use 1ms to 10s`},
		{"WorkOneNanosecond", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "work": 1}`,
			`field "work": 1ns is below 1ms: `},
		{"TTLTooLong", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "ttl": "2h"}`,
			`field "ttl": 2h is above 1m: `},
		{"PoolTooLarge", `{"strategy": "fenced", "topology": {"kind": "transaction", "pool_size": 1000000}, "expect": "safe"}`,
			`field "topology.pool_size": 1000000 is not from 1 to 16: `},
		{"SeveralOnOneLine", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "work": 1, "poll_interval": 1}`,
			`field "poll_interval": 1ns is below 1ms: each poll is a lease call on the server, and shorter polls are a busy loop on it; use 1ms to 10s; field "work": 1ns is below 1ms: `},
		{"FaultDoesNotApply", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "fault": "PGBOUNCER_KILL"}`,
			`field "fault": PGBOUNCER_KILL does not apply to strategy fenced on topology direct; pick another fault or topology`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseScenario([]byte(tc.json), "x")
			require.Error(t, err)
			require.NotContains(t, err.Error(), "\n", "one line")
			require.True(t, strings.HasPrefix(err.Error(), tc.want), "got %q", err)
		})
	}
}

// Every range of a scenario's numbers is Validate's: its ends are in and
// one step past either end is out, with the field named.
func TestValidateHoldsEveryBound(t *testing.T) {
	t.Parallel()
	ok := Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Transaction}, Expect: ExpectSafe}
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		field    string
		set      func(*Scenario, int64)
		min, max int64
	}{
		{"replicas", func(s *Scenario, v int64) { s.Replicas = int(v) }, 1, MaxReplicas},
		{"duration", func(s *Scenario, v int64) { s.Duration = time.Duration(v) }, int64(MinDuration), int64(MaxDuration)},
		{"poll_interval", func(s *Scenario, v int64) { s.PollInterval = time.Duration(v) }, int64(MinPollInterval), int64(MaxPollInterval)},
		{"work", func(s *Scenario, v int64) { s.Work = time.Duration(v) }, int64(MinWork), int64(MaxWork)},
		{"ttl", func(s *Scenario, v int64) { s.TTL = time.Duration(v) }, int64(MinTTL), int64(MaxTTL)},
		{"topology.pool_size", func(s *Scenario, v int64) { s.Topology.PoolSize = int(v) }, 1, 16},
	} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			for _, v := range []int64{tc.min, tc.max} {
				sc := ok
				tc.set(&sc, v)
				require.NoError(t, sc.Validate(), "%d is in", v)
			}
			for _, v := range []int64{tc.min - 1, tc.max + 1} {
				if v == 0 {
					v = -1 // 0 is the default, not a value
				}
				sc := ok
				tc.set(&sc, v)
				var fe *FieldError
				require.ErrorAs(t, sc.Validate(), &fe, "%d is out", v)
				require.Equal(t, tc.field, fe.Field)
				require.Contains(t, fe.Problem, "; use ", "the range is in the message")
			}
		})
	}
	// A double-run needs two replicas: one is too few for the expectations
	// that want one, and enough for the others.
	for _, e := range []Expectation{ExpectReproduces, ExpectReproducesOrOrphans} {
		sc := ok
		sc.Strategy, sc.Expect, sc.Replicas = strategy.Advisory, e, 1
		var fe *FieldError
		require.ErrorAs(t, sc.Validate(), &fe, e)
		require.Equal(t, "replicas", fe.Field)
		sc.Replicas = 2
		require.NoError(t, sc.Validate(), e)
	}
	for _, e := range []Expectation{ExpectSafe, ExpectFenced} {
		sc := ok
		sc.Expect, sc.Replicas = e, 1
		require.NoError(t, sc.Validate(), e)
	}
	// A token regresses only across a promotion that lost commits: regresses
	// needs a standby, and a file says so as it says every expectation.
	regresses := Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Expect: ExpectRegresses, Fault: "PRIMARY_FAILOVER_LOSSY"}
	var standby *FieldError
	require.ErrorAs(t, regresses.Validate(), &standby)
	require.Equal(t, "standby", standby.Field)
	require.Contains(t, standby.Problem, "missing for expect regresses")
	regresses.Standby = "async"
	require.NoError(t, regresses.Validate())
	parsed, err := ParseScenario([]byte(`{"name": "x", "strategy": "fenced", "topology": {"kind": "direct"}, "standby": "async", "fault": "PRIMARY_FAILOVER_LOSSY", "expect": "regresses"}`), "")
	require.NoError(t, err)
	require.Equal(t, ExpectRegresses, parsed.Expect)
	_, err = ParseScenario([]byte(`{"name": "x", "strategy": "fenced", "topology": {"kind": "direct"}, "expect": "regress"}`), "")
	require.EqualError(t, err, `field "expect": unknown expectation "regress"; valid: safe, reproduces, fenced, reproduces-or-orphans, regresses`)
	// A flag names the field as the command line does.
	fe := &FieldError{Field: "duration", Value: "2h0m0s", Problem: "is above 1h: why; use 1s to 1h"}
	require.Equal(t, "--duration 2h0m0s is above 1h: why; use 1s to 1h", fe.Flag("duration"))
}

// Every complaint of Validate is a FieldError naming its field, so a file
// reader and a command line can each say where it is; a scenario with
// several wrong fields gets them all, in the order of the fields.
func TestValidateTagsEveryComplaintWithItsField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sc    Scenario
		field string
	}{
		{"MissingName", Scenario{Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Expect: ExpectSafe}, "name"},
		{"NameOutsideTheReports", Scenario{Name: "../x", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Expect: ExpectSafe}, "name"},
		{"UnknownStrategy", Scenario{Name: "x", Strategy: "zookeeper", Topology: Topology{Kind: Direct}, Expect: ExpectSafe}, "strategy"},
		{"UnknownTopology", Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: "mesh"}, Expect: ExpectSafe}, "topology.kind"},
		{"RefusedTopology", Scenario{Name: "x", Strategy: strategy.AdvisoryWait, Topology: Topology{Kind: Transaction}, Expect: ExpectSafe}, "topology.kind"},
		{"PoolSizeWithoutPool", Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Session, PoolSize: 2}, Expect: ExpectSafe}, "topology.pool_size"},
		{"UnknownFault", Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Fault: "METEOR", Expect: ExpectSafe}, "fault"},
		{"FaultDoesNotApply", Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Fault: "PGBOUNCER_KILL", Expect: ExpectSafe}, "fault"},
		{"MissingExpect", Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}}, "expect"},
		{"UnknownExpect", Scenario{Name: "x", Strategy: strategy.Fenced, Topology: Topology{Kind: Direct}, Expect: "maybe"}, "expect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.sc.Validate()
			require.Error(t, err)
			fes := FieldErrors(err)
			require.Len(t, fes, 1, "one complaint: %v", err)
			require.Equal(t, tc.field, fes[0].Field)
			require.Equal(t, fes[0].Error(), err.Error())
		})
	}
	all := Scenario{Strategy: "zookeeper", Topology: Topology{Kind: "mesh"}, Replicas: 99, Fault: "METEOR"}
	var fields []string
	for _, fe := range FieldErrors(all.Validate()) {
		fields = append(fields, fe.Field)
	}
	require.Equal(t, []string{"name", "strategy", "topology.kind", "replicas", "fault", "expect"}, fields)
	// The fault's own traits decide whether it applies: with the strategy
	// unknown there is nothing to say about them.
	unknown := Scenario{Name: "x", Strategy: "zookeeper", Topology: Topology{Kind: Direct}, Fault: "PGBOUNCER_KILL", Expect: ExpectSafe}
	require.Len(t, FieldErrors(unknown.Validate()), 1)
}
