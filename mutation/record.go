package mutation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// Record is what the last passing gate run wrote to
// testdata/mutation/record.json, for the next submission's gate (CI):
// the commit it passed on, the shard count, and per package the cost of a
// mutant and each shard's figures. Only a passing run writes it, never a
// hand: `make mutation` (every mutant) or `make mutation-ci` (one shard
// and the change), each on a clean working tree.
type Record struct {
	// Base is the commit the run passed on; the next gate mutates the
	// lines changed since.
	Base string `json:"base"`
	// Shards is how many shards a package's lines are split into
	// (ShardOf).
	Shards int `json:"shards"`
	// Packages are the gated packages' figures, by package directory.
	Packages map[string]PackageRecord `json:"packages"`
}

// PackageRecord is one package's part of the record.
type PackageRecord struct {
	// SecondsPerMutant is the cost of one mutant's test run, gremlins'
	// wall time over the mutants it ran: the gate's estimate of its own
	// wall time.
	SecondsPerMutant float64 `json:"seconds_per_mutant"`
	// Mutants counts the mutants whose tests ran in the whole package.
	Mutants int `json:"mutants"`
	// Shards are the figures of each shard's mutants, Shards of them, as
	// floors: a shard's next run must reach them.
	Shards []ShardFigures `json:"shards,omitempty"`
}

// ShardFigures are one shard's figures and how many mutants it ran.
type ShardFigures struct {
	Figures
	Mutants int `json:"mutants"`
}

// ReadRecord reads a record file. A missing file is an error that says how
// to make one.
func ReadRecord(file string) (Record, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, fmt.Errorf("%s does not exist: no gate run has passed yet; run make mutation and commit the record it writes", file)
	}
	if err != nil {
		return Record{}, err
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%s: %w", file, err)
	}
	if r.Base == "" || r.Shards < 1 {
		return Record{}, fmt.Errorf("%s names no base commit or no shard count; run make mutation and commit the record it writes", file)
	}
	for name, p := range r.Packages {
		if len(p.Shards) != 0 && len(p.Shards) != r.Shards {
			return Record{}, fmt.Errorf("%s: %s has figures for %d shards, not %d; run make mutation and commit the record it writes", file, name, len(p.Shards), r.Shards)
		}
	}
	return r, nil
}

// Write writes the record as indented JSON.
func (r Record) Write(file string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// Estimate is the wall time the gremlins runs of mutants mutants of pkg
// should take, from the recorded cost of a mutant; 0 when none is
// recorded.
func (r Record) Estimate(pkg string, mutants int) time.Duration {
	return time.Duration(float64(mutants) * r.Packages[pkg].SecondsPerMutant * float64(time.Second))
}

// After is the record of a passing per-submission run of the given shard
// on commit head: head as the base, the shard's figures raised to what the
// run measured (never lowered) with its mutant count, and each package's
// cost of a mutant as measured.
func (r Record) After(run CIRun, shard int, head string) Record {
	out := r
	out.Base = head
	out.Packages = map[string]PackageRecord{}
	for name, p := range r.Packages {
		p.Shards = slices.Clone(p.Shards)
		out.Packages[name] = p
	}
	for i, res := range run.Results {
		p := run.Packages[i]
		pr := out.Packages[res.Name]
		if tested := res.Part.Score.Tested() + res.Changed.Score.Tested(); tested > 0 && p.Report.ElapsedTime > 0 {
			pr.SecondsPerMutant = math.Ceil(p.Report.ElapsedTime/float64(tested)*100) / 100
		}
		if p.Whole {
			pr.Mutants = res.Part.Score.Tested()
		} else if shard < len(pr.Shards) {
			sf := &pr.Shards[shard]
			sf.Efficacy = max(sf.Efficacy, floor2(res.Part.Score.Efficacy()))
			sf.Coverage = max(sf.Coverage, floor2(res.Part.Score.Coverage()))
			sf.Mutants = res.Part.Score.Tested()
		}
		out.Packages[res.Name] = pr
	}
	return out
}
