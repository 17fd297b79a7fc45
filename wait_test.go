package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// outcome is what an admission running in its own goroutine returned.
type outcome struct {
	r   *sluice.Reservation
	err error
}

// admitAsync runs l.Admit(ctx, req) in a goroutine.
func admitAsync(ctx context.Context, l *sluice.Limiter, req sluice.Request) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		r, err := l.Admit(ctx, req)
		done <- outcome{r, err}
	}()
	return done
}

// pending fails the test if done already holds an outcome.
func pending(t *testing.T, done <-chan outcome, what string) {
	t.Helper()
	select {
	case o := <-done:
		t.Fatalf("%s: returned early: %v", what, o.err)
	default:
	}
}

// result waits for the outcome, giving up after a few seconds of real time.
func result(t *testing.T, done <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("admission still waiting")
		return outcome{}
	}
}

func waiting(k string, maxWait time.Duration) sluice.Request {
	r := byKey(k)
	r.MaxWait = maxWait
	return r
}

// A waiter at the head of its queue holds two timers: its MaxWait and its
// pause until RetryAfter.
const headTimers = 2

func TestLimiter_WaitAdmitsOnceRetryAfterHasPassed(t *testing.T) {
	l, clock := withRules(t, rpm(1))
	admit(t, l, byKey("k"))
	done := admitAsync(context.Background(), l, waiting("k", 2*time.Minute))
	waitTimers(t, clock, headTimers)
	pending(t, done, "before any time passed")

	clock.Advance(time.Minute - time.Millisecond)
	if n := clock.Timers(); n != headTimers {
		t.Fatalf("a timer fired before RetryAfter: %d left", n)
	}
	pending(t, done, "a millisecond before RetryAfter")

	clock.Advance(time.Millisecond)
	o := result(t, done)
	if o.err != nil {
		t.Fatalf("waiter: %v, want admitted after a minute", o.err)
	}
	if got := clock.Now().Sub(start); got != time.Minute {
		t.Fatalf("admitted after %v", got)
	}
	if st := l.Stats(); st.Admitted != 2 || st.Refused != 0 {
		t.Fatalf("stats %+v, want 2 admitted and a wait is no refusal", st)
	}
	refuse(t, l, byKey("k"), sluice.ErrRateLimited)
}

func TestLimiter_WaitRefusesAtOnce(t *testing.T) {
	tests := []struct {
		name    string
		rules   []sluice.Rule
		used    sluice.Request // admitted first
		req     sluice.Request
		maxWait time.Duration
		target  error
	}{
		{"RetryAfter longer than MaxWait", []sluice.Rule{rpm(1)}, byKey("k"), byKey("k"), 59 * time.Second, sluice.ErrRateLimited},
		{"budget", []sluice.Rule{daily(sluice.MetricRequests, 1)}, byKey("k"), byKey("k"), time.Hour, sluice.ErrBudgetExhausted},
		{"budget and rate", []sluice.Rule{rpm(1), daily(sluice.MetricRequests, 1)}, byKey("k"), byKey("k"), time.Hour, sluice.ErrBudgetExhausted},
		{"too large", []sluice.Rule{tpm(100)}, tokens("k", 1, 0), tokens("k", 100, 1), time.Hour, sluice.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock := withRules(t, tt.rules...)
			admit(t, l, tt.used)
			tt.req.MaxWait = tt.maxWait
			// Admit in this goroutine: a wait would block the test.
			done := admitAsync(context.Background(), l, tt.req)
			o := result(t, done)
			if !errors.Is(o.err, tt.target) {
				t.Fatalf("got %v, want %v at once", o.err, tt.target)
			}
			if n := clock.Timers(); n != 0 || !clock.Now().Equal(start) {
				t.Fatalf("%d timers set, clock at %v: the refusal waited", n, clock.Now())
			}
			if st := l.Stats(); st.Refused != 1 {
				t.Fatalf("stats %+v, want one refusal", st)
			}
		})
	}
}

