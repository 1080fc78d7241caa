//go:build !doublerun_nodocker

package stack

import (
	"bufio"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// imageRecipes are the local images' recipes, embedded so that a stack
// started from any module that imports doublerun can build them on first use.
//
//go:embed images
var imageRecipes embed.FS

// envRyukDisabled is testcontainers' switch for its Ryuk reaper container.
const envRyukDisabled = "TESTCONTAINERS_RYUK_DISABLED"

// dockerImages is what a docker stack runs, and the route line that says so.
type dockerImages struct {
	postgres, pgbouncer string
	route               string
	// local says that both are doublerun's own images of one version
	// set, made from one filesystem that holds both servers (images/build.sh),
	// which an imageRoot can lend to native processes.
	local bool
}

// imageCache keeps the images resolved in this process, so that the stacks
// a test binary starts one after another probe and build only once.
var imageCache struct {
	sync.Mutex
	m map[[3]string]dockerImages
}

// resolveImages picks the docker provider's images. Image variables are used
// exactly as given. Otherwise the version set's public images are used when
// they are present or can be pulled, and its local images when not; missing
// or outdated local images are built first (images/build.sh).
func resolveImages(ctx context.Context, opts Options, cli *testcontainers.DockerClient) (dockerImages, error) {
	set := opts.versionSet
	key := [3]string{set.Name, opts.PostgresImage, opts.PgBouncerImage}
	imageCache.Lock()
	defer imageCache.Unlock()
	if imgs, ok := imageCache.m[key]; ok {
		return imgs, nil
	}
	imgs, err := pickImages(ctx, opts, cli)
	if err != nil {
		return imgs, err
	}
	if imageCache.m == nil {
		imageCache.m = map[[3]string]dockerImages{}
	}
	imageCache.m[key] = imgs
	return imgs, nil
}

func pickImages(ctx context.Context, opts Options, cli *testcontainers.DockerClient) (dockerImages, error) {
	set := opts.versionSet
	if opts.PostgresImage != "" && opts.PgBouncerImage != "" {
		return dockerImages{
			postgres: opts.PostgresImage, pgbouncer: opts.PgBouncerImage,
			route: fmt.Sprintf("docker with the images from %s and %s: %s and %s", EnvPostgresImage, EnvPgBouncerImage, opts.PostgresImage, opts.PgBouncerImage),
		}, nil
	}
	public := dockerImages{
		postgres:  cmp.Or(opts.PostgresImage, hubImage(set.PublicPostgresImage)),
		pgbouncer: cmp.Or(opts.PgBouncerImage, hubImage(set.PublicPgBouncerImage)),
	}
	pullErr := ensureImage(ctx, cli, opts.Logger, public.postgres)
	if pullErr == nil {
		pullErr = ensureImage(ctx, cli, opts.Logger, public.pgbouncer)
	}
	if pullErr == nil {
		public.route = fmt.Sprintf("docker with public images %s and %s (%s)", public.postgres, public.pgbouncer, set.Name)
		return public, nil
	}
	local := dockerImages{
		postgres:  cmp.Or(opts.PostgresImage, set.LocalPostgresImage),
		pgbouncer: cmp.Or(opts.PgBouncerImage, set.LocalPgBouncerImage),
	}
	local.local = local.postgres == set.LocalPostgresImage && local.pgbouncer == set.LocalPgBouncerImage
	if err := buildLocalImages(ctx, set, opts.Logger); err != nil {
		return dockerImages{}, fmt.Errorf("the public images cannot be pulled (%s) and the local images cannot be built: %w", pullErr, err)
	}
	local.route = fmt.Sprintf("docker with local images %s and %s (%s; public images cannot be pulled: %s)", local.postgres, local.pgbouncer, set.Name, pullErr)
	return local, nil
}

// imageAPI is the part of the Docker client ensureImage uses.
type imageAPI interface {
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImagePull(ctx context.Context, ref string, opts client.ImagePullOptions) (client.ImagePullResponse, error)
}

// ensureImage returns nil when ref is present or has been pulled, and the
// first line of the engine's answer when it cannot be pulled.
func ensureImage(ctx context.Context, cli imageAPI, log *slog.Logger, ref string) error {
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return nil
	}
	log.Debug("pulling image", "image", ref)
	begin := time.Now()
	resp, err := cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(ctx)
		resp.Close()
	}
	if err != nil {
		return fmt.Errorf("%s: %s", ref, strings.TrimPrefix(firstLine(err), "Error response from daemon: "))
	}
	log.Info("pulled image", "image", ref, "elapsed", time.Since(begin).Round(time.Second))
	return nil
}

