package mutation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Equivalent is a gremlins mutant that no test can or should kill, with
// the reason: a mutant that behaves exactly as the code does (a boundary
// the defaults never reach, a log-only condition), or one gremlins v0.6.0
// cannot run (a switch case's condition, gremlins#298) whose guard is a
// named guard instead. testdata/mutation/equivalents.json lists them.
type Equivalent struct {
	// File is relative to the module root ("lease/advisory.go"); Line and
	// Mutator are as in gremlins' report.
	File    string `json:"file"`
	Line    int    `json:"line"`
	Mutator string `json:"mutator"`
	// Column, when given, is the mutant's column as in gremlins' report:
	// it singles out one of two mutants of the same kind on one line (in
	// `i < n && d < max`), so that listing one does not excuse the other.
	Column int `json:"column,omitempty"`
	// Code is the line's text without surrounding blanks. When the code
	// moves unchanged, [Equivalents.Locate] follows it; when it changes or
	// goes, the entry excuses nothing and the gate says so.
	Code string `json:"code"`
	// Why says why the mutant is equivalent, or which guard covers it.
	Why string `json:"why"`
}

// Equivalents are the listed equivalent mutants.
type Equivalents []Equivalent

// ReadEquivalents reads an equivalents file ({"equivalents": [...]}); a
// missing file is an empty list. Every field is required.
func ReadEquivalents(file string) (Equivalents, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Equivalents Equivalents `json:"equivalents"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	seen := map[string]bool{}
	for i, e := range doc.Equivalents {
		if e.File == "" || e.Line < 1 || e.Column < 0 || !slices.Contains(mutators, e.Mutator) || e.Code == "" || e.Why == "" {
			return nil, fmt.Errorf("%s: entry %d needs file, line, a gremlins mutator, code and why (and a column, if any, from 1)", file, i+1)
		}
		k := e.key()
		if seen[k] {
			return nil, fmt.Errorf("%s: %s is listed twice", file, k)
		}
		seen[k] = true
	}
	return doc.Equivalents, nil
}

func (e Equivalent) key() string {
	if e.Column > 0 {
		return fmt.Sprintf("%s:%d:%d:%s", e.File, e.Line, e.Column, e.Mutator)
	}
	return fmt.Sprintf("%s:%d:%s", e.File, e.Line, e.Mutator)
}

// Has reports whether the mutant of the given type at file:line:column
// (file relative to the module root) is listed; an entry without a column
// lists every mutant of its type on its line.
func (eq Equivalents) Has(file string, line, column int, mutator string) bool {
	for _, e := range eq {
		if e.File == file && e.Line == line && e.Mutator == mutator && (e.Column == 0 || e.Column == column) {
			return true
		}
	}
	return false
}

// Locate follows each entry to its code under root, as the record follows
// a mutant: an entry whose line still reads its code stays, and one whose
// code moved without changing, to one line of its file, is moved there.
// It returns the entries as located, and one line per entry that locates
// nothing (its code is gone, or it moved to several lines and which one
// is meant is not known). Such an entry excuses nothing, so the gate lists
// these with its failures. A moved entry needs no edit: a line inserted
// above an equivalent changes no verdict.
func (eq Equivalents) Locate(root string) (Equivalents, []string) {
	located := make(Equivalents, 0, len(eq))
	var problems []string
	for _, e := range eq {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(e.File)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("equivalent %s: %v; remove or update the entry", e.key(), err))
			continue
		}
		lines := strings.Split(string(data), "\n")
		if e.Line <= len(lines) && strings.TrimSpace(lines[e.Line-1]) == e.Code {
			located = append(located, e)
			continue
		}
		var at []int
		for i, l := range lines {
			if strings.TrimSpace(l) == e.Code {
				at = append(at, i+1)
			}
		}
		switch len(at) {
		case 0:
			problems = append(problems, fmt.Sprintf("equivalent %s: line %d no longer reads %q and no line of the file does; the code is gone, remove the entry", e.key(), e.Line, e.Code))
		case 1:
			e.Line = at[0]
			located = append(located, e)
		default:
			problems = append(problems, fmt.Sprintf("equivalent %s: line %d no longer reads %q; lines %v do; set the entry's line to the one meant", e.key(), e.Line, e.Code, at))
		}
	}
	return located, problems
}
