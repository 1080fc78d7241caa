package scenarios

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios/replica"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// ParseScenario reads a scenario written as data: a JSON object in the
// form of the "scenario" object of report.json, so a report's scenario can
// be run again as it stands. Durations are nanoseconds, as there, or a Go
// duration string such as "5s". Fields left out take their defaults; a
// missing name takes fallbackName (the file's name). A whole report.json
// is read as its scenario. The error is one line that names the field and
// says what to write instead.
func ParseScenario(data []byte, fallbackName string) (Scenario, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return Scenario{}, fmt.Errorf("not a JSON object (%s); write one like the \"scenario\" object of a report.json, see testdata/scenarios", jsonProblem(data, err))
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		rest := data[end:]
		next := end + int64(len(rest)-len(bytes.TrimLeft(rest, " \t\r\n"))) + 1
		line, col := position(data, next)
		return Scenario{}, fmt.Errorf("more follows the JSON object, at line %d, column %d; a file holds one scenario: remove what comes after its closing brace", line, col)
	}
	// encoding/json keeps the last of two equal keys; a file that sets a
	// field twice means one of them and cannot say which.
	if key, ok := duplicateKey(data); ok {
		return Scenario{}, fmt.Errorf("field %q is there twice; keep one", key)
	}
	if inner, ok := raw["scenario"]; ok && raw["schema"] != nil {
		// A whole report.json: run its scenario again.
		raw = nil
		if err := json.Unmarshal(inner, &raw); err != nil {
			return Scenario{}, fmt.Errorf("field \"scenario\" of this report is not an object (%s)", jsonProblem(inner, err))
		}
	}
	var sc Scenario
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("field %q: ", field)+fmt.Sprintf(format, args...))
	}
	str := func(field string, dst *string) {
		if v, ok := raw[field]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				bad(field, "%s is not a string; write it in double quotes", v)
			}
		}
	}
	integer := func(field string, dst *int) {
		if v, ok := raw[field]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				if problem, ok := outOfRange(field, v); ok {
					bad(field, "%s %s", v, problem)
					return
				}
				bad(field, "%s is not a whole number", v)
			}
		}
	}
	duration := func(field string, dst *time.Duration) {
		v, ok := raw[field]
		if !ok {
			return
		}
		var ns int64
		if err := json.Unmarshal(v, &ns); err == nil {
			*dst = time.Duration(ns)
		} else {
			var s string
			d, perr := time.Duration(0), json.Unmarshal(v, &s)
			if perr == nil {
				d, perr = time.ParseDuration(s)
			}
			if perr != nil {
				bad(field, "%s is not a duration; write nanoseconds as report.json does (5000000000) or a string such as \"5s\"", v)
				return
			}
			*dst = d
		}
	}
	for field := range raw {
		if !slices.Contains(scenarioFields, field) {
			bad(field, "no such field; valid: %s", strings.Join(scenarioFields, ", "))
		}
	}
	str("name", &sc.Name)
	str("description", &sc.Description)
	str("strategy", &sc.Strategy)
	str("fault", &sc.Fault)
	var standby string
	str("standby", &standby)
	sc.Standby = stack.ReplicationMode(standby)
	var expect string
	str("expect", &expect)
	sc.Expect = Expectation(expect)
	integer("replicas", &sc.Replicas)
	duration("duration", &sc.Duration)
	duration("poll_interval", &sc.PollInterval)
	duration("work", &sc.Work)
	duration("ttl", &sc.TTL)
	if v, ok := raw["unfenced"]; ok {
		if err := json.Unmarshal(v, &sc.Unfenced); err != nil {
			bad("unfenced", "%s is not true or false", v)
		}
	}
	if v, ok := raw["jobs"]; ok {
		if err := json.Unmarshal(v, &sc.Jobs); err != nil {
			bad("jobs", "%s is not true or false", v)
		}
	}
	if v, ok := raw["topology"]; ok {
		var topo map[string]json.RawMessage
		if err := json.Unmarshal(v, &topo); err != nil {
			bad("topology", "%s is not an object; write {\"kind\": \"transaction\", \"pool_size\": 2}", v)
		}
		for _, k := range slices.Sorted(maps.Keys(topo)) {
			switch k {
			case "kind":
				var kind string
				if err := json.Unmarshal(topo[k], &kind); err != nil {
					bad("topology.kind", "%s is not a string; write one of %s in double quotes", topo[k], topologyNames())
				}
				sc.Topology.Kind = TopologyKind(kind)
			case "pool_size":
				if err := json.Unmarshal(topo[k], &sc.Topology.PoolSize); err != nil {
					bad("topology.pool_size", "%s is not a pool size; write a whole number such as 2, or leave it out for 1", topo[k])
				}
			default:
				bad("topology."+k, "no such field; valid: kind, pool_size")
			}
		}
	}
	if v, ok := raw["replica"]; ok {
		c, err := decodeReplica(v)
		if err != nil {
			errs = append(errs, err.Error())
		}
		sc.Replica = c
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return Scenario{}, errors.New(strings.Join(errs, "; "))
	}
	sc.Name = cmp.Or(sc.Name, fallbackName)
	// What the JSON holds is Validate's to judge; its complaints name
	// their fields, on one line as every complaint here.
	if err := sc.Validate(); err != nil {
		return Scenario{}, err
	}
	return sc, nil
}

