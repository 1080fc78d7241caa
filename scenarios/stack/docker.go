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

// hostNetwork is the name of the engine's own network that shares the
// host's network namespace.
const hostNetwork = "host"

// dockerBackend runs each server as a container, on a Linux engine in the
// host's network namespace (hostNetwork), elsewhere on a private network
// with host ports bound to loopback. Either way each server listens on a
// fixed loopback port chosen up front, so DSNs survive a container's stop
// and start.
//
// On the host's network a client's connection reaches Postgres and
// PgBouncer as it left the client. Through published ports every byte
// passes Docker's userland port proxy, a process per port: in a chaos
// run it took two thirds of the Docker daemons' CPU (5.8 of 9.0
// core-seconds), and Postgres saw every client as the proxy, so no
// connection could be traced to the process that opened it
// (scenarios' traffic-path check reads them). Caught by
// TestDockerServersSeeTheirClientsAddresses.
type dockerBackend struct {
	id     string
	labels map[string]string // stack ID and owner
	logger *slog.Logger
	cli    *testcontainers.DockerClient // closed by close
	// net is the network this backend created and close removes; nil on
	// the host's network and for a backend attached to another stack's
	// network (attachDocker).
	net            *testcontainers.DockerNetwork
	netName        string
	postgresImage  string
	pgbouncerImage string
	// local: the images are doublerun's own (dockerImages.local).
	local bool
	// pgPort is Postgres's port on the host's network, where a bouncer
	// reaches it; 0 on a private network, where it is pgAlias:pgPort.
	pgPort int
	// fwdHost and fwdPort are where bouncers forward to when
	// forwardBouncers set them (an HA stack's router); otherwise the
	// stack's Postgres: pgAlias:pgPort on a private network, 127.0.0.1
	// and pgPort on the host's.
	fwdHost string
	fwdPort int
}

// onHost reports whether the backend's containers share the host's
// network.
func (b *dockerBackend) onHost() bool { return b.netName == hostNetwork }

// hostNetworking reports whether containers of the engine behind cli can
// share this host's network: a Linux engine that is not Docker Desktop's
// virtual machine (whose "host" is the VM, not this machine).
func hostNetworking(ctx context.Context, cli *testcontainers.DockerClient) bool {
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return false
	}
	return info.Info.OSType == "linux" && !strings.Contains(info.Info.OperatingSystem, "Docker Desktop")
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
	b := &dockerBackend{id: id, labels: labels, logger: opts.Logger, cli: cli, netName: hostNetwork, postgresImage: imgs.postgres, pgbouncerImage: imgs.pgbouncer, local: imgs.local}
	if !opts.dockerBridge && hostNetworking(ctx, cli) {
		return b, nil
	}
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(labels))
	if err != nil {
		return nil, fmt.Errorf("docker: create network: %w%s", err, imageHint(err))
	}
	b.net, b.netName = nw, nw.Name
	return b, nil
}

// attachDocker returns a backend that adds bouncers, as containers running
// image, to the network of a docker stack another process started (its
// Env names both), in front of that stack's Postgres at pgPort on the
// host's network. The containers carry this process's owner labels, so
// the next docker stack removes them if this process is killed; the network
// stays its owner's.
func attachDocker(ctx context.Context, opts Options, network, image string, pgPort int) (backend, error) {
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
	b := &dockerBackend{id: labels[LabelStack], labels: labels, logger: opts.Logger, cli: cli, netName: network, pgbouncerImage: image}
	if b.onHost() {
		b.pgPort = pgPort
	}
	return b, nil
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

// request is the container request of a server listening on hostPort of
// the host's loopback: on the host's network it listens there itself
// (the caller tells it to), elsewhere containerPort is published there.
func (b *dockerBackend) request(image string, alias string, containerPort, hostPort int) testcontainers.ContainerRequest {
	if b.onHost() {
		return testcontainers.ContainerRequest{
			Image:        image,
			ExposedPorts: []string{network.MustParsePort(fmt.Sprintf("%d/tcp", hostPort)).String()},
			Labels:       maps.Clone(b.labels),
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = hostNetwork
			},
		}
	}
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
	if b.onHost() {
		b.pgPort = hostPort
	}
	n, err := b.run(ctx, "postgres", req)
	if n == nil {
		return nil, "", 0, err
	}
	return n, "127.0.0.1", hostPort, err
}

// postgresRequest is a Postgres container called alias listening on
// hostPort of loopback (on the host's network itself, or published from a
// private one), with its data on a volume; args are settings beside the
// stack's usual ones, which they override.
func (b *dockerBackend) postgresRequest(ctx context.Context, alias string, hostPort int, args ...string) testcontainers.ContainerRequest {
	req := b.request(b.postgresImage, alias, pgPort, hostPort)
	req.Cmd = []string{"postgres", "-c", "max_connections=300", "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off"}
	if b.onHost() {
		req.Cmd = append(req.Cmd, "-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(hostPort))
	}
	req.Cmd = append(req.Cmd, args...)
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
	if b.onHost() {
		cfg.ListenAddr, cfg.ListenPort = "127.0.0.1", hostPort
		cfg.Databases = bouncerDatabases(cfg.Databases, cmp.Or(b.fwdHost, "127.0.0.1"), cmp.Or(b.fwdPort, b.pgPort))
	} else {
		cfg.ListenAddr, cfg.ListenPort = "0.0.0.0", bouncerPort
		cfg.Databases = bouncerDatabases(cfg.Databases, cmp.Or(b.fwdHost, pgAlias), cmp.Or(b.fwdPort, pgPort))
	}
	cfg.AuthFile = bouncerUsers
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
