package oracle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ev(kind, replica, detail string, ms int) Event {
	return Event{Kind: kind, Replica: replica, Detail: detail, At: at(ms)}
}

// started is r1 and r2 started before the run's start at 0.
func started(ids ...string) []Event {
	var out []Event
	for _, id := range ids {
		out = append(out, ev(EventReplicaStarted, id, "", -100))
	}
	return out
}

// steady is pieces of r's work every 100ms from from to to, 50ms each.
func steady(r string, from, to int) []Interval {
	var out []Interval
	for t := from; t < to; t += 100 {
		out = append(out, iv(r, 1, t, t+50))
	}
	return out
}

func condition(t *testing.T, v Validity, name string) Condition {
	t.Helper()
	for _, c := range v.Conditions {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no condition %q in %+v", name, v)
	return Condition{}
}

var vopts = Options{GapTolerance: 300 * time.Millisecond, TTL: 200 * time.Millisecond}

func TestValidityContention(t *testing.T) {
	t.Parallel()
	run := func(events ...Event) Condition {
		h := History{Start: at(0), End: at(1000), Events: events, Intervals: steady("r1", 0, 1000)}
		return condition(t, validity(h, vopts), ConditionContention)
	}
	c := run(started("r1", "r2")...)
	require.Equal(t, Condition{Name: ConditionContention, Holds: true, Figure: "2 of 2 replicas alive over the run (+200ms to its end)"}, c)

	c = run(started("r1")...)
	require.False(t, c.Holds)
	require.Equal(t, "1 of 1 replicas alive over the run (+200ms to its end)", c.Figure)
	require.Equal(t, "only 1 replica ran, and a double-run needs two contending for the lease; run 2 or more replicas", c.Reason)

	c = run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "exited before the run ended: exit status 1", 500))...)
	require.False(t, c.Holds)
	require.Equal(t, `only 1 replica left contending over the run (+200ms to its end) (r2 replica-stopped (exited before the run ended: exit status 1) at +500ms); see the replica's exit in the events and its log, and fix why it stopped`, c.Reason)
	c = run(append(started("r1", "r2"), ev(EventReplicaKilled, "r2", "", 500))...)
	require.Contains(t, c.Reason, "(r2 replica-killed at +500ms)")

	// The bounds: alive from its start, dead from its death.
	require.False(t, run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "", 1000))...).Holds, "dead at the end")
	require.True(t, run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "", 1001))...).Holds, "dead after it")
	require.True(t, run(append(started("r1"), ev(EventReplicaStarted, "r2", "", 200))...).Holds, "started a TTL into the run")
	c = run(append(started("r1"), ev(EventReplicaStarted, "r2", "", 201))...)
	require.False(t, c.Holds, "started after it")
	require.Contains(t, c.Reason, "(r2 started only at +201ms)")
	// A short run: from its middle, when that comes before a TTL.
	short := History{Start: at(0), End: at(300), Events: append(started("r1"), ev(EventReplicaStarted, "r2", "", 150)), Intervals: steady("r1", 0, 300)}
	require.True(t, condition(t, validity(short, vopts), ConditionContention).Holds)
	short.Events[1].At = at(151)
	require.False(t, condition(t, validity(short, vopts), ConditionContention).Holds)
	require.Equal(t, "not started", deathWord(short, "r2"), "no death")
	// A replica's first start and first death count.
	require.True(t, run(append(started("r1", "r2"), ev(EventReplicaStarted, "r2", "", 500))...).Holds)
	require.Contains(t, run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "", -50))...).Reason, "(r2 replica-stopped at -50ms)", "before the measurement began")
	require.Contains(t, run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "", 0))...).Reason, "(r2 replica-stopped at +0s)")
	require.False(t, run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "", 500), ev(EventReplicaStarted, "r2", "", 600))...).Holds)
	require.False(t, run(append(started("r1", "r2"), ev(EventReplicaStopped, "r2", "", 500), ev(EventReplicaKilled, "r2", "", 2000))...).Holds)
	require.Contains(t, run(append(started("r1", "r2"), ev(EventReplicaKilled, "r2", "a", 500), ev(EventReplicaStopped, "r2", "b", 600))...).Reason, "r2 replica-killed (a) at +500ms")
	// A death before a start is no one's.
	require.True(t, run(ev(EventReplicaStopped, "r2", "", -200), ev(EventReplicaStarted, "r1", "", -100), ev(EventReplicaStarted, "r2", "", -100)).Holds)
}

