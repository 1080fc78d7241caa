package stack

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionsNoteSaysWhenTheServersAreNotTheSetAsked(t *testing.T) {
	t.Parallel()
	running := func(asked string) *Stack {
		s := &Stack{provider: ProviderNative, asked: asked, bouncers: map[string]*bouncer{
			TransactionName: {ep: Endpoint{Name: TransactionName, Version: "1.18.0"}},
		}}
		s.postgres = Endpoint{Name: PostgresName, PostgresVersion: "15.14 (Debian 15.14-0+deb12u1)"}
		return s
	}
	for _, tc := range []struct{ name, asked, want string }{
		{"NoneAsked", "", ""},
		{"TheSetRuns", "pg15-pgbouncer1.18", ""},
		{"AnotherSetRuns", "pg17-pgbouncer1.24", "version set pg17-pgbouncer1.24 was asked for, but the native provider runs pg15-pgbouncer1.18 (its servers', not the set's)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := running(tc.asked)
			require.Equal(t, tc.asked, s.VersionsAsked())
			require.Equal(t, tc.want, s.VersionsNote())
		})
	}
}
