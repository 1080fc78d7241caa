package main

import (
	"fmt"
	"strings"

	"github.com/doublerun/doublerun/chaos"
)

// envChaosPoolSizes gives the matrix's pool sizes when --pool-sizes does
// not (make chaos passes the environment through).
const envChaosPoolSizes = "CHAOS_POOL_SIZES"

const chaosPoolSizesHelp = "transaction pool sizes to run each cell of the transaction, pinned and alias topologies at, such as 1,2,4 (default " + envChaosPoolSizes + ", else 1)"

// chaosPoolSizes picks the pool sizes: the flag when given, else
// CHAOS_POOL_SIZES, else chaos.DefaultPoolSizes. A bad flag is a usage
// error; a bad variable names the variable.
func chaosPoolSizes(flag string, flagSet bool, env string) ([]int, error) {
	switch {
	case flagSet:
		sizes, err := chaos.ParsePoolSizes(flag)
		if err != nil {
			return nil, usageError{"--pool-sizes: " + err.Error()}
		}
		return sizes, nil
	case strings.TrimSpace(env) != "":
		sizes, err := chaos.ParsePoolSizes(env)
		if err != nil {
			return nil, envError{fmt.Sprintf("%s: %v", envChaosPoolSizes, err)}
		}
		return sizes, nil
	}
	return chaos.DefaultPoolSizes, nil
}
