package stack

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// errNoDocker is what the docker provider says in a binary built with the
// doublerun_nodocker tag (docker_off.go).
var errNoDocker = errors.New("this binary was built with the doublerun_nodocker tag, which leaves the docker provider out; rebuild without it, or use " + EnvProvider + "=native or external")

// selectBackend builds the backend for opts.Provider, resolving auto, and
// logs the route it took in one line (the package documentation lists the
// routes).
func selectBackend(ctx context.Context, opts Options) (backend, Provider, error) {
	switch opts.Provider {
	case ProviderDocker:
		b, route, err := dockerRoute(ctx, opts)
		if err != nil {
			return nil, ProviderDocker, err
		}
		opts.Logger.Info("stack route: " + route)
		return b, ProviderDocker, nil
	case ProviderNative:
		b, route, err := nativeRoute(ctx, opts, "")
		if err != nil {
			return nil, ProviderNative, err
		}
		opts.Logger.Info("stack route: " + route)
		return b, ProviderNative, nil
	case ProviderAuto:
		return autoRoute(ctx, opts)
	}
	return nil, opts.Provider, fmt.Errorf("provider %q cannot start servers", opts.Provider)
}

// autoRoute takes the first route that works: docker (public images, else
// local ones built on first use), then native binaries (installed first
// where that can be done). With doublerun's local images, as root, on an
// engine of this machine, the docker route's servers run as native
// processes on the image's filesystem (imageRootRoute).
func autoRoute(ctx context.Context, opts Options) (backend, Provider, error) {
	var dockerErr error
	if _, err := prepareRyuk(ctx, opts.Logger); err != nil {
		dockerErr = err
	} else if err := dockerAvailable(ctx); err != nil {
		dockerErr = fmt.Errorf("no Docker engine answers: %s", firstLine(err))
	} else {
		b, route, err := dockerRoute(ctx, opts)
		if err == nil {
			nb, rootErr := imageRootRoute(ctx, opts, b)
			if nb != nil {
				opts.Logger.Info("stack route: " + nb.describe(ctx, opts))
				return nb, ProviderNative, nil
			}
			if rootErr != nil {
				// imageRootRoute closed b: take the containers' route afresh.
				if b, route, err = dockerRoute(ctx, opts); err != nil {
					return nil, ProviderAuto, err
				}
				route += "; each server in a container, since its image could not lend its filesystem: " + firstLine(rootErr)
			}
			opts.Logger.Info("stack route: " + route)
			return b, ProviderDocker, nil
		}
		dockerErr = fmt.Errorf("the Docker engine answers but %w", err)
	}
	b, route, nativeErr := nativeRoute(ctx, opts, firstLine(dockerErr))
	if nativeErr != nil {
		return nil, ProviderAuto, fmt.Errorf("no provider can start a stack: docker: %s; native: %s", firstLine(dockerErr), firstLine(nativeErr))
	}
	opts.Logger.Info("stack route: " + route + "; " + firstLine(dockerErr))
	return b, ProviderNative, nil
}

// nativeRoute starts a native backend. When the binaries are missing, it
// installs them where it can (root with apt-get) and otherwise returns the
// command to run. why says why the native route is taken, for the install
// line.
func nativeRoute(ctx context.Context, opts Options, why string) (*nativeBackend, string, error) {
	b, err := newNativeBackend(opts)
	var missing *missingBinaryError
	if errors.As(err, &missing) {
		if err := installNative(ctx, opts.Logger, opts, why); err != nil {
			return nil, "", err
		}
		b, err = newNativeBackend(opts)
	}
	if err != nil {
		return nil, "", err
	}
	return b, b.describe(ctx, opts), nil
}

// Prepare does what the first Start with opts would do before it starts
// servers: it picks the route (logging it in one line through
// opts.Logger), pulls or builds images, or installs packages. A command that
// starts many stacks in parallel processes, such as `go test ./...`, calls
// it first so that the route and any first-use build show once, up front.
// It does nothing for the external provider.
func Prepare(ctx context.Context, opts Options) error {
	opts, err := opts.resolve()
	if err != nil || opts.Provider == ProviderExternal {
		return err
	}
	b, _, err := selectBackend(ctx, opts)
	if err != nil {
		return err
	}
	return b.close(ctx)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
