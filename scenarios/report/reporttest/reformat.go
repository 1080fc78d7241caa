package reporttest

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// The two ways users most often write a report.json back, as this
// package's Check reproduces them: `jq -c .` (jq 1.6) and Python's
// json.load then json.dump. Both parse every number to a float64 and
// print it again: jq prints a whole number in full and anything else in
// its shortest form, 1e-05 below 0.0001; Python keeps integers as
// written and prints a float as repr does, 0.0 for 0.000, 1e-05 and
// 1e+16 beyond its fixed range. doublerun check must read either as the
// report it was.

// JQ is data as `jq -c .` writes it: compact, numbers reprinted.
func JQ(data []byte) ([]byte, error) { return reformat(data, jqNumber) }

// Python is data as json.dump(json.load(f)) writes it.
func Python(data []byte) ([]byte, error) { return reformat(data, pythonNumber) }

func reformat(data []byte, number func(string) string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(renumber(v, number))
}

func renumber(v any, number func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = renumber(e, number)
		}
	case []any:
		for i, e := range x {
			x[i] = renumber(e, number)
		}
	case json.Number:
		return json.Number(number(string(x)))
	}
	return v
}

func jqNumber(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	if f != 0 && math.Abs(f) < 1e-4 {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func pythonNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		return s // an int stays an int
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	if f != 0 && (math.Abs(f) < 1e-4 || math.Abs(f) >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	out := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(out, ".") {
		out += ".0"
	}
	return out
}