// buildLocalImages runs the embedded images/build.sh for set. The script
// does nothing when images from the current recipe exist, and serialises
// builds across processes, so test binaries that start together build once.
// Its progress lines go to log.
func buildLocalImages(ctx context.Context, set VersionSet, log *slog.Logger) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("building them needs the docker CLI, which is not on PATH; install it, or set " + EnvPostgresImage + " and " + EnvPgBouncerImage + " to images the engine has")
	}
	dir, err := os.MkdirTemp("", "doublerun-recipes-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, imageRecipes); err != nil {
		return fmt.Errorf("unpack the image recipes: %w", err)
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "images", "build.sh"), set.Name)
	cmd.Env = append(os.Environ(), "DOUBLERUN_IMAGES_QUIET=1")
	out, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run images/build.sh: %w", err)
	}
	var last string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		last = strings.TrimPrefix(line, "images: ")
		log.Info("local images: " + last)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("images/build.sh %s: %s", set.Name, cmp.Or(last, err.Error()))
	}
	return nil
}

// ryuk remembers whether this process switched testcontainers' reaper off.
var ryuk struct {
	sync.Mutex
	decided bool
	note    string
	err     error
}

// prepareRyuk switches testcontainers' Ryuk reaper off for this process
// when the engine answers but cannot get the Ryuk image (no registry), so
// that stacks still start; doublerun removes its own containers, and the
// next stack sweeps what a killed process left (sweepDocker). A variable
// the user set is left as it is.
//
// testcontainers reads its configuration once per process, so this runs
// before any other testcontainers call, and talks to the engine the way the
// docker CLI does (DOCKER_HOST, else the default socket). When no engine
// answers it decides nothing, so a later stack can.
func prepareRyuk(ctx context.Context, log *slog.Logger) (string, error) {
	ryuk.Lock()
	defer ryuk.Unlock()
	if ryuk.decided {
		return ryuk.note, ryuk.err
	}
	if _, set := os.LookupEnv(envRyukDisabled); set {
		ryuk.decided = true
		return "", nil
	}
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return "", nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return "", nil // testcontainers may find an engine of its own; it decides
	}
	ryuk.decided = true
	img := hubImage(testcontainers.ReaperDefaultImage) //nolint:staticcheck // the image testcontainers runs
	if ensureImage(ctx, cli, log, img) == nil {
		return "", nil
	}
	os.Setenv(envRyukDisabled, "true")
	if !testcontainers.ReadConfig().RyukDisabled {
		ryuk.err = fmt.Errorf("the engine cannot get the Ryuk image %s and testcontainers was configured before doublerun could switch Ryuk off; set %s=true", img, envRyukDisabled)
		return "", ryuk.err
	}
	ryuk.note = fmt.Sprintf("; without Ryuk (the engine cannot get %s): doublerun removes its own containers", img)
	return ryuk.note, nil
}

// hubImage is ref as testcontainers pulls it: with
// TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX in front of a Docker Hub image.
func hubImage(ref string) string {
	prefix := os.Getenv("TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX")
	first, _, hasSlash := strings.Cut(ref, "/")
	if prefix == "" || (hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost")) {
		return ref
	}
	return strings.TrimSuffix(prefix, "/") + "/" + ref
}
