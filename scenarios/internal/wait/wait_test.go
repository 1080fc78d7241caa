package wait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	begin := time.Now()
	require.NoError(t, Sleep(ctx, 20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(begin), 20*time.Millisecond, "waited d")
	require.NoError(t, Sleep(ctx, 0), "no wait at all")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	begin = time.Now()
	require.ErrorIs(t, Sleep(cancelled, time.Hour), context.Canceled)
	require.Less(t, time.Since(begin), time.Minute, "a cancelled context ends the wait")
	require.ErrorIs(t, Sleep(cancelled, -time.Second), context.Canceled)
}
