//go:build !doublerun_nodocker

package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/doublerun/doublerun/pgbouncer"
)

// LabelStack is set on every container and network a docker stack creates,
// with the stack's ID as its value, beside the owner labels (LabelOwnerPID
// and the others), so leftovers can be found and removed.
const LabelStack = "io.doublerun.stack"

const (
	pgAlias       = "postgres"
	pgPort        = 5432
	bouncerPort   = 6432
	bouncerConfig = "/etc/pgbouncer/pgbouncer.ini"
	bouncerUsers  = "/etc/pgbouncer/userlist.txt"
)

// dockerBackend runs each server as a container on a private network. Host
// ports are bound to fixed loopback ports chosen up front, so DSNs survive a
// container's stop and start.
type dockerBackend struct {
	id     string
	labels map[string]string // stack ID and owner
	logger *slog.Logger
	cli    *testcontainers.DockerClient // closed by close
	// net is the network this backend created and close removes; nil
	// for a backend attached to another stack's network (attachDocker).
	net            *testcontainers.DockerNetwork
	netName        string
	postgresImage  string
	pgbouncerImage string
	// fwdHost and fwdPort are where bouncers forward to: the stack's
	// Postgres on the network (pgAlias, pgPort) unless forwardBouncers
	// set them (an HA stack's router).
	fwdHost string
	fwdPort int
}

// dockerAvailable reports whether a Docker engine answers, and if not why.
func dockerAvailable(ctx context.Context) (err error) {
	defer func() {
		// testcontainers panics, or says "rootless Docker not found", when
		// it finds no Docker host at all.
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
		if err != nil && os.Getenv("DOCKER_HOST") == "" && strings.Contains(err.Error(), "Docker not found") {
			err = errors.New("no Docker socket found (DOCKER_HOST is unset, /var/run/docker.sock is missing)")
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// testcontainers falls back to other engines when DOCKER_HOST does not
	// answer. A user who set DOCKER_HOST means that engine, so it is
	// checked on its own first.
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
		}
		defer cli.Close()
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			return fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
		}
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

// newDockerBackend takes over cli: the backend closes it.
func newDockerBackend(ctx context.Context, opts Options, cli *testcontainers.DockerClient, imgs dockerImages) (*dockerBackend, error) {
	me := self()
	sweepDocker(ctx, cli, me, opts.Logger)
	id := randomPassword()[:12]
	labels := me.labels()
	labels[LabelStack] = id
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(labels))
	if err != nil {
		return nil, fmt.Errorf("docker: create network: %w%s", err, imageHint(err))
	}
	return &dockerBackend{id: id, labels: labels, logger: opts.Logger, cli: cli, net: nw, netName: nw.Name, postgresImage: imgs.postgres, pgbouncerImage: imgs.pgbouncer}, nil
}

// attachDocker returns a backend that adds bouncers, as containers running
// image, to the network of a docker stack another process started (its
// Env names both). The containers carry this process's owner labels, so
// the next docker stack removes them if this process is killed; the network
// stays its owner's.
func attachDocker(ctx context.Context, opts Options, network, image string) (backend, error) {
	if _, err := prepareRyuk(ctx, opts.Logger); err != nil {
		return nil, err
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if _, err := cli.NetworkInspect(ctx, network, client.NetworkInspectOptions{}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker network %s from %s: %s; start the shared stack again (doublerun stack up)", network, EnvDockerNetwork, firstLine(err))
	}
	labels := self().labels()
	labels[LabelStack] = randomPassword()[:12]
	return &dockerBackend{id: labels[LabelStack], labels: labels, logger: opts.Logger, cli: cli, netName: network, pgbouncerImage: image}, nil
}

// sharedEnv names this stack's network and bouncer image in Env, so that
// an external stack built from Env adds its bouncers as containers beside
// this stack's (attachDocker) rather than as local processes.
func (b *dockerBackend) sharedEnv() []string {
	return []string{EnvDockerNetwork + "=" + b.netName, EnvDockerPgBouncerImage + "=" + b.pgbouncerImage}
}

// sweepDocker removes the containers and networks of docker stacks whose
// owner has died. Close removes a stack's own, and so does Ryuk where the
// engine can get it, but a SIGKILLed process with Ryuk off leaves its
// servers running; the next docker stack removes them. Anything whose owner
// may still run, or runs on another host, is left alone (owner.gone).
func sweepDocker(ctx context.Context, cli *testcontainers.DockerClient, me owner, log *slog.Logger) {
	f := client.Filters{}.Add("label", LabelOwnerPID)
	ctrs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		log.Debug("sweep: list containers", "err", err)
		return
	}
	removed := map[string][]string{} // stack ID -> container names
	for _, c := range ctrs.Items {
		o := ownerFromLabels(c.Labels)
		if !o.gone(me) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			log.Debug("sweep: remove container", "id", c.ID, "err", err)
			continue
		}
		removed[c.Labels[LabelStack]] = append(removed[c.Labels[LabelStack]], strings.TrimPrefix(strings.Join(c.Names, ","), "/"))
	}
	nets, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		log.Debug("sweep: list networks", "err", err)
		return
	}
	for _, n := range nets.Items {
		if !ownerFromLabels(n.Labels).gone(me) {
			continue
		}
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil {
			log.Debug("sweep: remove network", "name", n.Name, "err", err)
			continue
		}
		id := n.Labels[LabelStack]
		log.Info("removed a docker stack whose owner died", "stack", id, "owner_pid", n.Labels[LabelOwnerPID],
			"containers", len(removed[id]), "network", n.Name)
		delete(removed, id)
	}
	for id, names := range removed {
		log.Info("removed a docker stack whose owner died", "stack", id, "containers", len(names))
	}
}

