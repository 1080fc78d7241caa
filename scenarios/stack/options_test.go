package stack

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A variable doublerun cannot take is an *EnvError whose one line names
// it, what it takes and how to leave it out; a bad value given in Options
// by code is a plain error that names no variable.
func TestOptionsNameTheBadVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   Options
		env    map[string]string
		envVar string // "" for a plain error
		want   string
	}{
		{"UnknownProvider", Options{}, map[string]string{EnvProvider: "kubernetes"}, EnvProvider,
			`DOUBLERUN_PROVIDER="kubernetes" is not a provider; use auto, docker, native or external, or unset it for auto`},
		{"UnknownVersionSet", Options{}, map[string]string{EnvVersions: "bogus"}, EnvVersions,
			`DOUBLERUN_VERSIONS: unknown version set "bogus"; use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24, or unset it for pg17-pgbouncer1.24, the newest`},
		{"AllVersionSets", Options{}, map[string]string{EnvVersions: "all"}, EnvVersions,
			`DOUBLERUN_VERSIONS: version set "all" is for the chaos matrix; a stack runs one set: use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24, or unset it for pg17-pgbouncer1.24, the newest`},
		{"PoolSizeNotANumber", Options{}, map[string]string{EnvTransactionPoolSize: "one"}, EnvTransactionPoolSize,
			`DOUBLERUN_TRANSACTION_POOL_SIZE="one" is not a pool size from 1 to 16 (a run has at most 8 replicas with 2 work connections each, so a larger pool changes nothing); unset it or set one such as 1`},
		{"PoolSizeNegative", Options{}, map[string]string{EnvTransactionPoolSize: "-1"}, EnvTransactionPoolSize,
			`DOUBLERUN_TRANSACTION_POOL_SIZE="-1" is not a pool size from 1 to 16 (a run has at most 8 replicas with 2 work connections each, so a larger pool changes nothing); unset it or set one such as 1`},
		{"PoolSizeTooLarge", Options{}, map[string]string{EnvTransactionPoolSize: "1000000"}, EnvTransactionPoolSize,
			`DOUBLERUN_TRANSACTION_POOL_SIZE="1000000" is not a pool size from 1 to 16 (a run has at most 8 replicas with 2 work connections each, so a larger pool changes nothing); unset it or set one such as 1`},
		{"ProviderInOptions", Options{Provider: "kubernetes"}, nil, "",
			`unknown provider "kubernetes"; use auto, docker, native or external`},
		{"PoolSizeInOptions", Options{TransactionPoolSize: -3}, nil, "",
			`transaction pool size -3 is below 1`},
		{"VersionSetInOptions", Options{Versions: "bogus"}, nil, "",
			`unknown version set "bogus"; use one of pg15-pgbouncer1.18, pg17-pgbouncer1.24`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.opts.lookupEnv = lookup(tc.env)
			_, err := tc.opts.resolve()
			require.EqualError(t, err, tc.want)
			var ee *EnvError
			if tc.envVar == "" {
				require.False(t, errors.As(err, &ee), "a value from code is not the environment's")
				return
			}
			require.ErrorAs(t, err, &ee)
			require.Equal(t, tc.envVar, ee.Var)
		})
	}
	// The bounds themselves: 1 and MaxPoolSize are in.
	for _, n := range []int{1, MaxPoolSize} {
		require.NoError(t, CheckPoolSize(n))
	}
	for _, n := range []int{0, MaxPoolSize + 1} {
		require.Error(t, CheckPoolSize(n))
	}
}
