package worker

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// TestBuildOutcomes checks, without a server, what each attempt comes to.
func TestBuildOutcomes(t *testing.T) {
	// Needs no server: runs first, before the parallel tests (main_test.go).
	delay := func(attempt int) time.Duration { return time.Duration(attempt) * time.Second }
	failed := errors.New("upstream said no")
	for _, tc := range []struct {
		name    string
		job     Job
		err     error
		state   string
		delayUS int64
	}{
		{"SuccessCompletes", Job{ID: 1, Attempt: 1, MaxAttempts: 3}, nil, StateCompleted, 0},
		{"SuccessOnTheLastAttemptCompletes", Job{ID: 2, Attempt: 3, MaxAttempts: 3}, nil, StateCompleted, 0},
		{"FailureIsRetriedAfterTheDelayForItsAttempt", Job{ID: 3, Attempt: 2, MaxAttempts: 3}, failed, StateAvailable, 2_000_000},
		{"FailureOfTheLastAttemptDiscards", Job{ID: 4, Attempt: 3, MaxAttempts: 3}, failed, StateDiscarded, 0},
		{"FailurePastTheLastAttemptDiscards", Job{ID: 5, Attempt: 4, MaxAttempts: 3}, failed, StateDiscarded, 0},
		{"OneAttemptOnlyDiscardsAtOnce", Job{ID: 6, Attempt: 1, MaxAttempts: 1}, failed, StateDiscarded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := buildOutcomes([]*Job{&tc.job}, []error{tc.err}, delay)
			want := outcomes{
				ids: []int64{tc.job.ID}, attempts: []int32{int32(tc.job.Attempt)}, states: []string{tc.state},
				errs: []pgtype.Text{{}}, delays: []int64{tc.delayUS},
			}
			if tc.err != nil {
				want.errs[0] = pgtype.Text{String: tc.err.Error(), Valid: true}
			}
			require.Equal(t, want, o)
		})
	}

	t.Run("KeepsTheOrderOfTheJobs", func(t *testing.T) {
		t.Parallel()
		jobs := []*Job{{ID: 9, Attempt: 1, MaxAttempts: 5}, {ID: 4, Attempt: 5, MaxAttempts: 5}, {ID: 7, Attempt: 2, MaxAttempts: 5}}
		o := buildOutcomes(jobs, []error{nil, failed, failed}, delay)
		require.Equal(t, []int64{9, 4, 7}, o.ids)
		require.Equal(t, []int32{1, 5, 2}, o.attempts)
		require.Equal(t, []string{StateCompleted, StateDiscarded, StateAvailable}, o.states)
		require.Equal(t, []int64{0, 0, 2_000_000}, o.delays)
		require.False(t, o.errs[0].Valid)
	})

	// Successes go by "id/attempt"; failures as a map of their outcomes, in
	// which a job claimed again by the same worker after its visibility
	// timeout, with two failures in one batch, keeps its newest attempt's.
	t.Run("EncodesSuccessesAndFailures", func(t *testing.T) {
		t.Parallel()
		jobs := []*Job{
			{ID: 3, Attempt: 2, MaxAttempts: 5}, {ID: 8, Attempt: 1, MaxAttempts: 5},
			{ID: 3, Attempt: 1, MaxAttempts: 5}, {ID: 5, Attempt: 4, MaxAttempts: 5},
		}
		o := buildOutcomes(jobs, []error{failed, errors.New(`said "no"` + "\n"), errors.New("older"), nil}, delay)
		ids, keys := o.succeeded()
		require.Equal(t, []int64{5}, ids)
		require.Equal(t, []string{"5/4"}, keys)
		var got map[string]struct {
			A int
			S string
			D int64
			E *string
		}
		require.NoError(t, json.Unmarshal([]byte(o.failed()), &got))
		require.Len(t, got, 2)
		require.Equal(t, 2, got["3"].A, "the newest attempt of job 3")
		require.Equal(t, StateAvailable, got["3"].S)
		require.Equal(t, "upstream said no", *got["3"].E)
		require.Equal(t, StateAvailable, got["8"].S)
		require.Equal(t, int64(1_000_000), got["8"].D)
		require.Equal(t, `said "no"`+"\n", *got["8"].E, "the error text survives the encoding")
	})
}
