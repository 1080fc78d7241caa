//go:build doublerun_nodocker

package stack

import (
	"context"
	"log/slog"
)

// Built with the doublerun_nodocker tag, the stack has no docker provider:
// testcontainers and the Docker client are left out of the binary. The
// mutation gate builds its test binaries this way, once per mutant, and
// their tests reach a stack that `doublerun stack up` started through the
// external provider, so linking the Docker client would only cost time.

func dockerAvailable(context.Context) error { return errNoDocker }

func prepareRyuk(context.Context, *slog.Logger) (string, error) { return "", errNoDocker }

func dockerRoute(context.Context, Options) (backend, string, error) {
	return nil, "", errNoDocker
}

func attachDocker(context.Context, Options, string, string, int) (backend, error) {
	return nil, errNoDocker
}

func imageRootRoute(context.Context, Options, backend) (*nativeBackend, error) { return nil, nil }
