package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// Faults that act on the network between the leader and its endpoints:
// toxics on the leader's toxiproxy proxies.

// PartitionLeader blackholes every byte between the leader and its
// endpoints (both directions, every proxy of the replica) for longer
// than the TTL, then heals. See "Partitions" in the package docs for
// what happens to open connections.
var PartitionLeader Fault = partitionLeader{}

type partitionLeader struct{ holding }

func (partitionLeader) Name() string           { return "PARTITION_LEADER" }
func (partitionLeader) Available(Setting) bool { return true }

func (partitionLeader) Inject(ctx context.Context, t Target) error {
	// timeout 0 holds every byte forever and never closes by itself: a
	// blackhole.
	return withToxics(ctx, t, "partition", "timeout", map[string]any{"timeout": 0})
}

// DelayLeader adds latency with jitter to both directions of every
// proxy of the leader for longer than the TTL, then removes it.
var DelayLeader Fault = delayLeader{}

type delayLeader struct{ holding }

func (delayLeader) Name() string           { return "DELAY_LEADER" }
func (delayLeader) Available(Setting) bool { return true }

// Delay is the one-way latency and jitter DELAY_LEADER adds in a run of
// setting s: a quarter and an eighth of the TTL, so a round trip costs
// about half the TTL and a statement of several round trips can outlast
// the lease.
func Delay(s Setting) (latency, jitter time.Duration) {
	return s.TTL / 4, s.TTL / 8
}

func (delayLeader) Inject(ctx context.Context, t Target) error {
	latency, jitter := Delay(t.Setting())
	return withToxics(ctx, t, "delay", "latency", map[string]any{
		"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds(),
	})
}

// withToxics adds a toxic of kind to both directions of every proxy of
// the leader, holds, and removes them again.
func withToxics(ctx context.Context, t Target, label, kind string, attrs map[string]any) error {
	l, err := strike(ctx, t)
	if err != nil {
		return err
	}
	proxies := t.Proxies(l.ID)
	if len(proxies) == 0 {
		return fmt.Errorf("replica %s has no proxies to put a %s on", l.ID, label)
	}
	var added []func(context.Context) error
	heal := func() error {
		rctx, cancel := recoverCtx(ctx)
		defer cancel()
		var errs []error
		for _, remove := range added {
			errs = append(errs, remove(rctx))
		}
		return errors.Join(errs...)
	}
	for _, p := range proxies {
		for _, stream := range []string{"upstream", "downstream"} {
			remove, err := addToxic(p, "chaos-"+label+"-"+stream, kind, stream, attrs)
			if err != nil {
				return errors.Join(err, heal())
			}
			added = append(added, remove)
		}
	}
	d := Hold(t.Setting())
	event(ctx, t, l.ID, "%s %v on %d proxies, for %s", label, attrs, len(proxies), d)
	herr := hold(ctx, d)
	if err := heal(); err != nil {
		return fmt.Errorf("heal %s: %w", label, err)
	}
	event(context.WithoutCancel(ctx), t, l.ID, "%s removed", label)
	return herr
}

// addToxic adds one toxic to p and returns what removes it.
func addToxic(p *toxiproxy.Proxy, name, kind, stream string, attrs map[string]any) (func(context.Context) error, error) {
	spec, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return nil, err
	}
	if _, err := p.Toxics.AddToxicJson(bytes.NewReader(spec)); err != nil {
		return nil, fmt.Errorf("proxy %s: add %s toxic: %w", p.Name, kind, err)
	}
	return func(ctx context.Context) error {
		if err := p.Toxics.RemoveToxic(ctx, name); err != nil {
			return fmt.Errorf("proxy %s: remove %s toxic: %w", p.Name, kind, err)
		}
		return nil
	}, nil
}
