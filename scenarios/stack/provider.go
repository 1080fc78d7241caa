package stack

import (
	"context"
	"fmt"
)

// selectBackend builds the backend for opts.Provider, resolving auto.
func selectBackend(ctx context.Context, opts Options) (backend, Provider, error) {
	switch opts.Provider {
	case ProviderDocker:
		b, err := newDockerBackend(ctx, opts)
		return b, ProviderDocker, err
	case ProviderNative:
		b, err := newNativeBackend(opts)
		return b, ProviderNative, err
	case ProviderAuto:
		dockerErr := dockerAvailable(ctx)
		if dockerErr == nil {
			b, err := newDockerBackend(ctx, opts)
			return b, ProviderDocker, err
		}
		b, nativeErr := newNativeBackend(opts)
		if nativeErr == nil {
			opts.Logger.Info("docker engine not answering; using the native provider", "docker", firstLine(dockerErr))
			return b, ProviderNative, nil
		}
		return nil, ProviderAuto, fmt.Errorf("no provider can start a stack: docker: %s; native: %v. Install Docker (and run `make images` where no registry is reachable), or install postgresql-15 and pgbouncer", firstLine(dockerErr), nativeErr)
	}
	return nil, opts.Provider, fmt.Errorf("provider %q cannot start servers", opts.Provider)
}
