package stack

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/doublerun/doublerun/pgbouncer"
)

// EnvVersions names the version set a stack runs, such as
// "pg15-pgbouncer1.18"; see [VersionSets].
const EnvVersions = "DOUBLERUN_VERSIONS"

// VersionSet is a pair of server versions a stack can run, with the images
// the docker provider runs it from. Public images are pulled from a registry;
// local images are built from Debian packages by images/build.sh when no
// registry is reachable (see the package documentation).
type VersionSet struct {
	// Name is "pg<major>-pgbouncer<major.minor>", such as "pg17-pgbouncer1.24".
	Name string
	// Postgres is the Postgres major version, such as "17".
	Postgres string
	// PgBouncer is the PgBouncer release series, such as "1.24".
	PgBouncer string
	// PublicPostgresImage and PublicPgBouncerImage are pinned registry images.
	PublicPostgresImage  string
	PublicPgBouncerImage string
	// LocalPostgresImage and LocalPgBouncerImage are the images images/build.sh
	// builds; Suite is the Debian suite they are built from.
	LocalPostgresImage  string
	LocalPgBouncerImage string
	Suite               string
}

// versionSets lists every set, oldest first. images/build.sh has the same
// table (TestBuildScriptKnowsEveryVersionSet keeps them equal).
var versionSets = []VersionSet{
	{
		Name: "pg15-pgbouncer1.18", Postgres: "15", PgBouncer: "1.18",
		PublicPostgresImage: "postgres:15.13-bookworm", PublicPgBouncerImage: "edoburu/pgbouncer:1.18.0",
		LocalPostgresImage: "doublerun/postgres:15-local", LocalPgBouncerImage: "doublerun/pgbouncer:1.18-local",
		Suite: "bookworm",
	},
	{
		Name: "pg17-pgbouncer1.24", Postgres: "17", PgBouncer: "1.24",
		PublicPostgresImage: "postgres:17.6-trixie", PublicPgBouncerImage: "edoburu/pgbouncer:v1.24.1-p1",
		LocalPostgresImage: "doublerun/postgres:17-local", LocalPgBouncerImage: "doublerun/pgbouncer:1.24-local",
		Suite: "trixie",
	},
}

// DefaultVersions is the version set a stack runs when none is asked for:
// the newest.
var DefaultVersions = versionSets[len(versionSets)-1].Name

// VersionSets returns every version set, oldest first.
func VersionSets() []VersionSet { return append([]VersionSet(nil), versionSets...) }

// LookupVersionSet returns the version set called name.
func LookupVersionSet(name string) (VersionSet, error) {
	for _, s := range versionSets {
		if s.Name == name {
			return s, nil
		}
	}
	names := strings.Join(versionSetNames(), ", ")
	if name == "all" {
		return VersionSet{}, fmt.Errorf("version set %q is for the chaos matrix; a stack runs one set: use one of %s", name, names)
	}
	return VersionSet{}, fmt.Errorf("unknown version set %q; use one of %s", name, names)
}

func versionSetNames() []string {
	var names []string
	for _, s := range versionSets {
		names = append(names, s.Name)
	}
	return names
}

// Versions names the exact server versions a stack runs, read from the
// running servers, so that a report can name them.
type Versions struct {
	// Set is the version set name derived from what runs, such as
	// "pg15-pgbouncer1.18", also for native binaries and custom images.
	Set string
	// Postgres is Postgres' server_version, such as
	// "15.13 (Debian 15.13-0+deb12u1)".
	Postgres string
	// PgBouncer is the version of the stack's PgBouncers, such as "1.18.0".
	PgBouncer string
}

func (v Versions) String() string {
	return fmt.Sprintf("%s (Postgres %s, PgBouncer %s)", v.Set, v.Postgres, v.PgBouncer)
}

var pgMajorRE = regexp.MustCompile(`^(\d+)`)

// setName derives a version set name from a Postgres server_version and a
// PgBouncer version; a part it cannot read shows as "?".
func setName(postgres, bouncer string) string {
	pg := "?"
	if m := pgMajorRE.FindStringSubmatch(strings.TrimSpace(postgres)); m != nil {
		pg = m[1]
	}
	pgb := "?"
	if v, err := pgbouncer.ParseVersion(bouncer); err == nil {
		pgb = strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
	}
	return "pg" + pg + "-pgbouncer" + pgb
}
