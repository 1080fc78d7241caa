package stack

import (
	"cmp"

	"github.com/doublerun/doublerun/pgbouncer"
)

// bouncerDatabases returns the [databases] entries of a bouncer in front of
// the Postgres at host:port. The caller's entries are kept, so one bouncer
// can serve a database under several names with a pool mode and size each
// (the one-bouncer #556 fix: a session-mode name for the lease beside a
// transaction-mode name for the work). An entry without a host or port
// forwards to host:port, and one without a dbname names the database it is
// called after. The "*" fallback is added when the caller gave none, so
// every other database stays reachable: tests create databases of their own
// and reach them through every bouncer.
func bouncerDatabases(given []pgbouncer.Database, host string, port int) []pgbouncer.Database {
	out := make([]pgbouncer.Database, 0, len(given)+1)
	fallback := false
	for _, d := range given {
		d.Host = cmp.Or(d.Host, host)
		d.Port = cmp.Or(d.Port, port)
		if d.Name == "*" {
			fallback = true
		} else {
			d.DBName = cmp.Or(d.DBName, d.Name)
		}
		out = append(out, d)
	}
	if !fallback {
		out = append(out, pgbouncer.Database{Name: "*", Host: host, Port: port})
	}
	return out
}
