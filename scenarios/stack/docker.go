package stack

import (
	"context"

	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/doublerun/doublerun/pgbouncer"
)

// LabelStack is set on every container and network a docker stack creates,
// with the stack's ID as its value, so leftovers can be found and removed.
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
	id             string
	logger         *slog.Logger
	net            *testcontainers.DockerNetwork
	postgresImage  string
	pgbouncerImage string
}

// dockerAvailable reports whether a Docker engine answers, and if not why.
func dockerAvailable(ctx context.Context) (err error) {
	defer func() {
		// testcontainers panics when it finds no Docker host at all.
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
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

func newDockerBackend(ctx context.Context, opts Options) (*dockerBackend, error) {
	if err := dockerAvailable(ctx); err != nil {
		return nil, fmt.Errorf("docker engine not answering (%v); start Docker or set DOCKER_HOST, or use %s=native", firstLine(err), EnvProvider)
	}
	id := randomPassword()[:12]
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(map[string]string{LabelStack: id}))
	if err != nil {
		return nil, fmt.Errorf("docker: create network: %w%s", err, imageHint(err))
	}
	return &dockerBackend{id: id, logger: opts.Logger, net: nw, postgresImage: opts.PostgresImage, pgbouncerImage: opts.PgBouncerImage}, nil
}

func (b *dockerBackend) request(image string, alias string, containerPort, hostPort int) testcontainers.ContainerRequest {
	port := network.MustParsePort(fmt.Sprintf("%d/tcp", containerPort))
	return testcontainers.ContainerRequest{
		Image:          image,
		ExposedPorts:   []string{port.String()},
		Labels:         map[string]string{LabelStack: b.id},
		Networks:       []string{b.net.Name},
		NetworkAliases: map[string][]string{b.net.Name: {alias}},
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
		n = &dockerNode{name: name, ctr: ctr}
	}
	if err != nil {
		return n, fmt.Errorf("docker: start %s from image %s: %w%s", name, req.Image, err, imageHint(err))
	}
	return n, nil
}

func (b *dockerBackend) startPostgres(ctx context.Context, user, password, db string) (node, string, int, error) {
	hostPort, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	req := b.request(b.postgresImage, pgAlias, pgPort, hostPort)
	req.Env = map[string]string{"POSTGRES_USER": user, "POSTGRES_PASSWORD": password, "POSTGRES_DB": db}
	req.Cmd = []string{"postgres", "-c", "max_connections=300", "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off"}
	n, err := b.run(ctx, "postgres", req)
	if n == nil {
		return nil, "", 0, err
	}
	return n, "127.0.0.1", hostPort, err
}

func (b *dockerBackend) startPgBouncer(ctx context.Context, name string, cfg pgbouncer.Config) (node, string, int, error) {
	hostPort, err := freePort()
	if err != nil {
		return nil, "", 0, err
	}
	cfg.ListenAddr = "0.0.0.0"
	cfg.ListenPort = bouncerPort
	cfg.AuthFile = bouncerUsers
	cfg.Databases = bouncerDatabases(cfg.Databases, pgAlias, pgPort)
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
	if b.net == nil {
		return nil
	}
	if err := b.net.Remove(ctx); err != nil {
		return fmt.Errorf("docker: remove network %s: %w", b.net.Name, err)
	}
	return nil
}

type dockerNode struct {
	name string
	ctr  testcontainers.Container
}

func (n *dockerNode) stop(ctx context.Context) error {
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
	return fmt.Errorf("%s: container %s (exit code %d)", n.name, st.Status, st.ExitCode)
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
		return "; the engine cannot get the Ryuk image: set TESTCONTAINERS_RYUK_DISABLED=true"
	case strings.Contains(msg, "pull") || strings.Contains(msg, "not found") || strings.Contains(msg, "no such image"):
		return fmt.Sprintf("; the image is not present and cannot be pulled: run `make images` and set %s and %s to the local images, or use %s=native", EnvPostgresImage, EnvPgBouncerImage, EnvProvider)
	}
	return ""
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
