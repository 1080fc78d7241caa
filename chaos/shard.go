package chaos

import (
	"cmp"
	"fmt"
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
