package chaos

import (
	"cmp"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
)

// ParseShard reads a shard such as "2/4": the second of four slices, from
// 1/1 (everything) on. The error says the form.
func ParseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "/")
	i, errI := strconv.Atoi(a)
	n, errN := strconv.Atoi(b)
	if !ok || errI != nil || errN != nil || n < 1 || i < 1 || i > n {
		return 0, 0, fmt.Errorf("shard %q is not i/n with 1 <= i <= n, such as 1/4", s)
	}
	return i, n, nil
}

// Shard returns the positions in cells of shard i of n: a deterministic
// slice, the same on every machine for the same cells, and together the n
// shards hold every cell exactly once. Cells are dealt by length
// (CellDuration), longest first, each to the shard with the least time so
// far (the lowest numbered on a tie), so the shards take about as long;
// the positions come back in ascending order, the order the cells run in.
func Shard(cells []scenarios.Scenario, i, n int) []int {
	order := make([]int, len(cells))
	for k := range order {
		order[k] = k
	}
	length := func(k int) time.Duration { return CellDuration(cells[k]) }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(length(b), length(a)) })
	load := make([]time.Duration, n)
	var out []int
	for _, k := range order {
		to := 0
		for s := 1; s < n; s++ {
			if load[s] < load[to] {
				to = s
			}
		}
		load[to] += length(k)
		if to == i-1 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// SetResults is what a matrix gave on one or more version sets: every
// cell's result, grouped by version set in set order and, within a set,
// in the order of the unsharded selection, with each set's wall time (its
// shards' total). RunSets returns it, and Merge joins shards into it.
type SetResults struct {
	Results []CellResult
	Walls   map[string]time.Duration
	// Planned is how many cells were to run: more than ran when the run
	// was cut short.
	Planned int
}

// Summary is the results' SummarySets.
func (r SetResults) Summary() string { return SummarySets(r.Results, r.Walls) }

// Verdict judges the results (Verdict).
func (r SetResults) Verdict() scenarios.Verdict { return Verdict(r.Results) }

// MergeDirs finds every cells.json under dirs (a run's --out, or a
// directory holding several) and merges the shards they hold (Merge).
func MergeDirs(dirs ...string) (SetResults, error) {
	var shards []ShardResults
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
			shards = append(shards, r)
			return nil
		})
		if err != nil {
			return SetResults{}, err
		}
	}
	if len(shards) == 0 {
		return SetResults{}, fmt.Errorf("no %s under %s; pass the --out directories of `doublerun chaos` runs", CellsFile, strings.Join(dirs, ", "))
	}
	return Merge(shards)
}

// Merge is the inverse of Shard: per version set, it joins the shards of
// one selection, each once, into the results an unsharded run gives. A
// shard missing, present twice or of another split, or a cell in two
// shards, is an error that names it.
func Merge(shards []ShardResults) (SetResults, error) {
	bySet := map[string][]ShardResults{}
	for _, r := range shards {
		bySet[r.Versions] = append(bySet[r.Versions], r)
	}
	m := SetResults{Walls: map[string]time.Duration{}}
	sets := slices.SortedFunc(maps.Keys(bySet), CompareSets)
	for _, set := range sets {
		rs := bySet[set]
		n, total := rs[0].Shards, rs[0].Total
		seen := map[int]bool{}
		type indexed struct {
			i int
			r CellResult
		}
		var results []indexed
		where := map[int]int{}
		for _, r := range rs {
			if r.Shards != n || r.Total != total {
				return SetResults{}, fmt.Errorf("version set %s: shard %d/%d of %d cells does not belong with shard %d/%d of %d cells; merge the shards of one run", set, r.Shard, r.Shards, r.Total, rs[0].Shard, n, total)
			}
			if seen[r.Shard] {
				return SetResults{}, fmt.Errorf("version set %s: shard %d/%d is there twice; pass each shard's directory once", set, r.Shard, n)
			}
			seen[r.Shard] = true
			m.Walls[set] += r.Wall
			for k, res := range r.Results {
				i := r.Index[k]
				if s, dup := where[i]; dup {
					return SetResults{}, fmt.Errorf("version set %s: cell %s is in shards %d and %d; the shards overlap", set, res.Scenario.Name, s, r.Shard)
				}
				where[i] = r.Shard
				results = append(results, indexed{i, res})
			}
		}
		for s := 1; s <= n; s++ {
			if !seen[s] {
				return SetResults{}, fmt.Errorf("version set %s: shard %d/%d is missing; the summary would leave its cells out", set, s, n)
			}
		}
		slices.SortFunc(results, func(a, b indexed) int { return cmp.Compare(a.i, b.i) })
		for _, ir := range results {
			m.Results = append(m.Results, ir.r)
		}
		m.Planned += total
	}
	return m, nil
}
