package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/doublerun/doublerun/lease"
	"github.com/doublerun/doublerun/pgbouncer"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// stack check fails on an endpoint that is not what its variable says, by
// its admin console or by its behaviour, and on nothing else: each row is
// an endpoint as the external provider describes it and what
// lease.CheckEndpoint made of it.
func TestStackCheckRoles(t *testing.T) {
	t.Parallel()
	rep := func(k lease.EndpointKind) lease.EndpointReport {
		return lease.EndpointReport{Endpoint: "127.0.0.1:6432/doublerun", Kind: k, Evidence: []string{"why"}}
	}
	pg := stack.Endpoint{Name: stack.PostgresName}
	session := stack.Endpoint{Name: stack.SessionName, PoolMode: pgbouncer.PoolSession}
	tx := stack.Endpoint{Name: stack.TransactionName, PoolMode: pgbouncer.PoolTransaction}
	txSession := stack.Endpoint{Name: stack.TransactionName, PoolMode: pgbouncer.PoolSession}
	sessionTx := stack.Endpoint{Name: stack.SessionName, PoolMode: pgbouncer.PoolTransaction}
	for _, tc := range []struct {
		name string
		ep   stack.Endpoint
		kind lease.EndpointKind
		want string // "" for no complaint
	}{
		{"PostgresDirect", pg, lease.EndpointDirect, ""},
		{"PostgresUnknown", pg, lease.EndpointUnknown, ""},
		{"PostgresBehindAPooler", pg, lease.EndpointPinned,
			"DOUBLERUN_POSTGRES_DSN (127.0.0.1:6432/doublerun) reaches a pooler, not Postgres itself (pinned: why); point it at Postgres"},
		{"PostgresBehindATransactionPool", pg, lease.EndpointTransactionPooled,
			"DOUBLERUN_POSTGRES_DSN (127.0.0.1:6432/doublerun) reaches a pooler, not Postgres itself (transaction-pooled: why); point it at Postgres"},
		{"SessionPinned", session, lease.EndpointPinned, ""},
		{"SessionProvenTransactionPooled", session, lease.EndpointTransactionPooled,
			"DOUBLERUN_SESSION_DSN (127.0.0.1:6432/doublerun) is not session-pooled (transaction-pooled: why); point it at the session-pooling bouncer"},
		{"SessionReachesPostgres", session, lease.EndpointDirect,
			"DOUBLERUN_SESSION_DSN (127.0.0.1:6432/doublerun) is not session-pooled (direct: why); point it at the session-pooling bouncer"},
		{"SessionConsoleSaysTransaction", sessionTx, lease.EndpointPinned,
			"DOUBLERUN_SESSION_DSN's bouncer has pool_mode=transaction on its admin console (DOUBLERUN_SESSION_ADMIN_DSN), not session; point DOUBLERUN_SESSION_DSN and DOUBLERUN_SESSION_ADMIN_DSN at the session-pooling bouncer"},
		{"TransactionProven", tx, lease.EndpointTransactionPooled, ""},
		{"TransactionConsoleSaysSession", txSession, lease.EndpointPinned,
			"DOUBLERUN_TRANSACTION_DSN's bouncer has pool_mode=session on its admin console (DOUBLERUN_TRANSACTION_ADMIN_DSN), not transaction; point DOUBLERUN_TRANSACTION_DSN and DOUBLERUN_TRANSACTION_ADMIN_DSN at the transaction-pooling bouncer"},
		{"TransactionBehavesPinned", tx, lease.EndpointPinned,
			"DOUBLERUN_TRANSACTION_DSN (127.0.0.1:6432/doublerun) is not proven transaction-pooled (pinned: why); point it at the transaction-pooling bouncer"},
		{"TransactionReachesPostgres", tx, lease.EndpointDirect,
			"DOUBLERUN_TRANSACTION_DSN (127.0.0.1:6432/doublerun) is not proven transaction-pooled (direct: why); point it at the transaction-pooling bouncer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkRole(tc.ep, rep(tc.kind))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
}