func TestValidityContentionThroughTheFault(t *testing.T) {
	t.Parallel()
	// r1 is struck at 300, the fault heals at 400, the TTL is 200ms: two
	// must contend from 300 to 600, but r1 may die of the fault.
	run := func(events ...Event) Condition {
		h := History{Start: at(0), End: at(1000), Intervals: steady("r1", 0, 1000),
			Events: append(append(started("r1", "r2"), ev(EventFault, "r1", "KILL_LEADER", 300), ev(EventHealed, "r1", "KILL_LEADER", 400)), events...)}
		return condition(t, validity(h, vopts), ConditionContention)
	}
	c := run(ev(EventReplicaKilled, "r1", "", 350))
	require.Equal(t, Condition{Name: ConditionContention, Holds: true, Figure: "2 of 2 replicas alive from the fault to its heal plus the TTL (+300ms to +600ms)"}, c)
	require.False(t, run(ev(EventReplicaStopped, "r2", "", 550)).Holds, "the other one died before a TTL passed")
	require.True(t, run(ev(EventReplicaStopped, "r2", "", 650)).Holds, "after it")
	require.False(t, run(ev(EventReplicaStopped, "r2", "", 250)).Holds, "before the fault")
	// The window ends with the run.
	h := History{Start: at(0), End: at(500), Intervals: steady("r1", 0, 500),
		Events: append(started("r1", "r2"), ev(EventFault, "r1", "KILL_LEADER", 300), ev(EventHealed, "r1", "KILL_LEADER", 400), ev(EventReplicaStopped, "r2", "", 550))}
	c = condition(t, validity(h, vopts), ConditionContention)
	require.True(t, c.Holds)
	require.Contains(t, c.Figure, "(+300ms to +500ms)")
	// A fault that never healed holds to the end of the run.
	h = History{Start: at(0), End: at(1000), Intervals: steady("r1", 0, 1000),
		Events: append(started("r1", "r2"), ev(EventFault, "r1", "KILL_LEADER", 300), ev(EventReplicaStopped, "r2", "", 950))}
	require.False(t, condition(t, validity(h, vopts), ConditionContention).Holds)
}

func TestValidityFaultOf(t *testing.T) {
	t.Parallel()
	h := History{End: at(1000), Events: []Event{
		ev(EventChaos, "r3", "before the fault", 10),
		ev(EventFault, "r1", "FREEZE_LEADER", 100),
		ev(EventChaos, "", "no replica", 110),
		ev(EventInjected, "r2", "", 120),
		ev(EventFault, "r9", "KILL_LEADER", 130),
		ev(EventHealed, "r2", "", 200),
		ev(EventHealed, "r2", "", 300),
		ev(EventReplicaKilled, "r4", "", 400),
	}}
	require.Equal(t, faultSpan{name: "FREEZE_LEADER", at: at(100), heal: at(200), target: "r2"}, faultOf(h))
	for _, kind := range []string{EventReplicaKilled, EventChaos} {
		h := History{Events: []Event{ev(EventFault, "r1", "X", 100), ev(kind, "r2", "", 120), ev(EventReplicaStopped, "r3", "", 130), ev(EventHealed, "", "", 200)}}
		require.Equal(t, "r2", faultOf(h).target, kind)
	}
	require.Equal(t, faultSpan{}, faultOf(History{End: at(1000), Events: []Event{ev(EventHealed, "r1", "", 100), ev(EventChaos, "r1", "", 100)}}))
	require.Equal(t, at(1000), faultOf(History{End: at(1000), Events: []Event{ev(EventFault, "r1", "X", 100)}}).heal)
}

// struck runs a fault on r1 at 300 that heals at 700, with r1 working
// steadily but where gaps say otherwise.
func struckBy(t *testing.T, name string, ivs []Interval, events ...Event) Condition {
	t.Helper()
	h := History{Start: at(0), End: at(2000), Intervals: ivs,
		Events: append(append(started("r1", "r2"), ev(EventFault, "r1", name, 300)), append(events, ev(EventHealed, "r1", name, 700))...)}
	return condition(t, validity(h, vopts), ConditionStruck)
}