// outOfRange says, for a whole number too large for any int, which bound
// of field it crosses and why, as Validate would for a smaller one: the
// number is a number, only far outside the range.
func outOfRange(field string, v json.RawMessage) (string, bool) {
	n, ok := new(big.Int).SetString(string(bytes.TrimSpace(v)), 10)
	if !ok {
		return "", false
	}
	for _, b := range bounds {
		if b.field != field {
			continue
		}
		rng := fmt.Sprintf("use %s to %s", b.show(b.min), b.show(b.max))
		if n.Sign() < 0 {
			return fmt.Sprintf("is below %s: %s; %s", b.show(b.min), b.whyMin, rng), true
		}
		return fmt.Sprintf("is above %s: %s; %s", b.show(b.max), b.whyMax, rng), true
	}
	return "", false
}

// scenarioFields are the JSON fields of a Scenario, in its order.
var scenarioFields = []string{"name", "description", "strategy", "topology", "replicas", "duration", "poll_interval", "work", "ttl", "fault", "unfenced", "standby", "jobs", "expect", "replica"}

// jsonProblem says in a user's words why data is not the JSON expected:
// where it stops being JSON, or what kind of value it holds instead of an
// object. encoding/json's own messages name Go types
// (map[string]json.RawMessage), which mean nothing to the file's author.
func jsonProblem(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the file is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends before the object closes"
	case errors.As(err, &syn):
		line, col := position(data, syn.Offset)
		return fmt.Sprintf("%s, at line %d, column %d", strings.TrimPrefix(syn.Error(), "json: "), line, col)
	case errors.As(err, &typ):
		return "it is " + article(typ.Value)
	}
	return err.Error()
}

// position is the line and column, counted from 1, of the byte at
// offset-1: the last one read when encoding/json gave up at offset.
func position(data []byte, offset int64) (line, col int) {
	line = 1
	for _, c := range data[:min(int(offset), len(data))] {
		if c == '\n' {
			line, col = line+1, 0
			continue
		}
		col++
	}
	return line, max(col, 1)
}

// article puts "a" or "an" before a JSON kind: "an array", "a string".
func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// duplicateKey finds a key that an object in data holds twice and returns
// it with its parents' keys ("topology.kind"); data is valid JSON.
func duplicateKey(data []byte) (string, bool) {
	key, _ := duplicateIn(json.NewDecoder(bytes.NewReader(data)), "")
	return key, key != ""
}

// duplicateIn reads one value from dec, path being where it is, and
// returns the first key an object in it holds twice.
func duplicateIn(dec *json.Decoder, path string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return "", err
			}
			k, _ := tok.(string)
			name := k
			if path != "" {
				name = path + "." + k
			}
			if seen[k] {
				return name, nil
			}
			seen[k] = true
			if dup, err := duplicateIn(dec, name); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token()
		return "", err
	case json.Delim('['):
		for dec.More() {
			if dup, err := duplicateIn(dec, path+"[]"); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token()
		return "", err
	}
	return "", nil
}

// ParseReplicaCommand reads a replica object as the "replica" field of a
// scenario file holds it, or a whole scenario file and takes its
// "replica": what `doublerun chaos --replica FILE` reads.
func ParseReplicaCommand(data []byte) (*replica.Command, error) {
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
	c.Validate(func(field, value, problem string) { errs = append(errs, &FieldError{field, value, problem}) })
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

func decodeReplica(data []byte) (*replica.Command, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c replica.Command
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
