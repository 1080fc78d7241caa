// Package wait is the one place the runner, its replicas and the fault
// catalog sleep: never without a way to cancel.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, and then returns ctx's error: nil when
// d passed first. A d of zero or less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