func (b *dockerBackend) request(image string, alias string, containerPort, hostPort int) testcontainers.ContainerRequest {
	port := network.MustParsePort(fmt.Sprintf("%d/tcp", containerPort))
	return testcontainers.ContainerRequest{
		Image:          image,
		ExposedPorts:   []string{port.String()},
		Labels:         maps.Clone(b.labels),
		Networks:       []string{b.netName},
		NetworkAliases: map[string][]string{b.netName: {alias}},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hostPort)}}}
		},
	}
}

func (b *dockerBackend) run(ctx context.Context, name string, req testcontainers.ContainerRequest) (*dockerNode, error) {
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: slogPrintf{b.logger},
	})
	var n *dockerNode
	if ctr != nil {
		n = &dockerNode{name: name, ctr: ctr, cli: b.cli}
	}
	if err != nil {
		return n, fmt.Errorf("docker: start from image %s: %w%s", req.Image, err, imageHint(err))
	}
	return n, nil
}

func (b *dockerBackend) startPostgres(ctx context.Context, user, password, db string) (node, string, int, error) {
	hostPort, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	req := b.postgresRequest(ctx, pgAlias, hostPort)
	req.Env = map[string]string{"POSTGRES_USER": user, "POSTGRES_PASSWORD": password, "POSTGRES_DB": db}
	n, err := b.run(ctx, "postgres", req)
	if n == nil {
		return nil, "", 0, err
	}
	return n, "127.0.0.1", hostPort, err
}

// postgresRequest is a Postgres container called alias on the stack's
// network, published on hostPort of loopback, with its data on a volume;
// args are settings beside the stack's usual ones, which they override.
func (b *dockerBackend) postgresRequest(ctx context.Context, alias string, hostPort int, args ...string) testcontainers.ContainerRequest {
	req := b.request(b.postgresImage, alias, pgPort, hostPort)
	req.Cmd = append([]string{"postgres", "-c", "max_connections=300", "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off"}, args...)
	// The data goes on an anonymous volume, removed with the container.
	// In the container's own filesystem every write and open of a data
	// file goes through the storage driver; on a fuse-overlayfs engine
	// that daemon took more CPU than the tests and Postgres together, and
	// CREATE DATABASE took 5.4-9.0 s for 20 databases instead of 2.6 s.
	// A volume survives the container's stop and start, as a restart
	// needs. Caught by TestDockerKeepsItsDataOnAVolume.
	pgdata := b.pgdata(ctx)
	modify := req.HostConfigModifier
	req.HostConfigModifier = func(hc *container.HostConfig) {
		modify(hc)
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: pgdata})
	}
	return req
}

// defaultPGDATA is where the official Postgres images and doublerun's
// own keep the data.
const defaultPGDATA = "/var/lib/postgresql/data"

// pgdata is where the Postgres image keeps its data: the PGDATA of its
// environment, else defaultPGDATA.
func (b *dockerBackend) pgdata(ctx context.Context) string {
	res, err := b.cli.ImageInspect(ctx, b.postgresImage)
	if err != nil || res.Config == nil {
		return defaultPGDATA
	}
	return pgdataOf(res.Config.Env)
}

// pgdataOf is the PGDATA of an image's environment, else defaultPGDATA.
func pgdataOf(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PGDATA="); ok && v != "" {
			return v
		}
	}
	return defaultPGDATA
}

