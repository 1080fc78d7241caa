package reexec_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/scenarios/reexec"
)

// exitChild exits with the code its argument names: a child whose answer
// the parent can read without a pipe.
const exitChild = "reexec-test-exit"

func TestMain(m *testing.M) {
	reexec.Register(exitChild, func(arg string) int {
		n, err := strconv.Atoi(arg)
		if err != nil {
			return 99
		}
		return n
	})
	reexec.Main()
	os.Exit(m.Run())
}

// A child started with Command runs the registered function with its
// argument, exits with its code, and runs none of the tests.
func TestACommandRunsTheRegisteredChild(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := reexec.Command(context.Background(), exe, exitChild, "7")
	require.Contains(t, cmd.Args, "-test.run=^$", "a test binary's child runs no test")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output: %s", out)
	require.Equal(t, 7, exit.ExitCode())
	require.NotContains(t, string(out), "PASS", "the child ran the tests")
}

// A child name this binary does not know is exit 2 with one line naming
// the ones it does.
func TestAnUnknownChildIsOneLine(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	out, err := reexec.Command(context.Background(), exe, "no-such-child", "").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "output: %s", out)
	require.Equal(t, 2, exit.ExitCode())
	require.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line: %s", out)
	require.Contains(t, string(out), `names no child this binary knows (`+exitChild+`)`)
}

func TestRegisteringANameTwicePanics(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { reexec.Register(exitChild, func(string) int { return 0 }) })
}
