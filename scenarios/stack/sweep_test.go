//go:build !doublerun_nodocker

package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
)

// envSweepChild makes the test binary start a stack, print where it lives
// and wait to be killed (see TestMain).
const envSweepChild = "DOUBLERUN_STACK_TEST_SWEEP_CHILD"

// runSweepChild is the child of TestKilledOwnersStackIsRemovedByTheNextStart.
func runSweepChild() {
	got := captureBackendOnce()
	if _, err := Start(context.Background(), Options{}); err != nil {
		fmt.Println("error:", firstLine(err))
		os.Exit(1)
	}
	switch b := (*got).(type) {
	case *dockerBackend:
		fmt.Println("ready docker", b.id)
	case *nativeBackend:
		if b.rootStack != "" {
			fmt.Println("ready rooted", b.dir, b.rootStack)
			break
		}
		fmt.Println("ready native", b.dir)
	}
	select {} // until SIGKILL
}

func captureBackendOnce() *backend {
	var b backend
	testHookBackend = func(got backend) { b = got }
	return &b
}

// A doublerun process that is SIGKILLed never reaches Close. Its servers
// are left behind (docker: 3 containers, and a network where they do not
// share the host's; native: a temp dir,
// the servers themselves die with it), and the next stack removes them.
//
// Not parallel: any stack another test starts meanwhile would sweep the
// dead owner's leftovers before this test looks at them.
func TestKilledOwnersStackIsRemovedByTheNextStart(t *testing.T) {
	ctx := context.Background()
	// Ryuk would remove the containers on its own; this test is about the
	// sweep, which is what runs where the engine cannot get Ryuk.
	child, ready := startStackChild(t, envSweepChild, envRyukDisabled+"=true")
	kind, where, ok := strings.Cut(strings.TrimPrefix(ready, "ready "), " ")
	require.True(t, ok, "child: %s", ready)

	leftovers := func() string {
		switch kind {
		case "docker":
			ctrs, nets := dockerLeftovers(t, where)
			return fmt.Sprintf("%d running containers, %d networks", ctrs, nets)
		case "rooted":
			dir, id, _ := strings.Cut(where, " ")
			_, err := os.Stat(dir)
			ctrs, _ := dockerLeftovers(t, id)
			return fmt.Sprintf("temp dir present: %v, %d running containers", err == nil, ctrs)
		default:
			_, err := os.Stat(where)
			return fmt.Sprintf("temp dir present: %v", err == nil)
		}
	}
	want := map[string]string{"docker": "3 running containers, 1 networks", "native": "temp dir present: true",
		"rooted": "temp dir present: true, 1 running containers"}[kind]
	if kind == "docker" && hostNetworking(ctx, dockerClient(t)) {
		want = "3 running containers, 0 networks" // they share the host's
	}
	require.Equal(t, want, leftovers(), "the child's stack runs")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	if kind == "native" || kind == "rooted" {
		where, _, _ := strings.Cut(where, " ")
		// Its servers die with it (Pdeathsig); only the dir is left, and
		// the postmaster's segment once its backends have exited (until
		// then the sweep keeps the dir, see releaseSharedMemory).
		require.Eventually(t, func() bool { return !pidRunsIn(where) && segmentDetached(where) }, 30*time.Second, 100*time.Millisecond)
	}
	// An image root's container is removed with the docker stacks of
	// dead owners, whose labels it carries.
	swept := map[string]string{"docker": "0 running containers, 0 networks", "native": "temp dir present: false",
		"rooted": "temp dir present: false, 0 running containers"}[kind]
	// Another package's tests may start a stack at any moment (go test
	// runs packages at once), and that start sweeps the dead owner's
	// stack too: CI once saw the dir gone before this check. Either way
	// the sweep of a next start removed it; nothing else does.
	// Every start sweeps dirs; only a start through the docker route
	// sweeps containers, so a rooted stack's dir may be gone before its
	// container.
	before := leftovers()
	may := []string{want, swept}
	if kind == "rooted" {
		may = append(may, "temp dir present: false, 1 running containers")
	}
	require.Contains(t, may, before, "a SIGKILLed owner leaves its stack behind until the next start")

	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	after := leftovers()
	t.Logf("%s stack of a SIGKILLed owner: before the next start: %s; after: %s", kind, before, after)
	require.Equal(t, swept, after)
}

// dockerLeftovers counts the running containers and the networks of the
// docker stack with ID id.
func dockerLeftovers(t *testing.T, id string) (containers, networks int) {
	t.Helper()
	cli := dockerClient(t)
	f := client.Filters{}.Add("label", LabelStack+"="+id)
	ctrs, err := cli.ContainerList(context.Background(), client.ContainerListOptions{Filters: f})
	require.NoError(t, err)
	nets, err := cli.NetworkList(context.Background(), client.NetworkListOptions{Filters: f})
	require.NoError(t, err)
	return len(ctrs.Items), len(nets.Items)
}

// dockerClient is a testcontainers Docker client for checks. It lets
// prepareRyuk run first: testcontainers reads its configuration once per
// process, and a stack started later in this test binary must still be able
// to switch Ryuk off.
func dockerClient(t *testing.T) *testcontainers.DockerClient {
	t.Helper()
	_, err := prepareRyuk(context.Background(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// pidRunsIn reports whether a server of the native stack in dir still
// runs: postgres holds its postmaster.pid while it does.
func pidRunsIn(dir string) bool {
	raw, err := os.ReadFile(dir + "/pgdata/postmaster.pid")
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(string(raw), "%d", &pid); err != nil {
		return false
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// requireNoContainersLeft checks that a docker backend removed every
// container and network of its stack.
func requireNoContainersLeft(t *testing.T, b backend) {
	t.Helper()
	d, ok := b.(*dockerBackend)
	require.True(t, ok, "unexpected backend %T", b)
	requireNoDockerStack(t, d.id)
}

// requireNoDockerStack fails if a container or network of the docker
// stack with ID id is left, stopped or running.
func requireNoDockerStack(t *testing.T, id string) {
	t.Helper()
	cli := dockerClient(t)
	f := client.Filters{}.Add("label", LabelStack+"="+id)
	ctrs, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	require.NoError(t, err)
	require.Empty(t, ctrs.Items, "containers of stack %s", id)
	nets, err := cli.NetworkList(context.Background(), client.NetworkListOptions{Filters: f})
	require.NoError(t, err)
	require.Empty(t, nets.Items, "networks of stack %s", id)
}
