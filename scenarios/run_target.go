package scenarios

import (
	"context"
	"fmt"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/doublerun/doublerun/scenarios/fault"
	"github.com/doublerun/doublerun/scenarios/oracle"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// The run is the Target its fault acts on.
var _ fault.Target = (*run)(nil)

func (r *run) Setting() fault.Setting               { return r.sc.FaultSetting() }
func (r *run) Stack() *stack.Stack                  { return r.opts.Stack }
func (r *run) Database() string                     { return r.db }
func (r *run) Direct() stack.Endpoint               { return r.direct }
func (r *run) LeaseEndpoint() stack.Endpoint        { return r.leaseEP }
func (r *run) WorkEndpoint() stack.Endpoint         { return r.workEP }
func (r *run) Proxies(id string) []*toxiproxy.Proxy { return r.proxies[id] }

func (r *run) Leader(ctx context.Context) (fault.Replica, error) {
	id, pid, err := oracle.LatestWork(ctx, r.conn)
	if err != nil {
		return fault.Replica{}, err
	}
	for _, rp := range r.Replicas() {
		if rp.ID == id {
			rp.LeaseBackendPID = pid
			return rp, nil
		}
	}
	return fault.Replica{}, fmt.Errorf("leader %s is not a replica of this run", id)
}

func (r *run) Replicas() []fault.Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]fault.Replica, 0, len(r.replicas))
	for _, rp := range r.replicas {
		out = append(out, fault.Replica{ID: rp.id, PID: rp.cmd.Process.Pid})
	}
	return out
}

func (r *run) Event(ctx context.Context, kind, replica, detail string) error {
	_, err := oracle.LogEvent(ctx, r.conn, kind, replica, detail)
	return err
}

func (r *run) Killed(ctx context.Context, replica string) error {
	r.mu.Lock()
	for _, rp := range r.replicas {
		if rp.id == replica {
			rp.killed.Store(true)
		}
	}
	r.mu.Unlock()
	return r.Event(ctx, oracle.EventReplicaKilled, replica, "")
}
