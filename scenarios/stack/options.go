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
	// Replication, when set, makes the stack an HA pair: a primary and a
	// streaming standby behind one address the stack repoints when the
	// standby is promoted, with the oracle on a third server no failover
	// touches (see "Failover" in the package documentation). Default: one
	// Postgres, no standby. The docker and native providers can start one.
	Replication ReplicationMode
	// Logger receives progress; default discards.
	Logger *slog.Logger

	// lookupEnv lets tests supply the environment; default os.LookupEnv.
	lookupEnv func(string) (string, bool)
	// LookupEnv, if set, is the environment the stack reads its
	// variables from instead of the process's: for a stack of a test's
	// own exported as an external one (Stack.Env).
	LookupEnv func(string) (string, bool)
	// dockerBridge puts a docker stack on a private network with published
	// ports even where its containers could share the host's network, as
	// on engines that cannot (Docker Desktop), so tests cover that path.
	dockerBridge bool
	// versionSet is Versions resolved; versionsAsked says whether the
	// caller or the environment named it.
	versionSet    VersionSet
	versionsAsked bool
}

// FromEnv returns o with each field it leaves unset that a DOUBLERUN_*
// environment variable names read from that variable. A variable whose
// value it cannot take is an *EnvError naming it. It reads the
// environment and nothing else: Start then applies the defaults and checks
// what it was given (resolve), so callers need it only to find a bad
// variable before anything starts.
func (o Options) FromEnv() (Options, error) {
	get := o.getenv
	if o.Provider == "" {
		if v := strings.TrimSpace(get(EnvProvider)); v != "" {
			if !knownProvider(Provider(v)) {
				return o, &EnvError{Var: EnvProvider, msg: fmt.Sprintf("%s=%q is not a provider; use auto, docker, native or external, or unset it for auto", EnvProvider, v)}
			}
			o.Provider = Provider(v)
		}
	}
	if o.TransactionPoolSize == 0 {
		if v := get(EnvTransactionPoolSize); v != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				err = CheckPoolSize(n)
			}
			if err != nil {
				return o, &EnvError{Var: EnvTransactionPoolSize, msg: fmt.Sprintf("%s=%q is not a pool size from 1 to %d (%s); unset it or set one such as 1", EnvTransactionPoolSize, v, MaxPoolSize, MaxPoolSizeWhy)}
			}
			o.TransactionPoolSize = n
		}
	}
	if o.Versions == "" {
		if v := strings.TrimSpace(get(EnvVersions)); v != "" {
			if _, err := LookupVersionSet(v); err != nil {
				return o, &EnvError{Var: EnvVersions, msg: fmt.Sprintf("%s: %v, or unset it for %s, the newest", EnvVersions, err, DefaultVersions)}
			}
			o.Versions = v
		}
	}
	o.versionsAsked = o.versionsAsked || o.Versions != ""
	o.PostgresImage = cmp.Or(o.PostgresImage, strings.TrimSpace(get(EnvPostgresImage)))
	o.PgBouncerImage = cmp.Or(o.PgBouncerImage, strings.TrimSpace(get(EnvPgBouncerImage)))
	o.PostgresBinDir = cmp.Or(o.PostgresBinDir, get(EnvPostgresBinDir))
	o.PgBouncerBin = cmp.Or(o.PgBouncerBin, get(EnvPgBouncerBin))
	return o, nil
}

// withDefaults returns o with every zero field at its default.
func (o Options) withDefaults() Options {
	o.Provider = cmp.Or(o.Provider, ProviderAuto)
	o.TransactionPoolSize = cmp.Or(o.TransactionPoolSize, 1)
	o.SessionPoolSize = cmp.Or(o.SessionPoolSize, 20)
	o.Versions = cmp.Or(o.Versions, DefaultVersions)
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	return o
}

// validate says what is wrong with o, defaults applied, as given by code:
// a value from the environment was checked where it was read (FromEnv).
func (o Options) validate() error {
	if !knownProvider(o.Provider) {
		return fmt.Errorf("unknown provider %q; use auto, docker, native or external", o.Provider)
	}
	// What a user types is held to MaxPoolSize where it is read (the
	// variable, --tx-pool-size, a scenario, chaos); a program may ask for
	// more, as make bench does for throughput.
	if o.TransactionPoolSize < 1 {
		return fmt.Errorf("transaction pool size %d is below 1", o.TransactionPoolSize)
	}
	if err := o.Replication.Check(); err != nil {
		return err
	}
	_, err := LookupVersionSet(o.Versions)
	return err
}

// resolve is what Start and Prepare make of o: the environment (FromEnv),
// then the defaults, then the check, and the version set o names.
func (o Options) resolve() (Options, error) {
	o, err := o.FromEnv()
	if err != nil {
		return o, err
	}
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return o, err
	}
	o.versionSet, _ = LookupVersionSet(o.Versions) // validated
	return o, nil
}

func knownProvider(p Provider) bool {
	switch p {
	case ProviderAuto, ProviderDocker, ProviderNative, ProviderExternal:
		return true
	}
	return false
}

// EnvError is an environment variable whose value doublerun cannot take
// (an unknown name, a malformed number or DSN, a value out of range, or a
// required one left unset). Its message names the variable and what it
// takes. The doublerun command exits 2 on it, as on a bad flag: the fix
// is in the caller's hands, not in a server.
type EnvError struct {
	// Var is the variable's name, such as DOUBLERUN_PROVIDER.
	Var string
	msg string
}

func (e *EnvError) Error() string { return e.msg }

// MaxPoolSize is the largest transaction pool a stack's bouncer, a
// scenario or a chaos cell may ask for. A scenario runs at most 8
// replicas with 2 work connections each, so a larger pool gives no run
// anything more to measure, and a value such as 1000000 is a typo; the
// bound also keeps every test database's pools well inside Postgres's
// max_connections of 300.
const MaxPoolSize = 16

// MaxPoolSizeWhy says in an error message why there is a MaxPoolSize.
const MaxPoolSizeWhy = "a run has at most 8 replicas with 2 work connections each, so a larger pool changes nothing"

// CheckPoolSize says what is wrong with a transaction pool size: nil when
// it is from 1 to MaxPoolSize, else the range and why. Every place that
// takes a pool size (DOUBLERUN_TRANSACTION_POOL_SIZE, `stack up
// --tx-pool-size`, a scenario's pool_size, chaos's --pool-sizes) checks it
// here.
func CheckPoolSize(n int) error {
	if n < 1 || n > MaxPoolSize {
		return fmt.Errorf("%d is not from 1 to %d; %s", n, MaxPoolSize, MaxPoolSizeWhy)
	}
	return nil
}

func (o Options) getenv(k string) string {
	lookup := o.lookupEnv
	if lookup == nil {
		lookup = o.LookupEnv
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, _ := lookup(k)
	return v
}
