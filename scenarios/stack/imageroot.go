//go:build !doublerun_nodocker

package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/testcontainers/testcontainers-go"
)

// imageRootRoute is the auto route's first choice where it can be taken:
// the native provider's child processes, running the binaries of the
// version set's local image, chrooted into the filesystem of one
// container of it that runs nothing but sleep (an image root). The servers
// are then what the image's containers would run, at the versions asked
// for, at the cost of native processes: on a 2-core machine adding and
// removing a PgBouncer cost 0.40 core-seconds as a container and 0.04 as a
// process, and one make test started 181 containers (README, "What the
// route and the race detector cost").
//
// It needs root (chroot, and /proc/PID/root of the container), an engine
// on this machine whose containers share the host's network, and
// doublerun's own images (one filesystem holds both servers). Where any
// is missing it returns nil and no error, and the servers run in
// containers of their own; DOUBLERUN_PROVIDER=docker always runs them so.
// An error means it should have worked and did not: the caller falls back
// and says why.
func imageRootRoute(ctx context.Context, opts Options, b backend) (*nativeBackend, error) {
	d, ok := b.(*dockerBackend)
	if !ok || !d.local || !d.onHost() || os.Geteuid() != 0 {
		return nil, nil
	}
	// The stack's dir is made in nativeRoot(); the container shows that
	// directory at the same path, so paths mean the same inside and out.
	parent := nativeRoot()
	req := testcontainers.ContainerRequest{
		Image:      d.postgresImage,
		Entrypoint: []string{"sleep"},
		Cmd:        []string{"infinity"},
		Labels:     d.labels,
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "none"
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: parent, Target: parent})
		},
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: slogPrintf{d.logger},
	})
	remove := func(ctx context.Context) error {
		var err error
		if ctr != nil {
			// sleep, the container's first process, ignores SIGTERM: no
			// grace period, the servers are gone already.
			if rmErr := testcontainers.TerminateContainer(ctr, testcontainers.StopContext(ctx), testcontainers.StopTimeout(0)); rmErr != nil {
				err = fmt.Errorf("docker: remove the image root: %w", rmErr)
			}
		}
		return errors.Join(err, d.close(ctx))
	}
	if err != nil {
		_ = remove(ctx)
		return nil, fmt.Errorf("start a container of %s to lend its filesystem: %w", d.postgresImage, err)
	}
	st, err := ctr.State(ctx)
	if err != nil || st.Pid <= 0 {
		_ = remove(ctx)
		return nil, fmt.Errorf("the image root's process: %v (pid %d)", err, pidOf(st))
	}
	if !awaitImageRootProcess(ctx, "/proc", st.Pid) {
		_ = remove(ctx)
		return nil, fmt.Errorf("the engine's PID %d for the image root's container is not its sleep on this machine (is the engine in another PID namespace?)", st.Pid)
	}
	nb, err := newNativeBackendIn(opts, "/proc/"+strconv.Itoa(st.Pid)+"/root")
	if err != nil {
		_ = remove(ctx)
		return nil, err
	}
	nb.release = remove
	nb.rootStack = d.id
	nb.rootFrom = fmt.Sprintf("the filesystem of local image %s (%s), chrooted", d.postgresImage, opts.versionSet.Name)
	return nb, nil
}

func pidOf(st *container.State) int {
	if st == nil {
		return 0
	}
	return st.Pid
}