func TestValidityStruck(t *testing.T) {
	t.Parallel()
	work := []Interval{iv("r1", 1, 200, 400), iv("r1", 1, 450, 500)}
	holds := func(name string, c Condition, figure string) {
		t.Helper()
		require.Equal(t, Condition{Name: ConditionStruck, Holds: true, Figure: figure}, c, name)
	}
	fails := func(name string, c Condition, reason string) {
		t.Helper()
		require.Equal(t, Condition{Name: ConditionStruck, Figure: "not shown", Reason: reason}, c, name)
	}
	holds("none", condition(t, validity(History{Start: at(0), End: at(10)}, vopts), ConditionStruck), "no fault")

	holds("kill", struckBy(t, "KILL_LEADER", work, ev(EventReplicaKilled, "r1", "", 350)), "SIGKILL to leader r1 at +350ms, mid-work")
	holds("kill as a piece begins", struckBy(t, "KILL_LEADER", work, ev(EventReplicaKilled, "r1", "", 450)), "SIGKILL to leader r1 at +450ms, mid-work")
	holds("kill as a piece ends", struckBy(t, "KILL_LEADER", work, ev(EventReplicaKilled, "r1", "", 500)), "SIGKILL to leader r1 at +500ms, mid-work")
	fails("kill of a replica at rest", struckBy(t, "KILL_LEADER", work, ev(EventReplicaKilled, "r1", "", 420)), "KILL_LEADER killed r1 at +420ms while it did no leader work: it was not leading")
	fails("kill of no one", struckBy(t, "KILL_LEADER", work), `KILL_LEADER killed no replica: the leader "r1" was never killed`)
	fails("kill of r1 before the fault", struckBy(t, "KILL_LEADER", work, ev(EventReplicaKilled, "r1", "", 250)), `KILL_LEADER killed no replica: the leader "r1" was never killed`)
	fails("kill of another's work", struckBy(t, "KILL_LEADER", []Interval{iv("r2", 1, 200, 400)}, ev(EventReplicaKilled, "r1", "", 350)), "KILL_LEADER killed r1 at +350ms while it did no leader work: it was not leading")

	stop := ev(EventChaos, "r1", "SIGSTOP pid 7 in the middle of its work, for 3s", 350)
	holds("freeze", struckBy(t, "FREEZE_LEADER", work, stop), "SIGSTOP to leader r1 at +350ms, mid-work")
	fails("freeze late", struckBy(t, "FREEZE_LEADER", work, ev(EventChaos, "r1", "froze r1 without waiting: it began no piece of work within 5s", 340), stop),
		"FREEZE_LEADER froze r1 without waiting for a piece of work: it was not working, so it had no write to make late; give the replicas steady work (poll interval below the TTL)")
	fails("freeze at rest", struckBy(t, "FREEZE_LEADER", work, ev(EventChaos, "r1", "SIGSTOP pid 7", 420)), "FREEZE_LEADER froze r1 at +420ms while it did no leader work: it was not leading")
	fails("no freeze", struckBy(t, "FREEZE_LEADER", work, ev(EventChaos, "r2", "SIGSTOP pid 8", 350), ev(EventChaos, "r1", "SIGCONT pid 7", 350)), `FREEZE_LEADER froze no replica: no SIGSTOP of the leader "r1"`)

	holds("terminate", struckBy(t, "TERMINATE_LEADER_BACKEND", work, ev(EventChaos, "r1", "backend 42 (reported) terminated", 350)), "backend 42 (reported) terminated of leader r1 at +350ms")
	reason := `TERMINATE_LEADER_BACKEND ended no backend of the leader "r1": its lease had no backend to end; make the lease call doublerun.work_begin with its backend_pid, or connect with DOUBLERUN_LEASE_DSN so its backends carry its application_name`
	fails("terminate of a gone backend", struckBy(t, "TERMINATE_LEADER_BACKEND", work, ev(EventChaos, "r1", "backend 42 (reported) already gone", 350)), reason)
	fails("terminate before the fault", struckBy(t, "TERMINATE_LEADER_BACKEND", work, ev(EventChaos, "r1", "backend 42 (reported) terminated", 250)), reason)

	// The network faults: r1 worked before, then began nothing for 400ms.
	net := []Interval{iv("r1", 1, 100, 150), iv("r1", 1, 200, 250), iv("r1", 1, 700, 750)}
	on, off := ev(EventChaos, "r1", "partition map[timeout:0] on 2 proxies, for 3s", 300), ev(EventChaos, "r1", "partition removed", 700)
	holds("partition", struckBy(t, "PARTITION_LEADER", net, on, off), "leader r1 worked before it; its work stalled 400ms under the partition (+300ms to +700ms)")
	holds("delay", struckBy(t, "DELAY_LEADER", net, ev(EventChaos, "r1", "delay map[] on 2 proxies, for 3s", 300), ev(EventChaos, "r1", "delay removed", 700)),
		"leader r1 worked before it; its work stalled 400ms under the delay (+300ms to +700ms)")
	fails("partition of nothing", struckBy(t, "PARTITION_LEADER", net, on), `PARTITION_LEADER put no toxic on the leader "r1"'s proxies`)
	fails("partition without a heal", struckBy(t, "PARTITION_LEADER", net, off), `PARTITION_LEADER put no toxic on the leader "r1"'s proxies`)
	fails("partition of a replica that never worked", struckBy(t, "PARTITION_LEADER", []Interval{iv("r1", 1, 300, 350), iv("r2", 1, 100, 150)}, on, off),
		"PARTITION_LEADER struck r1, which did no leader work before it: its proxied connections carried no lease traffic")
	edge := []Interval{iv("r1", 1, 100, 150), iv("r1", 1, 400, 450), iv("r1", 1, 700, 750)}
	fails("a pause of exactly the tolerance", struckBy(t, "PARTITION_LEADER", edge, on, off),
		"PARTITION_LEADER on r1's proxies never stalled its work (longest pause 300ms, tolerance 300ms): its lease calls do not go through DOUBLERUN_LEASE_DSN; connect with it")
	busy := steady("r1", 0, 2000) // a piece every 100ms: never stalled
	fails("partition that stalls nothing", struckBy(t, "PARTITION_LEADER", busy, on, off),
		"PARTITION_LEADER on r1's proxies never stalled its work (longest pause 100ms, tolerance 300ms): its lease calls do not go through DOUBLERUN_LEASE_DSN; connect with it")

	holds("pause", struckBy(t, "PGBOUNCER_PAUSE", work, ev(EventChaos, "", "PAUSE run_x on tx, for 3s", 350), ev(EventChaos, "", "RESUME run_x", 650)), "PAUSE and RESUME on the bouncer")
	fails("pause alone", struckBy(t, "PGBOUNCER_PAUSE", work, ev(EventChaos, "", "PAUSE run_x on tx, for 3s", 350)), "PGBOUNCER_PAUSE logged no PAUSE and RESUME")
	fails("resume alone", struckBy(t, "PGBOUNCER_PAUSE", work, ev(EventChaos, "", "RESUME run_x", 650)), "PGBOUNCER_PAUSE logged no PAUSE and RESUME")
	holds("kill the pool", struckBy(t, "PGBOUNCER_KILL", work, ev(EventChaos, "", "KILL run_x on tx", 350)), "KILL on the bouncer, its pool reopened")
	fails("no kill of the pool", struckBy(t, "PGBOUNCER_KILL", work, ev(EventInjected, "", "KILL run_x on tx", 350)), "PGBOUNCER_KILL logged no KILL")
	holds("reconnect", struckBy(t, "PGBOUNCER_RECONNECT", work, ev(EventChaos, "", "RECONNECT run_x on tx", 350)), "RECONNECT on the bouncer")
	fails("no reconnect", struckBy(t, "PGBOUNCER_RECONNECT", work), "PGBOUNCER_RECONNECT logged no RECONNECT")
	holds("restart", struckBy(t, "PGBOUNCER_RESTART", work, ev(EventChaos, "", "stopped pgbouncer tx", 350), ev(EventChaos, "", "started pgbouncer tx", 650)), "the bouncer stopped and started again")
	fails("a stop alone", struckBy(t, "PGBOUNCER_RESTART", work, ev(EventChaos, "", "stopped pgbouncer tx", 350)), "PGBOUNCER_RESTART did not both stop and start the bouncer")
	fails("a start alone", struckBy(t, "PGBOUNCER_RESTART", work, ev(EventChaos, "", "started pgbouncer tx", 350)), "PGBOUNCER_RESTART did not both stop and start the bouncer")
	holds("postgres", struckBy(t, "POSTGRES_RESTART", work, ev(EventChaos, "", "postgres restarted", 650)), "Postgres stopped and came back")
	fails("postgres before the fault", struckBy(t, "POSTGRES_RESTART", work, ev(EventChaos, "", "postgres restarted", 250)), "POSTGRES_RESTART never logged Postgres back up")

	term := ev(EventInjected, "r1", "SIGTERM pid 7", 350)
	holds("graceful", struckBy(t, "GRACEFUL_HANDOVER", work, term, ev(EventReplicaStopped, "r1", "", 420)), "SIGTERM to leader r1 at +350ms, mid-work; it released and exited at +420ms")
	fails("graceful without a SIGTERM", struckBy(t, "GRACEFUL_HANDOVER", work, ev(EventReplicaStopped, "r1", "", 420)), `GRACEFUL_HANDOVER sent no SIGTERM to the leader "r1"`)
	fails("graceful at rest", struckBy(t, "GRACEFUL_HANDOVER", work, ev(EventInjected, "r1", "SIGTERM pid 7", 420), ev(EventReplicaStopped, "r1", "", 520)), "GRACEFUL_HANDOVER sent SIGTERM to r1 while it did no leader work: it was not leading")
	fails("graceful that never ends", struckBy(t, "GRACEFUL_HANDOVER", work, term, ev(EventReplicaStopped, "r2", "", 420)), "GRACEFUL_HANDOVER's SIGTERM never made r1 exit: it did not release")

	down := ev(EventChaos, "", "primary pg1 down, 40ms after the SIGKILL", 360)
	promoted := ev(EventChaos, "", "pg2 promoted, timeline 2, 150ms after the SIGKILL", 450)
	repointed := ev(EventChaos, "", "address leads to pg2, 155ms after the SIGKILL", 455)
	first := ev(EventChaos, "", "first statement on the new primary through postgres, 170ms after the SIGKILL", 470)
	for _, name := range []string{"PRIMARY_FAILOVER", "SWITCHOVER"} {
		holds("failover", struckBy(t, name, work, down, promoted, repointed, first), "the primary down, the standby promoted, the address repointed, a statement on the new primary")
		fails("failover without the primary down", struckBy(t, name, work, promoted, repointed, first), name+" never logged the primary down")
		fails("failover without a promotion", struckBy(t, name, work, down, repointed, first), name+" never logged the standby promoted")
		fails("failover without a repoint", struckBy(t, name, work, down, promoted, first), name+" never logged the address repointed")
		fails("failover without a statement", struckBy(t, name, work, down, promoted, repointed), name+" never logged a statement on the new primary")

		// The user's own command on the external provider: doublerun sees
		// it succeed, the timeline change and a statement after it.
		exited := ev(EventChaos, "", `failover command exited: exit 0, 548ms after its start; its last line: "ok"`, 400)
		newTimeline := ev(EventChaos, "", "the server behind postgres promoted, timeline 2 (was 1), 604ms after the command's start", 450)
		holds("external failover", struckBy(t, name, work, exited, newTimeline, first), "the failover command exited 0, the server promoted to a new timeline, a statement on the new primary")
		fails("external failover that failed", struckBy(t, name, work, ev(EventChaos, "", "failover command exited: exit 3, 5ms after its start", 400), newTimeline, first), name+" never logged the failover command exiting 0")
		fails("external failover without a new timeline", struckBy(t, name, work, exited, first), name+" never logged the server promoted to a new timeline")
		fails("external failover without a statement", struckBy(t, name, work, exited, newTimeline), name+" never logged a statement on the new primary")
	}
	detached := ev(EventChaos, "", "standby pg2 detached: from here on the primary alone has the commits", 320)
	frozen := ev(EventChaos, "r1", "SIGSTOP pid 7 in the middle of its work, for 3s, while the primary alone takes the commits", 350)
	holds("lossy", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, frozen, down, promoted, repointed, first), "standby detached, leader r1 frozen mid-work at +350ms, the standby promoted")
	fails("lossy without a detach", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, frozen, down, promoted, repointed, first), "PRIMARY_FAILOVER_LOSSY never detached the standby: nothing was lost on purpose")
	noFreeze := `PRIMARY_FAILOVER_LOSSY froze no leader mid-work: no SIGSTOP of "r1" while it worked, so no grant was made on the primary alone`
	fails("lossy without a freeze", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, down, promoted, repointed, first), noFreeze)
	fails("lossy that froze a leader at rest", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, ev(EventChaos, "r1", "SIGSTOP pid 7", 420), down, promoted, repointed, first), noFreeze)
	fails("lossy without the primary down", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, frozen, promoted, repointed, first), "PRIMARY_FAILOVER_LOSSY never logged the primary down")
	fails("lossy without a promotion", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, frozen, down, repointed, first), "PRIMARY_FAILOVER_LOSSY never logged the standby promoted")
	fails("lossy without a repoint", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, frozen, down, promoted, first), "PRIMARY_FAILOVER_LOSSY never logged the address repointed")
	fails("lossy without a statement", struckBy(t, "PRIMARY_FAILOVER_LOSSY", work, detached, frozen, down, promoted, repointed), "PRIMARY_FAILOVER_LOSSY never logged a statement on the new primary")

	fails("unknown", struckBy(t, "NEW_FAULT", work), "fault NEW_FAULT has no evidence this doublerun knows of")
}