func (b *dockerBackend) startPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (node, string, int, error) {
	hostPort, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	cfg.ListenAddr = "0.0.0.0"
	cfg.ListenPort = bouncerPort
	cfg.AuthFile = bouncerUsers
	cfg.Databases = bouncerDatabases(cfg.Databases, cmp.Or(b.fwdHost, pgAlias), cmp.Or(b.fwdPort, pgPort))
	ini, err := cfg.Ini()
	if err != nil {
		return nil, "", 0, err
	}
	req := b.request(b.pgbouncerImage, name, bouncerPort, hostPort)
	req.Entrypoint = []string{"pgbouncer"}
	req.Cmd = []string{bouncerConfig}
	req.Files = []testcontainers.ContainerFile{
		{Reader: strings.NewReader(ini), ContainerFilePath: bouncerConfig, FileMode: 0o644},
		{Reader: strings.NewReader(cfg.Userlist()), ContainerFilePath: bouncerUsers, FileMode: 0o644},
	}
	n, err := b.run(ctx, "pgbouncer "+name, req)
	if n == nil {
		return nil, "", 0, err
	}
	return n, "127.0.0.1", hostPort, err
}

func (b *dockerBackend) close(ctx context.Context) error {
	if b.cli != nil {
		defer b.cli.Close()
	}
	if b.net == nil {
		return nil
	}
	if err := b.net.Remove(ctx); err != nil {
		return fmt.Errorf("docker: remove network %s: %w", b.netName, err)
	}
	return nil
}

type dockerNode struct {
	name string
	ctr  testcontainers.Container
	cli  *testcontainers.DockerClient

	mu         sync.Mutex
	stopSignal string // empty: the image's own
}

func (n *dockerNode) setPgBouncerVersion(version string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopSignal = signalName(pgbouncerStopSignal(version))
}

func (n *dockerNode) stop(ctx context.Context) error {
	n.mu.Lock()
	sig := n.stopSignal
	n.mu.Unlock()
	if sig != "" {
		// The stop signal of `docker stop` needs API 1.42; a kill works on
		// every engine, and the stop below then waits for the exit. If the
		// kill fails, the stop still stops it, with the image's signal.
		_, _ = n.cli.ContainerKill(ctx, n.ctr.GetContainerID(), client.ContainerKillOptions{Signal: sig})
	}
	timeout := 10 * time.Second
	if err := n.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("docker: stop %s: %w", n.name, err)
	}
	return nil
}

func (n *dockerNode) start(ctx context.Context) error {
	if err := n.ctr.Start(ctx); err != nil {
		return fmt.Errorf("docker: start %s: %w", n.name, err)
	}
	return nil
}

// exited returns an error once the container is no longer running.
func (n *dockerNode) exited() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.ctr.State(ctx)
	if err != nil || st.Running || st.Status == "created" {
		return nil
	}
	return fmt.Errorf("container %s (exit code %d)", st.Status, st.ExitCode)
}

func (n *dockerNode) terminate(ctx context.Context) error {
	if err := testcontainers.TerminateContainer(n.ctr, testcontainers.StopContext(ctx)); err != nil {
		return fmt.Errorf("docker: remove %s: %w", n.name, err)
	}
	return nil
}

func (n *dockerNode) logs(ctx context.Context) string {
	rc, err := n.ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	data, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	return fmt.Sprintf("--- %s container log ---\n%s", n.name, tail(data, 40))
}

// slogPrintf sends testcontainers' progress lines to slog at debug level,
// so they do not interleave with doublerun's own output.
type slogPrintf struct{ l *slog.Logger }

func (p slogPrintf) Printf(format string, v ...any) {
	p.l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "testcontainers")
}

func imageHint(err error) string {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "reaper") || strings.Contains(msg, "ryuk"):
		return "; the engine cannot get the Ryuk image: set " + envRyukDisabled + "=true"
	case strings.Contains(msg, "pull") || strings.Contains(msg, "not found") || strings.Contains(msg, "no such image") ||
		strings.Contains(msg, "registry") || strings.Contains(msg, "manifest unknown"):
		return fmt.Sprintf("; the image is not present and cannot be pulled: unset %s and %s to let doublerun pick (and build) images, or use %s=native", EnvPostgresImage, EnvPgBouncerImage, EnvProvider)
	}
	return ""
}

// dockerRoute starts a docker backend with the images resolveImages picks.
func dockerRoute(ctx context.Context, opts Options) (backend, string, error) {
	note, err := prepareRyuk(ctx, opts.Logger)
	if err != nil {
		return nil, "", err
	}
	if err := dockerAvailable(ctx); err != nil {
		return nil, "", fmt.Errorf("docker engine not answering (%s); start Docker or set DOCKER_HOST, or use %s=native", firstLine(err), EnvProvider)
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("docker: %w", err)
	}
	imgs, err := resolveImages(ctx, opts, cli)
	if err != nil {
		cli.Close()
		return nil, "", err
	}
	b, err := newDockerBackend(ctx, opts, cli, imgs)
	if err != nil {
		cli.Close()
		return nil, "", err
	}
	return b, imgs.route + note, nil
}