func TestLimiter_WaitForConcurrencyWokenBySettle(t *testing.T) {
	for _, how := range []string{"settle", "release"} {
		t.Run(how, func(t *testing.T) {
			l, clock := withRules(t, inFlight(1))
			holder := admit(t, l, byKey("k"))
			done := admitAsync(context.Background(), l, waiting("k", 10*time.Second))
			waitTimers(t, clock, headTimers)
			pending(t, done, "while the slot is held")
			var err error
			if how == "settle" {
				err = holder.Settle(context.Background(), sluice.Usage{})
			} else {
				err = holder.Release(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
			o := result(t, done)
			if o.err != nil {
				t.Fatalf("waiter: %v, want admitted when the slot was freed", o.err)
			}
			if !clock.Now().Equal(start) {
				t.Fatalf("clock moved to %v", clock.Now())
			}
			refuse(t, l, byKey("k"), sluice.ErrBusy)
			settle(t, o.r, sluice.Usage{})
			admit(t, l, byKey("k"))
		})
	}
}

func TestLimiter_WaitForConcurrencyGivesUpAtMaxWait(t *testing.T) {
	l, clock := withRules(t, inFlight(1))
	admit(t, l, byKey("k"))
	done := admitAsync(context.Background(), l, waiting("k", 2500*time.Millisecond))
	// The busy hint is one second: the waiter retries each second, then
	// once more at its deadline.
	for _, step := range []time.Duration{time.Second, time.Second} {
		waitTimers(t, clock, headTimers)
		pending(t, done, "before MaxWait")
		clock.Advance(step)
	}
	waitTimers(t, clock, headTimers)
	clock.Advance(500 * time.Millisecond)
	o := result(t, done)
	var busy *sluice.BusyError
	if !errors.As(o.err, &busy) || busy.Rule != "inflight" {
		t.Fatalf("got %v, want busy after MaxWait", o.err)
	}
	if got := clock.Now().Sub(start); got != 2500*time.Millisecond {
		t.Fatalf("gave up after %v", got)
	}
}

// A refund frees room in a token bucket: a waiter need not sit out its
// whole RetryAfter.
func TestLimiter_WaitForRateWokenByRefund(t *testing.T) {
	l, clock := withRules(t, tpm(1000))
	big := admit(t, l, tokens("k", 200, 800))
	req := tokens("k", 100, 400)
	req.MaxWait = time.Minute
	done := admitAsync(context.Background(), l, req)
	waitTimers(t, clock, headTimers)
	pending(t, done, "with the bucket empty")
	settle(t, big, sluice.Usage{InputTokens: 200, OutputTokens: 100})
	if o := result(t, done); o.err != nil {
		t.Fatalf("waiter: %v, want admitted by the refund", o.err)
	}
	if !clock.Now().Equal(start) {
		t.Fatalf("clock moved to %v", clock.Now())
	}
}

func TestLimiter_WaitCancelledChargesNothing(t *testing.T) {
	for _, queued := range []bool{false, true} {
		name := "head of queue"
		if queued {
			name = "behind another waiter"
		}
		t.Run(name, func(t *testing.T) {
			l, clock := withRules(t, rpm(1))
			admit(t, l, byKey("k"))
			timers := 0
			var first <-chan outcome
			if queued {
				first = admitAsync(context.Background(), l, waiting("k", 5*time.Minute))
				timers += headTimers
				waitTimers(t, clock, timers)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := admitAsync(ctx, l, waiting("k", 5*time.Minute))
			if queued {
				timers++ // behind the head: its MaxWait only
			} else {
				timers += headTimers
			}
			waitTimers(t, clock, timers)
			cancel()
			o := result(t, done)
			if !errors.Is(o.err, context.Canceled) || o.r != nil {
				t.Fatalf("cancelled waiter: %v, want context.Canceled", o.err)
			}
			if e := effective(t, l, ident("k"), "rpm"); e.Used != 1 {
				t.Fatalf("used %d after a cancelled wait, want 1", e.Used)
			}
			clock.Advance(time.Minute)
			if queued {
				if o := result(t, first); o.err != nil {
					t.Fatalf("first waiter: %v", o.err)
				}
			} else {
				admit(t, l, byKey("k"))
			}
			refuse(t, l, byKey("k"), sluice.ErrRateLimited)
			if st := l.Stats(); st.Refused != 2 {
				t.Fatalf("stats %+v: want the cancelled wait and the refusal counted", st)
			}
			// The cancelled waiter left its queue: a new one is served.
			base := clock.Timers()
			done = admitAsync(context.Background(), l, waiting("k", 5*time.Minute))
			waitTimers(t, clock, base+headTimers)
			clock.Advance(time.Minute)
			if o := result(t, done); o.err != nil {
				t.Fatalf("new waiter: %v", o.err)
			}
		})
	}
}

func TestLimiter_WaitersServedInArrivalOrder(t *testing.T) {
	l, clock := withRules(t, rpm(1))
	admit(t, l, byKey("k"))
	const n = 4
	done := make([]<-chan outcome, n)
	timers := 0
	for i := range n {
		done[i] = admitAsync(context.Background(), l, waiting("k", 10*time.Minute))
		if i == 0 {
			timers += headTimers
		} else {
			timers++ // queued behind: its MaxWait timer only
		}
		waitTimers(t, clock, timers)
	}
	// Another key is not queued behind them.
	admit(t, l, byKey("other"))
	for i := range n {
		clock.Advance(time.Minute)
		o := result(t, done[i])
		if o.err != nil {
			t.Fatalf("waiter %d: %v", i, o.err)
		}
		for j := i + 1; j < n; j++ {
			pending(t, done[j], "a later waiter")
		}
		// The next waiter, now at the head, tries and sets its pause in
		// place of the one that fired.
		if i+1 < n {
			waitTimers(t, clock, n+1)
		}
	}
}

// A request without MaxWait still refuses at once while others wait.
func TestLimiter_NoWaitRefusesWhileOthersWait(t *testing.T) {
	l, clock := withRules(t, rpm(1))
	admit(t, l, byKey("k"))
	done := admitAsync(context.Background(), l, waiting("k", time.Hour))
	waitTimers(t, clock, headTimers)
	refuse(t, l, byKey("k"), sluice.ErrRateLimited)
	clock.Advance(time.Minute)
	if o := result(t, done); o.err != nil {
		t.Fatalf("waiter: %v", o.err)
	}
}
