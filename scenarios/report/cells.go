package report

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// CellsSchema names the layout of cells.json.
const CellsSchema = "doublerun.chaos-cells/v1"

// CellsFile is the index of one matrix run (one version set, one shard)
// that MergeDirs reads back.
const CellsFile = "cells.json"

// Run is one matrix run on one version set: its cells, in the order the
// unsharded selection has them, and which shard of it the run was.
type Run struct {
	Versions string
	// Shard and Shards say which slice of the selection ran: 1/1 for all.
	Shard, Shards int
	// Total is how many cells the unsharded selection has.
	Total int
	Wall  time.Duration
	Cells []Cell
	// Index holds each cell's position in the unsharded selection.
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
func WriteCells(dir string, r Run) error {
	if len(r.Index) != len(r.Cells) {
		return fmt.Errorf("write %s: %d cells but %d indexes", CellsFile, len(r.Cells), len(r.Index))
	}
	f := cellsFile{Schema: CellsSchema, Versions: r.Versions, Shard: cmp.Or(r.Shard, 1), Shards: cmp.Or(r.Shards, 1),
		Total: r.Total, Wall: oracle.Duration(r.Wall)}
	for i, c := range r.Cells {
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
func ReadCells(dir string) (Run, error) {
	path := filepath.Join(dir, CellsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Run{}, fmt.Errorf("read %s: %w; it is written at the end of `doublerun chaos --out DIR`", path, err)
	}
	var f cellsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return Run{}, fmt.Errorf("%s is not a cells index (%v); it is cut short or not doublerun's: run that shard again, or leave its directory out", path, err)
	}
	if f.Schema != CellsSchema {
		return Run{}, fmt.Errorf("%s has schema %q, not %q; merge the output of the same doublerun version", path, f.Schema, CellsSchema)
	}
	r := Run{Versions: f.Versions, Shard: f.Shard, Shards: f.Shards, Total: f.Total, Wall: time.Duration(f.Wall)}
	for _, e := range f.Cells {
		c := Cell{Scenario: e.Scenario, Wall: time.Duration(e.Wall), Notes: e.Notes, Versions: f.Versions}
		if e.Error != "" {
			c.Err = errors.New(e.Error)
		}
		if e.Report != "" {
			rep, err := readReport(filepath.Join(dir, filepath.FromSlash(e.Report)))
			if err != nil {
				return Run{}, err
			}
			c.Report = rep
		}
		r.Cells = append(r.Cells, c)
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
func Canonical(cells []Cell) []Cell {
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

// Merged is matrix runs joined: every cell, grouped by version set in
// set order and, within a set, in the order of the unsharded selection,
// with each set's wall time (its shards' total).
type Merged struct {
	Cells []Cell
	Walls map[string]time.Duration
}

// Summary is the merged runs' SummarySets.
func (m Merged) Summary() string { return SummarySets(m.Cells, m.Walls) }

// MergeDirs finds every cells.json under dirs (a run's --out, or a
// directory holding several) and merges the runs (Merge).
func MergeDirs(dirs ...string) (Merged, error) {
	var runs []Run
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() || de.Name() != CellsFile {
				return nil
			}
			r, err := ReadCells(filepath.Dir(path))
			if err != nil {
				return err
			}
			runs = append(runs, r)
			return nil
		})
		if err != nil {
			return Merged{}, err
		}
	}
	if len(runs) == 0 {
		return Merged{}, fmt.Errorf("no %s under %s; pass the --out directories of `doublerun chaos` runs", CellsFile, strings.Join(dirs, ", "))
	}
	return Merge(runs)
}

// Merge joins runs: per version set, the shards of one selection, each
// once. A shard missing, present twice or of another split, or a cell in
// two shards, is an error that names it.
func Merge(runs []Run) (Merged, error) {
	bySet := map[string][]Run{}
	for _, r := range runs {
		bySet[r.Versions] = append(bySet[r.Versions], r)
	}
	m := Merged{Walls: map[string]time.Duration{}}
	sets := slices.SortedFunc(maps.Keys(bySet), compareSets)
	for _, set := range sets {
		rs := bySet[set]
		n, total := rs[0].Shards, rs[0].Total
		seen := map[int]bool{}
		type indexed struct {
			i int
			c Cell
		}
		var cells []indexed
		where := map[int]int{}
		for _, r := range rs {
			if r.Shards != n || r.Total != total {
				return Merged{}, fmt.Errorf("version set %s: shard %d/%d of %d cells does not belong with shard %d/%d of %d cells; merge the shards of one run", set, r.Shard, r.Shards, r.Total, rs[0].Shard, n, total)
			}
			if seen[r.Shard] {
				return Merged{}, fmt.Errorf("version set %s: shard %d/%d is there twice; pass each shard's directory once", set, r.Shard, n)
			}
			seen[r.Shard] = true
			m.Walls[set] += r.Wall
			for k, c := range r.Cells {
				i := r.Index[k]
				if s, dup := where[i]; dup {
					return Merged{}, fmt.Errorf("version set %s: cell %s is in shards %d and %d; the shards overlap", set, c.Scenario.Name, s, r.Shard)
				}
				where[i] = r.Shard
				cells = append(cells, indexed{i, c})
			}
		}
		for s := 1; s <= n; s++ {
			if !seen[s] {
				return Merged{}, fmt.Errorf("version set %s: shard %d/%d is missing; the summary would leave its cells out", set, s, n)
			}
		}
		slices.SortFunc(cells, func(a, b indexed) int { return cmp.Compare(a.i, b.i) })
		for _, ic := range cells {
			m.Cells = append(m.Cells, ic.c)
		}
	}
	return m, nil
}
