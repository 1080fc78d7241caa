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
		{"NotAnObject", `[1]`, `not a JSON object (json: cannot unmarshal array into Go value of type map[string]json.RawMessage); write one like the "scenario" object of a report.json, see testdata/scenarios`},
		{"UnknownField", `{"strategy": "fenced", "topology": {"kind": "direct"}, "expect": "safe", "pool": 2}`,
			`field "pool": no such field; valid: name, description, strategy, topology, replicas, duration, poll_interval, work, ttl, fault, unfenced, expect`},
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
			`field "replicas": 9: need from 1 to 8; `},
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
