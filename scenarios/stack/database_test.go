package stack

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A test database is copied file by file wherever the server has the
// clause, and the clause is left out where it would be a syntax error.
func TestCopyStrategy(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{
		"17.12 (Debian 17.12-0+deb13u1)": " STRATEGY FILE_COPY",
		"15.18 (Debian 15.18-0+deb12u1)": " STRATEGY FILE_COPY",
		"14.13":                          "",
		"13.0":                           "",
		"":                               "",
	} {
		require.Equal(t, want, copyStrategy(v), "server_version %q", v)
	}
}
