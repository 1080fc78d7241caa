package stack

import (
	"context"
	"fmt"
	"time"
)

// pingTimeout bounds how long Repair waits for one server to answer.
const pingTimeout = 5 * time.Second

// Repair checks that the servers every user of the stack shares (Postgres
// and the session and transaction bouncers) answer, starts again any that
// does not, and says what it found: nothing when all answer. A run that
// restarts servers, or a PgBouncer 1.18 that crashes on a cancel request
// (chaos/FINDINGS.md, finding 6), must not leave a broken server to every
// run after it. The external provider cannot start a server again; Repair
// then only says which one does not answer.
func (s *Stack) Repair(ctx context.Context) []string {
	var notes []string
	for _, name := range []string{PostgresName, SessionName, TransactionName} {
		ep, ok := s.Endpoint(name)
		if !ok {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := ping(pctx, ep.DSN)
		cancel()
		if err == nil {
			continue
		}
		if s.Provider() == ProviderExternal {
			notes = append(notes, fmt.Sprintf("%s does not answer (%s); the external provider cannot start it again", name, firstLine(err)))
			continue
		}
		var serr error
		if ep.Direct() {
			serr = s.StartPostgres(ctx)
		} else {
			serr = s.StartPgBouncer(ctx, name)
		}
		if serr != nil {
			notes = append(notes, fmt.Sprintf("%s did not answer (%s) and could not be started again: %s", name, firstLine(err), firstLine(serr)))
			continue
		}
		notes = append(notes, fmt.Sprintf("%s did not answer (%s); started it again", name, firstLine(err)))
	}
	return notes
}
