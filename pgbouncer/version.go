package pgbouncer

import (
	"fmt"
	"regexp"
	"strconv"
)

// Version is a PgBouncer release number.
type Version struct{ Major, Minor, Patch int }

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

// ParseVersion reads the first dotted version in s, so it accepts "1.18.0",
// "PgBouncer 1.18.0" and the first line of `pgbouncer --version`.
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("no PgBouncer version in %q", s)
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	if m[3] != "" {
		v.Patch, _ = strconv.Atoi(m[3])
	}
	return v, nil
}

// Less reports whether v is an older release than o.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// SupportsPreparedStatements reports whether PgBouncer at version supports
// protocol-level prepared statements in transaction pooling (1.21 and later).
func SupportsPreparedStatements(version string) bool {
	v, err := ParseVersion(version)
	return err == nil && !v.Less(Version{1, 21, 0})
}
