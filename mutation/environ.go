package mutation

import (
	"os"
	"slices"
	"strings"

	"github.com/doublerun/doublerun/scenarios/reexec"
)

// mutantEnviron is this process's environment for the go test of a
// mutant, less reexec.EnvBinary: that binary was built before the mutant
// existed, so replicas started from it would run the unmutated code, and
// a guard on the replicas' own code would survive. make test sets it, and
// cmd/doublerun's tests run guards inside make test. Caught by
// TestMutantsRunTheirOwnChildren.
func mutantEnviron() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, reexec.EnvBinary+"=")
	})
}
