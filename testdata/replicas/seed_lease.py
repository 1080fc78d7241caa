#!/usr/bin/python3
"""The seed's leader lease, ported from C# (Npgsql) to Python (psycopg 3).

PostgresLeaderLease from the service that #555 and #556 come from: a
session advisory lock, pg_try_advisory_lock(271, 1), taken on a dedicated
connection in the same statement as pg_backend_pid(); while it is held,
every poll first checks that the session still reaches that backend, and
a different PID drops the connection (relinquishing leadership) before a
fresh acquire. Through a transaction-pooling PgBouncer that check narrows
the window in which two replicas lead at once but does not close it
(#556); on a session-pinned endpoint it holds.

doublerun runs this as a replica command. It reads the protocol's
DOUBLERUN_* variables and reports its leader work over SQL with the
doublerun.* functions (on DOUBLERUN_ORACLE_DSN). With --log-only it
reports nothing and only prints what a service would log, so that
doublerun's log mode can judge it as an unchanged program.

Run it with Debian's /usr/bin/python3, which sees python3-psycopg.
"""
import os
import signal
import sys
import time

try:
    import psycopg
except ModuleNotFoundError:
    print("seed_lease.py: Python module psycopg not found by %s; install Debian's package python3-psycopg "
          "(apt-get install python3-psycopg) and run this with /usr/bin/python3" % sys.executable,
          file=sys.stderr, flush=True)
    sys.exit(3)

LOCK = (271, 1)
LOG_ONLY = "--log-only" in sys.argv[1:]


def env(name):
    value = os.environ.get(name)
    if not value:
        print("seed_lease.py: %s is not set; doublerun starts this as a replica with it set" % name, file=sys.stderr, flush=True)
        sys.exit(2)
    return value


REPLICA = env("DOUBLERUN_REPLICA_ID")
LEASE_DSN = env("DOUBLERUN_LEASE_DSN")
WORK_DSN = env("DOUBLERUN_WORK_DSN")
ORACLE_DSN = env("DOUBLERUN_ORACLE_DSN")
POLL = int(env("DOUBLERUN_POLL_INTERVAL_MS")) / 1000.0
WORK = int(env("DOUBLERUN_WORK_MS")) / 1000.0


def connect(dsn):
    # autocommit: every statement its own transaction, as Npgsql runs
    # them; prepare_threshold=None: no named prepared statements, which a
    # transaction pool cannot keep.
    return psycopg.connect(dsn, autocommit=True, connect_timeout=2, prepare_threshold=None)


class Lease:
    """PostgresLeaderLease: Leader, Follower or Faulted on each poll."""

    def __init__(self, dsn):
        self.dsn = dsn
        self.conn = None
        self.held = False
        self.pid = 0

    def reset(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn, self.held, self.pid = None, False, 0

    def try_acquire(self):
        try:
            if self.conn is None:
                self.conn = connect(self.dsn)
            if self.held:
                (pid,) = self.conn.execute("SELECT pg_backend_pid()").fetchone()
                if pid == self.pid:
                    return "leader"
                # Another backend answered: the session that took the lock
                # is not this one any more. Relinquish, then acquire afresh.
                self.reset()
                self.conn = connect(self.dsn)
            acquired, pid = self.conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s), pg_backend_pid()", LOCK).fetchone()
            self.held = bool(acquired)
            self.pid = pid if acquired else 0
            return "leader" if acquired else "follower"
        except psycopg.Error as e:
            print("lease faulted: %s" % str(e).strip().splitlines()[0], file=sys.stderr, flush=True)
            self.reset()
            return "faulted"


class Reports:
    """The doublerun.* calls, on a direct connection no fault touches."""

    def __init__(self):
        self.conn = None
        self.claimed = 0

    def call(self, sql, args):
        for attempt in range(50):
            try:
                if self.conn is None:
                    self.conn = connect(ORACLE_DSN)
                return self.conn.execute(sql, args).fetchone()
            except psycopg.Error as e:
                print("report failed (%s), again" % str(e).strip().splitlines()[0], file=sys.stderr, flush=True)
                try:
                    self.conn.close()
                except Exception:
                    pass
                self.conn = None
                time.sleep(0.1)
        raise SystemExit("seed_lease.py: cannot report to %s" % ORACLE_DSN)

    def claim(self, pid):
        if pid != self.claimed:
            self.call("SELECT doublerun.lock_claim(%s, %s, %s, %s)", (REPLICA, pid, LOCK[0], LOCK[1]))
            self.claimed = pid


def side_effect(work, token):
    """The leader's write, through the work endpoint; unfenced, as the seed's."""
    try:
        if work[0] is None:
            work[0] = connect(WORK_DSN)
        with work[0].transaction():
            work[0].execute("SELECT doublerun.side_effect(%s, %s, false)", (REPLICA, token))
    except psycopg.Error as e:
        print("side-effect write failed: %s" % str(e).strip().splitlines()[0], file=sys.stderr, flush=True)
        try:
            work[0].close()
        except Exception:
            pass
        work[0] = None


def main():
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    lease = Lease(LEASE_DSN)
    reports = None if LOG_ONLY else Reports()
    work = [None]
    token = 0
    leading = False
    print("replica %s started (pid %d)" % (REPLICA, os.getpid()), flush=True)
    while not stopping:
        status = lease.try_acquire()
        if status == "leader":
            if not leading:
                leading = True
                print("became leader (backend %d)" % lease.pid, flush=True)
                if reports:
                    (token,) = reports.call("SELECT doublerun.next_token()", ())
            if reports:
                reports.claim(lease.pid)
                (piece,) = reports.call("SELECT doublerun.work_begin(%s, %s, %s)", (REPLICA, token, lease.pid))
            print("sweep started", flush=True)
            time.sleep(WORK)
            if reports:
                side_effect(work, token)
                reports.call("SELECT doublerun.work_end(%s)", (piece,))
            print("sweep finished", flush=True)
        elif leading:
            leading = False
            print("lost leadership (%s)" % status, flush=True)
        if reports:
            reports.claim(lease.pid if lease.held else 0)
        if not stopping:
            time.sleep(POLL)
    lease.reset()
    if reports:
        reports.claim(0)
    if leading:
        print("lost leadership (stopping)", flush=True)
    print("replica %s stopped" % REPLICA, flush=True)


if __name__ == "__main__":
    main()