func TestLongestIdle(t *testing.T) {
	t.Parallel()
	ivs := []Interval{iv("r1", 1, 50, 60), iv("r1", 1, 100, 110), iv("r2", 1, 150, 160), iv("r1", 1, 250, 260), iv("r1", 1, 400, 410)}
	require.Equal(t, 150*time.Millisecond, longestIdle(ivs, "r1", at(100), at(300)), "from 100 to 250")
	require.Equal(t, 300*time.Millisecond, longestIdle(ivs, "r1", at(100), at(700)), "from the last piece at 400 to the end")
	require.Equal(t, 50*time.Millisecond, longestIdle(ivs, "r1", at(0), at(100)), "50 to the piece at 50, 50 to the one at the end")
	require.Equal(t, 149*time.Millisecond, longestIdle(ivs, "r1", at(101), at(399)), "only the piece at 250, neither end's")
	require.Equal(t, 50*time.Millisecond, longestIdle(ivs, "r2", at(100), at(200)), "r2's own piece at 150")
}

func TestValidityPath(t *testing.T) {
	t.Parallel()
	run := func(commands bool, bs ...Backend) Condition {
		h := History{Start: at(0), End: at(1000), Events: started("r1", "r2"), Intervals: steady("r1", 0, 1000), Backends: bs, PathWatched: true}
		o := vopts
		o.Commands = commands
		return condition(t, validity(h, o), ConditionPath)
	}
	// A report written before built-in replicas were watched keeps its
	// figure, so that doublerun check agrees with it.
	h := History{Start: at(0), End: at(1000), Events: started("r1", "r2"), Intervals: steady("r1", 0, 1000)}
	require.Equal(t, Condition{Name: ConditionPath, Holds: true, Figure: "built-in replicas dial the proxies the runner gives them"}, condition(t, validity(h, vopts), ConditionPath))
	// Watched, built-in replicas are judged as a command's are.
	require.Equal(t, "no backend of r1 seen", run(false).Figure)
	c := run(false, Backend{Replica: "r1", PID: 10, Via: ViaPgBouncer}, Backend{Replica: "r2", PID: 12, Client: "127.0.0.1:50001", Via: ViaOther})
	require.False(t, c.Holds, "a built-in replica around its proxy")
	require.Equal(t, "r2's backends 12 connect from 127.0.0.1:50001, not through its proxy: connect with `DOUBLERUN_LEASE_DSN`", c.Reason)
	ok := []Backend{{Replica: "r1", PID: 10, Via: ViaPgBouncer}, {Replica: "r2", Client: "127.0.0.1:5", Via: ViaProxy}}
	require.Equal(t, Condition{Name: ConditionPath, Holds: true, Figure: "2 connections of 2 replicas, all through their proxies or the run's bouncers"}, run(true, ok...))
	require.Equal(t, Condition{Name: ConditionPath, Holds: true, Figure: "2 connections of 2 replicas, all through their proxies or the run's bouncers"}, run(false, ok...))
	c = run(true, append(ok, Backend{Replica: "r2", PID: 11, Client: "172.17.0.1:6", Via: ViaUnverified})...)
	require.True(t, c.Holds)
	require.Equal(t, "3 connections of 2 replicas, all through their proxies or the run's bouncers (1 seen through a container's port proxy, where no socket of this host matches them)", c.Figure)

	c = run(true, append(ok, Backend{Replica: "r2", PID: 1234, Client: "127.0.0.1:50001", Via: ViaOther}, Backend{Replica: "r2", PID: 1240, Client: "127.0.0.1:50001", Via: ViaOther},
		Backend{Replica: "r2", PID: 1250, Client: "127.0.0.1:50002", Via: ViaOther})...)
	require.False(t, c.Holds)
	require.Equal(t, "3 of r2's 4 connections around its proxy", c.Figure)
	require.Equal(t, "r2's backends 1234, 1240 and 1250 connect from 127.0.0.1:50001, 127.0.0.1:50002, not through its proxy: connect with `DOUBLERUN_LEASE_DSN`", c.Reason)
	c = run(true, Backend{Replica: "r1", Client: "127.0.0.1:50001", Via: ViaOther}, Backend{Replica: "r1", PID: 9, Client: "127.0.0.1:50003", Via: ViaOther})
	require.Equal(t, "r1's backends 9 connect from 127.0.0.1:50001, 127.0.0.1:50003, not through its proxy: connect with `DOUBLERUN_LEASE_DSN`", c.Reason)
	c = run(true, Backend{Replica: "r1", Client: "127.0.0.1:50001", Via: ViaOther})
	require.Equal(t, "r1's connections from 127.0.0.1:50001 reach PgBouncer, not through its proxy: connect with `DOUBLERUN_LEASE_DSN`", c.Reason)

	// r1 never seen, r2 around its proxy: r2's line, then r1's.
	c = run(true, Backend{Replica: "r2", PID: 7, Client: "127.0.0.1:1", Via: ViaOther})
	require.Contains(t, c.Reason, "r2's backends 7")
	c = run(true, ok[0])
	require.False(t, c.Holds)
	require.Equal(t, "no backend of r2 seen", c.Figure)
	require.Equal(t, "r2's backends never showed its application_name in pg_stat_activity, so no fault is known to reach them: connect with `DOUBLERUN_LEASE_DSN` (it sets application_name)", c.Reason)
}

