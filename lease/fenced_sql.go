package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// The Fenced statements. Each one stands alone, and expiry is computed from
// the server's clock_timestamp(), never from a replica's clock.
const (
	// token is in a UNIQUE constraint so that it is a key column: a grant
	// (which changes it) conflicts with the FOR KEY SHARE lock a fence
	// takes, a renewal (which does not) does not. See fence. Caught by
	// TestFenced/FenceHoldsOffANewGrantUntilTheWriteCommits.
	fencedTableDDL = `CREATE TABLE IF NOT EXISTS %s (
	name       text PRIMARY KEY,
	holder     text NOT NULL,
	token      bigint NOT NULL CHECK (token > 0),
	granted_at timestamptz NOT NULL,
	renewed_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	UNIQUE (name, token)
)`
	// Renew only the exact term, and only while it lasts. Caught by
	// TestFenced/RenewsOnlyItsExactTerm/OtherHolderSameToken and
	// TestFenced/RenewsOnlyItsExactTerm/SameHolderOlderToken.
	//
	// A term that expired on the server is over even if nobody took it:
	// its holder had stopped trusting it, so work it abandoned may still
	// be on its way (a statement queued in a paused PgBouncer, bytes held
	// in a slow network). Its next poll takes a new term, whose token the
	// fence tells from the abandoned work's, instead of reviving the old
	// one, in which the fence could not. Caught by
	// TestFencedExpiredTermIsNotRenewed.
	fencedRenewSQL = `UPDATE %s SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond'
WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()
RETURNING token`
	// Take the lease only when it is free (never granted) or expired; every
	// grant raises the token.
	//
	// The NOT EXISTS pre-check makes a follower's poll a plain read: without
	// it, ON CONFLICT would lock the held row, writing WAL at every poll and
	// waiting behind the leader's open fenced writes. Caught by
	// TestFenced/FollowerPollDoesNotWaitForTheLeadersFencedWrite. It reads a
	// snapshot, so the ON CONFLICT ... WHERE on the locked, newest row
	// version is what decides: caught by
	// TestFenced/OnlyOneOfTwoRacingGrantsWins. The increment is caught by
	// TestFenced/TokensStrictlyIncrease.
	fencedGrantSQL = `INSERT INTO %[1]s AS l (name, holder, token, granted_at, renewed_at, expires_at)
SELECT $1::text, $2::text, 1, clock_timestamp(), clock_timestamp(), clock_timestamp() + $3::bigint * interval '1 millisecond'
WHERE NOT EXISTS (SELECT 1 FROM %[1]s WHERE name = $1::text AND expires_at > clock_timestamp())
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, token = l.token + 1, granted_at = excluded.granted_at, renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE l.expires_at <= clock_timestamp()
RETURNING token`
	// The grant of an Epoch lease: a token of at least timeline << 32 | 1
	// (epochFirstSQL), so the first grant on a new timeline is above
	// every token an earlier timeline granted (fewer than 2^32 a
	// timeline). Otherwise the grant above, in words of its own, so that
	// each clause has one guard: the timeline is read once, in the one-row
	// FROM, and only when the NOT EXISTS lets the row through, so a
	// follower's poll costs what it did. Caught by
	// TestFencedEpochAcrossALossyFailover,
	// TestFencedEpoch/FirstGrantIsOnTheServersTimeline and
	// TestFencedEpoch/OnlyOneOfTwoRacingGrantsWins.
	fencedEpochGrantSQL = `INSERT INTO %[1]s AS l (name, holder, token, granted_at, renewed_at, expires_at)
SELECT $1::text, $2::text, e.first, clock_timestamp(), clock_timestamp(), clock_timestamp() + $3::bigint * interval '1 millisecond'
FROM (SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint << 32) + 1 AS first) e
WHERE NOT EXISTS (SELECT 1 FROM %[1]s AS held WHERE held.name = $1::text AND held.expires_at > clock_timestamp())
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, token = greatest(l.token + 1, excluded.token), granted_at = excluded.granted_at, renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE clock_timestamp() >= l.expires_at
RETURNING token`
	// The renewal of an Epoch lease renews the exact term, as above, and
	// moves a term granted on an earlier timeline to the server's: its
	// token becomes timeline << 32 | 1, which no grant on this timeline
	// has given out (the row would have that token, and the holder's term
	// would not match). Fence refuses a term of an earlier timeline, so
	// after a promotion the leader writes again once its renewal has
	// moved it. The token changes, a key column, so that one renewal
	// waits for the fenced writes open on the row. Caught by
	// TestFencedEpochAcrossALossyFailover and
	// TestFencedEpoch/RenewsOnlyItsExactTerm. Only while the term lasts,
	// as above: caught by TestFencedExpiredTermIsNotRenewed.
	fencedEpochRenewSQL = `UPDATE %[1]s AS l SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
token = greatest(l.token, e.first)
FROM (SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint << 32) + 1 AS first) e
WHERE l.name = $1 AND l.holder = $2 AND l.token = $3 AND clock_timestamp() < l.expires_at
RETURNING l.token`
	// epochFirstSQL is the first token of the server's timeline,
	// timeline << 32 | 1. The timeline is the first 8 hex digits of the
	// name of the WAL file the server writes, which every promotion
	// raises. The two statements above spell it out, since the mutation
	// gate mutates a + between constants that no test can run
	// (TestFencedEpoch/PicksTheEpochGrant holds them to this one).
	epochFirstSQL = `(('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint << 32) + 1`
	// Expire the exact term now, so the next poll of any replica takes it.
	// Caught by TestFenced/ReleaseHandsOverAtOnce and
	// TestFenced/ReleaseOfAStaleTermLeavesTheNewHolderAlone.
	//
	// The same statement notifies channel $4 with the lease name, so a
	// follower waiting in Acquire wakes at once. NOTIFY is transactional:
	// it is sent when the release commits, and only when it expired a
	// term. It works through any pool; only LISTEN needs a session. Caught
	// by TestFencedWait/ReleaseWakesAWaitingFollower.
	fencedReleaseSQL = `WITH released AS (
UPDATE %s SET expires_at = clock_timestamp()
WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()
RETURNING name)
SELECT pg_notify($4, name) FROM released`
	fencedExistsSQL = `SELECT 1 FROM %s LIMIT 0`
)

// MigrateFenced creates the Fenced lease table called table (default
// "doublerun_leases" when empty; "schema.table" is accepted) if it does not
// exist. It is idempotent and safe to run from several replicas at once.
//
// The table is a normal, logged table on purpose: an UNLOGGED table is
// emptied by crash recovery, and tokens would start again at 1, so a
// deposed leader's old token could look current again.
func MigrateFenced(ctx context.Context, db Execer, table string) error {
	quoted, err := quoteTable(cmp.Or(table, defaultFencedTable))
	if err != nil {
		return fmt.Errorf("lease: migrate fenced: %w", err)
	}
	if err := createTable(ctx, db, fmt.Sprintf(fencedTableDDL, quoted)); err != nil {
		return fmt.Errorf("lease: migrate fenced table %s: %w", quoted, err)
	}
	return nil
}

func hintMigrate(err error, table string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w; create the lease table with lease.MigrateFenced(ctx, conn, %q)", err, table)
	}
	return err
}
