package chaos

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// CellsSchema names the layout of cells.json.
const CellsSchema = "doublerun.chaos-cells/v1"

// CellsFile is the index of one matrix run (one version set, one shard)
// that ReadCells reads back.
const CellsFile = "cells.json"

// ShardResults is one matrix run on one version set: its cells' results,
// in the order the unsharded selection has them, and which shard of it
// the run was.
type ShardResults struct {
	Versions string
	// Shard and Shards say which slice of the selection ran: 1/1 for all.
	Shard, Shards int
	// Total is how many cells the unsharded selection has.
	Total   int
	Wall    time.Duration
	Results []CellResult
	// Index holds each result's position in the unsharded selection.
	Index []int
}

type cellsFile struct {
	Schema   string          `json:"schema"`
	Versions string          `json:"versions"`
	Shard    int             `json:"shard"`
	Shards   int             `json:"shards"`
	Total    int             `json:"total"`
	Wall     oracle.Duration `json:"wall_ms"`
	Cells    []cellEntry     `json:"cells"`
}

type cellEntry struct {
	Index    int                `json:"index"`
	Scenario scenarios.Scenario `json:"scenario"`
	// Report is report.json's path, relative to the directory of
	// cells.json; empty when the cell produced none.
	Report string          `json:"report,omitempty"`
	Error  string          `json:"error,omitempty"`
	Wall   oracle.Duration `json:"wall_ms"`
	Notes  []string        `json:"notes,omitempty"`
}

// WriteCells writes dir/cells.json for r, whose cells' reports Write put
// under dir.
func WriteCells(dir string, r ShardResults) error {
	if len(r.Index) != len(r.Results) {
		return fmt.Errorf("write %s: %d cells but %d indexes", CellsFile, len(r.Results), len(r.Index))
	}
	f := cellsFile{Schema: CellsSchema, Versions: r.Versions, Shard: cmp.Or(r.Shard, 1), Shards: cmp.Or(r.Shards, 1),
		Total: r.Total, Wall: oracle.Duration(r.Wall)}
	for i, c := range r.Results {
		e := cellEntry{Index: r.Index[i], Scenario: c.Scenario, Wall: oracle.Duration(c.Wall), Notes: c.Notes}
		if c.Err != nil {
			e.Error = c.Err.Error()
		}
		if c.Report != nil {
			e.Report = filepath.ToSlash(filepath.Join(c.Report.Scenario.Name, "report.json"))
		}
		f.Cells = append(f.Cells, e)
	}
	js, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CellsFile), append(js, '\n'), 0o644)
}

// ReadCells reads dir/cells.json and the report.json of every cell it
// lists.
func ReadCells(dir string) (ShardResults, error) {
	path := filepath.Join(dir, CellsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return ShardResults{}, fmt.Errorf("read %s: %w; it is written at the end of `doublerun chaos --out DIR`", path, err)
	}
	var f cellsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return ShardResults{}, fmt.Errorf("%s is not a cells index (%v); it is cut short or not doublerun's: run that shard again, or leave its directory out", path, err)
	}
	if f.Schema != CellsSchema {
		return ShardResults{}, fmt.Errorf("%s has schema %q, not %q; merge the output of the same doublerun version", path, f.Schema, CellsSchema)
	}
	r := ShardResults{Versions: f.Versions, Shard: f.Shard, Shards: f.Shards, Total: f.Total, Wall: time.Duration(f.Wall)}
	for _, e := range f.Cells {
		c := CellResult{Scenario: e.Scenario, Wall: time.Duration(e.Wall), Notes: e.Notes, Versions: f.Versions}
		if e.Error != "" {
			c.Err = errors.New(e.Error)
		}
		if e.Report != "" {
			rep, err := readReport(filepath.Join(dir, filepath.FromSlash(e.Report)))
			if err != nil {
				return ShardResults{}, err
			}
			c.Report = rep
		}
		r.Results = append(r.Results, c)
		r.Index = append(r.Index, e.Index)
	}
	return r, nil
}

func readReport(path string) (*scenarios.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var rep scenarios.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s is not a report (%v)", path, err)
	}
	return &rep, nil
}

// Canonical returns cells with each report as report.json holds it (its
// durations to the microsecond), so that a summary of cells just run is
// the summary of the same cells read back by MergeDirs, to the character.
func Canonical(cells []CellResult) []CellResult {
	out := slices.Clone(cells)
	for i, c := range out {
		if c.Report == nil {
			continue
		}
		js, err := json.Marshal(c.Report)
		if err != nil {
			continue
		}
		var rep scenarios.Report
		if json.Unmarshal(js, &rep) == nil {
			out[i].Report = &rep
		}
	}
	return out
}