func TestAndList(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", andList(nil))
	require.Equal(t, "1", andList([]string{"1"}))
	require.Equal(t, "1 and 2", andList([]string{"1", "2"}))
	require.Equal(t, "1, 2 and 3", andList([]string{"1", "2", "3"}))
}

func TestValidityWork(t *testing.T) {
	t.Parallel()
	run := func(events []Event, ivs ...Interval) Condition {
		h := History{Start: at(0), End: at(1000), Events: append(started("r1", "r2"), events...), Intervals: ivs}
		return condition(t, validity(h, vopts), ConditionWork)
	}
	fault := []Event{ev(EventFault, "r1", "X", 500), ev(EventHealed, "r1", "X", 600)}
	c := run(fault, iv("r1", 1, 100, 150), iv("r1", 1, 499, 500), iv("r2", 1, 500, 550), iv("r2", 1, 1000, 1050), iv("r2", 1, 1001, 1050))
	require.Equal(t, Condition{Name: ConditionWork, Holds: true, Figure: "2 pieces of leader work before the fault, 2 after"}, c, "a piece at the fault is after it; one after the end is not counted")
	c = run(fault, iv("r1", 1, 100, 150), iv("r2", 1, 500, 550), iv("r2", 1, 600, 650))
	require.False(t, c.Holds)
	require.Equal(t, "1 pieces of leader work before the fault, 2 after", c.Figure)
	require.Equal(t, `1 pieces of leader work before the fault and 2 after, under the floor of 2 on each side: the run was too short or too quiet to hold work across it; lengthen "duration", or shorten "poll_interval" or "work"`, c.Reason)
	require.False(t, run(fault, iv("r1", 1, 100, 150), iv("r1", 1, 200, 250), iv("r2", 1, 600, 650)).Holds)
	c = run(nil, iv("r1", 1, 499, 550), iv("r1", 1, 500, 550))
	require.Equal(t, Condition{Name: ConditionWork, Holds: true, Figure: "1 pieces of leader work before the middle of the run, 1 after"}, c)
	c = run(nil, iv("r1", 1, 0, 50), iv("r1", 1, 499, 550))
	require.False(t, c.Holds)
	require.Contains(t, c.Reason, "2 pieces of leader work before the middle of the run and 0 after, under the floor of 1 on each side")
	require.False(t, run(nil, iv("r1", 1, 500, 550), iv("r1", 1, 900, 950)).Holds)
}

