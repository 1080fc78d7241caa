package stack

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// Provider names where a stack's servers come from.
type Provider string

// The providers. See the package documentation.
const (
	ProviderAuto     Provider = "auto"
	ProviderDocker   Provider = "docker"
	ProviderNative   Provider = "native"
	ProviderExternal Provider = "external"
)

// Environment variables read by [Options.FromEnv] and the external provider.
const (
	EnvProvider            = "DOUBLERUN_PROVIDER"
	EnvPostgresImage       = "DOUBLERUN_POSTGRES_IMAGE"
	EnvPgBouncerImage      = "DOUBLERUN_PGBOUNCER_IMAGE"
	EnvTransactionPoolSize = "DOUBLERUN_TRANSACTION_POOL_SIZE"
	EnvPostgresBinDir      = "DOUBLERUN_POSTGRES_BINDIR"
	EnvPgBouncerBin        = "DOUBLERUN_PGBOUNCER_BIN"

	EnvPostgresDSN         = "DOUBLERUN_POSTGRES_DSN"
	EnvSessionDSN          = "DOUBLERUN_SESSION_DSN"
	EnvSessionAdminDSN     = "DOUBLERUN_SESSION_ADMIN_DSN"
	EnvTransactionDSN      = "DOUBLERUN_TRANSACTION_DSN"
	EnvTransactionAdminDSN = "DOUBLERUN_TRANSACTION_ADMIN_DSN"

	// EnvDockerNetwork and EnvDockerPgBouncerImage come with the DSNs of a
	// docker stack (Stack.Env): an external stack built from them adds its
	// bouncers as containers of that image on that network, beside the
	// stack's own, instead of as local processes.
	EnvDockerNetwork        = "DOUBLERUN_DOCKER_NETWORK"
	EnvDockerPgBouncerImage = "DOUBLERUN_DOCKER_PGBOUNCER_IMAGE"

	// EnvSharedStack, set to 1 beside a stack's DSNs, says that they name
	// one stack shared by a whole test run (`make test`): stacktest.Shared
	// reaches it through the external provider, while tests that start a
	// stack of their own, or test a provider, still use DOUBLERUN_PROVIDER.
	EnvSharedStack = "DOUBLERUN_SHARED_STACK"
)

// Options configure Start. Zero values take the defaults noted per field.
type Options struct {
	// Provider defaults to auto.
	Provider Provider
	// TransactionPoolSize is default_pool_size of the transaction bouncer;
	// default 1, the size at which issue #556 reproduces.
	TransactionPoolSize int
	// SessionPoolSize is default_pool_size of the session bouncer; default 20.
	SessionPoolSize int
	// Versions is the version set, such as "pg15-pgbouncer1.18" (see
	// VersionSets); default DefaultVersions, the newest. It picks the docker
	// provider's images; the native provider runs the host's binaries and
	// the external one whatever it is given.
	Versions string
	// PostgresImage and PgBouncerImage override the docker provider's
	// images and are used exactly as given. Default: the version set's
	// public images when they can be pulled, else its local images, built
	// on first use.
	PostgresImage  string
	PgBouncerImage string
	// PostgresBinDir is where the native provider finds initdb and
	// postgres; default: PATH, then the newest /usr/lib/postgresql/*/bin.
	PostgresBinDir string
	// PgBouncerBin is the native provider's pgbouncer; default: PATH, then
	// /usr/sbin/pgbouncer.
	PgBouncerBin string
	// Logger receives progress; default discards.
	Logger *slog.Logger

	// lookupEnv lets tests supply the environment; default os.LookupEnv.
	lookupEnv func(string) (string, bool)
	// versionSet is Versions resolved; versionsAsked says whether the
	// caller or the environment named it.
	versionSet    VersionSet
	versionsAsked bool
}

// FromEnv returns opts with every unset field filled from DOUBLERUN_*
// environment variables. Start calls it, so callers rarely need to.
func (o Options) FromEnv() (Options, error) {
	get := o.getenv
	if o.Provider == "" {
		o.Provider = Provider(strings.TrimSpace(get(EnvProvider)))
	}
	o.Provider = cmp.Or(o.Provider, ProviderAuto)
	switch o.Provider {
	case ProviderAuto, ProviderDocker, ProviderNative, ProviderExternal:
	default:
		return o, fmt.Errorf("unknown provider %q (from %s or Options.Provider); use auto, docker, native or external", o.Provider, EnvProvider)
	}
	if o.TransactionPoolSize == 0 {
		if v := get(EnvTransactionPoolSize); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return o, fmt.Errorf("%s=%q is not a positive integer; unset it or set a pool size such as 1", EnvTransactionPoolSize, v)
			}
			o.TransactionPoolSize = n
		}
	}
	o.TransactionPoolSize = cmp.Or(o.TransactionPoolSize, 1)
	o.SessionPoolSize = cmp.Or(o.SessionPoolSize, 20)
	o.Versions = cmp.Or(o.Versions, strings.TrimSpace(get(EnvVersions)))
	o.versionsAsked = o.versionsAsked || o.Versions != ""
	o.Versions = cmp.Or(o.Versions, DefaultVersions)
	set, err := LookupVersionSet(o.Versions)
	if err != nil {
		return o, err
	}
	o.versionSet = set
	o.PostgresImage = cmp.Or(o.PostgresImage, strings.TrimSpace(get(EnvPostgresImage)))
	o.PgBouncerImage = cmp.Or(o.PgBouncerImage, strings.TrimSpace(get(EnvPgBouncerImage)))
	o.PostgresBinDir = cmp.Or(o.PostgresBinDir, get(EnvPostgresBinDir))
	o.PgBouncerBin = cmp.Or(o.PgBouncerBin, get(EnvPgBouncerBin))
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

func (o Options) getenv(k string) string {
	lookup := o.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, _ := lookup(k)
	return v
}
