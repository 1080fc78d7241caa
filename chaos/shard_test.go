package chaos

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseShard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		i, n int
		err  bool
	}{
		{in: "1/1", i: 1, n: 1},
		{in: " 3/4 ", i: 3, n: 4},
		{in: "0/4", err: true},
		{in: "5/4", err: true},
		{in: "4", err: true},
		{in: "a/b", err: true},
		{in: "1/0", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			i, n, err := ParseShard(tc.in)
			if tc.err {
				require.EqualError(t, err, `shard "`+tc.in+`" is not i/n with 1 <= i <= n, such as 1/4`)
				return
			}
			require.NoError(t, err)
			require.Equal(t, [2]int{tc.i, tc.n}, [2]int{i, n})
		})
	}
}

func TestShardsCoverTheMatrixOnceAndEvenly(t *testing.T) {
	t.Parallel()
	cells, err := table.place(Matrix(), "", 0, nil)
	require.NoError(t, err)
	for _, n := range []int{1, 2, 3, 4, 7} {
		seen := make([]int, len(cells))
		var loads []time.Duration
		for i := 1; i <= n; i++ {
			got := Shard(cells, i, n)
			require.Equal(t, got, Shard(cells, i, n), "deterministic")
			require.True(t, slices.IsSorted(got), "in matrix order")
			var load time.Duration
			for _, k := range got {
				seen[k]++
				load += CellDuration(cells[k])
			}
			loads = append(loads, load)
		}
		for k, c := range seen {
			require.Equal(t, 1, c, "cell %s in %d shards of %d", cells[k].Name, c, n)
		}
		longest := slices.Max(loads)
		require.LessOrEqual(t, longest-slices.Min(loads), 15*time.Second, "shards of %d: %v", n, loads)
		if n == 1 {
			require.Len(t, Shard(cells, 1, 1), len(cells))
		}
	}
}