func TestValidityNewerTerm(t *testing.T) {
	t.Parallel()
	// r1 leads under token 1 from before the run; FREEZE_LEADER strikes it
	// at 300 and heals at 700; r2 works and is granted as each case says.
	fenced := vopts
	fenced.StaleWritesOnly, fenced.FaultHold = true, 3*time.Second
	run := func(opts Options, grants []Grant, ivs ...Interval) Condition {
		h := History{Start: at(0), End: at(2000), Grants: append([]Grant{{Replica: "r1", Token: 1, At: at(-50)}}, grants...),
			Intervals: append(steady("r1", 0, 300), ivs...),
			Events:    append(started("r1", "r2"), ev(EventFault, "r1", "FREEZE_LEADER", 300), ev(EventHealed, "r1", "FREEZE_LEADER", 700))}
		return condition(t, validity(h, opts), ConditionNewerTerm)
	}
	took := []Grant{{Replica: "r2", Token: 2, At: at(300)}}
	const fix = `: the lease outlasted the fault, so no write could be stale; hold the fault longer than the lease's own TTL (set the scenario's "ttl" to it: the fault holds a TTL and a half)`
	t.Run("AGrantAtTheFaultCounts", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, Condition{Name: ConditionNewerTerm, Holds: true,
			Figure: "r2 was granted token 2 at +300ms, newer than token 1, the newest before FREEZE_LEADER began at +300ms (leader r1)"},
			run(fenced, took, iv("r2", 2, 300, 500)))
	})
	t.Run("AGrantBeforeTheFaultIsTheOldTerm", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, Condition{Name: ConditionNewerTerm, Figure: "no newer term after the fault",
			Reason: "no replica was granted a term newer than token 2 after FREEZE_LEADER began at +300ms (leader r1), held for 3s" + fix},
			run(fenced, []Grant{{Replica: "r2", Token: 2, At: at(299)}}, iv("r2", 2, 299, 500)))
	})
	t.Run("ASameTokenAfterTheFaultIsNoNewerTerm", func(t *testing.T) {
		t.Parallel()
		c := run(fenced, []Grant{{Replica: "r2", Token: 1, At: at(400)}}, iv("r2", 1, 400, 500))
		require.False(t, c.Holds)
		require.Contains(t, c.Reason, "no replica was granted a term newer than token 1 after")
	})
	t.Run("AnOldTermLeadingAfterTheFaultIsNoNewerTerm", func(t *testing.T) {
		t.Parallel()
		// r2 was granted token 1 too before the fault (two leaders of
		// one term): its work after the fault makes no one's write stale.
		require.False(t, run(fenced, []Grant{{Replica: "r2", Token: 1, At: at(-40)}}, iv("r2", 1, 400, 500)).Holds)
	})
	t.Run("WithoutTokensAnotherReplicaLeadingCounts", func(t *testing.T) {
		t.Parallel()
		tokenless := func(ivs ...Interval) Condition {
			h := History{Start: at(0), End: at(2000), Grants: []Grant{{Replica: "r1", At: at(-50)}, {Replica: "r2", At: at(-40)}},
				Intervals: append(steady("r1", 0, 2000), ivs...),
				Events:    append(started("r1", "r2"), ev(EventFault, "r1", "FREEZE_LEADER", 300), ev(EventHealed, "r1", "FREEZE_LEADER", 700))}
			return condition(t, validity(h, fenced), ConditionNewerTerm)
		}
		require.Equal(t, Condition{Name: ConditionNewerTerm, Holds: true,
			Figure: "r2 led at +300ms, after FREEZE_LEADER began at +300ms (leader r1); the replicas report no tokens"}, tokenless(iv("r2", 0, 300, 350)))
		require.Equal(t, Condition{Name: ConditionNewerTerm, Figure: "no newer term after the fault",
			Reason: "no replica other than r1 led after FREEZE_LEADER began at +300ms (leader r1), held for 3s" + fix}, tokenless(iv("r2", 0, 299, 350)),
			"r2's piece began before the fault; r1's own after it do not count")
	})
	t.Run("OnlyRunsJudgedByStaleWritesAlone", func(t *testing.T) {
		t.Parallel()
		opts := fenced
		opts.StaleWritesOnly = false
		require.Equal(t, Condition{Name: ConditionNewerTerm, Holds: true, Figure: "judged by its double-run too, not by stale writes alone"}, run(opts, nil))
	})
	t.Run("OnlyFaultsHeldToOutlastTheLease", func(t *testing.T) {
		t.Parallel()
		opts := fenced
		opts.FaultHold = 0
		require.Equal(t, Condition{Name: ConditionNewerTerm, Holds: true, Figure: "no fault held to outlast the lease"}, run(opts, nil), "a fault that acts once")
		opts.FaultHold = time.Nanosecond
		require.False(t, run(opts, nil).Holds)
		h := History{Start: at(0), End: at(1000), Events: started("r1", "r2"), Intervals: steady("r1", 0, 1000)}
		require.Equal(t, Condition{Name: ConditionNewerTerm, Holds: true, Figure: "no fault held to outlast the lease"},
			condition(t, validity(h, fenced), ConditionNewerTerm), "no fault")
	})
}

func TestValidity(t *testing.T) {
	t.Parallel()
	h := History{Start: at(0), End: at(1000), Events: started("r1", "r2"), Intervals: steady("r1", 0, 1000)}
	v := validity(h, vopts)
	require.True(t, v.Valid)
	require.Len(t, v.Conditions, 5)
	_, failed := v.Failed()
	require.False(t, failed)
	require.Equal(t, v, Analyze(h, vopts).Validity, "Analyze reports it")

	h.Events = started("r1")
	v = validity(h, vopts)
	require.False(t, v.Valid)
	c, failed := v.Failed()
	require.True(t, failed)
	require.Equal(t, ConditionContention, c.Name)
	h.Events = started("r1", "r2")
	h.Intervals = h.Intervals[:1]
	v = validity(h, vopts)
	require.False(t, v.Valid, "the last condition counts too")
	c, _ = v.Failed()
	require.Equal(t, ConditionWork, c.Name)
}
