package pgbouncer

import "github.com/jackc/pgx/v5"

// ExecMode returns the pgx QueryExecMode that is safe for a connection
// through a pool in the given mode. mode "" means a direct connection.
//
// Transaction and statement pooling hand each transaction to any server
// connection, so named prepared statements are safe only from PgBouncer 1.21
// with max_prepared_statements > 0. Below that, ExecMode returns
// QueryExecModeExec, which uses the unnamed statement and so needs nothing to
// survive between transactions. An unparseable version is treated as old.
func ExecMode(mode PoolMode, version string, maxPreparedStatements int) pgx.QueryExecMode {
	if mode != PoolTransaction && mode != PoolStatement {
		return pgx.QueryExecModeCacheStatement
	}
	if maxPreparedStatements > 0 && SupportsPreparedStatements(version) {
		return pgx.QueryExecModeCacheStatement
	}
	return pgx.QueryExecModeExec
}
