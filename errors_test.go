package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/sluicehq/sluice/store/memstore"
)

// flakyStore is a memstore whose methods can be made to fail, as a store
// whose server went away would.
type flakyStore struct {
	// Store is a memstore, as a sluice.Store only: its own SettleAsync
	// would settle past the failures below.
	sluice.Store
	mu                           sync.Mutex
	admitErr, settleErr, peekErr error
	sweepErr                     error
	admitCalls, settleCalls      int
	// settleLost, when set, is returned by Settle after the settlement
	// was applied, as when a store's reply is lost on the way back.
	settleLost error
}

var _ sluice.Store = (*flakyStore)(nil)

func newFlakyStore() *flakyStore { return &flakyStore{Store: memstore.New(memstore.Options{})} }

// fail sets the error of each operation; nil makes it work again.
func (s *flakyStore) fail(admit, settle, peek, sweep error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admitErr, s.settleErr, s.peekErr, s.sweepErr = admit, settle, peek, sweep
}

func (s *flakyStore) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	s.mu.Lock()
	err := s.admitErr
	s.admitCalls++
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	return s.Store.Admit(ctx, now, b, results)
}

func (s *flakyStore) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	s.mu.Lock()
	err := s.settleErr
	s.settleCalls++
	lost := s.settleLost
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if lost != nil {
		if err := s.Store.Settle(ctx, now, b); err != nil {
			return err
		}
		return lost
	}
	return s.Store.Settle(ctx, now, b)
}

func (s *flakyStore) Peek(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) error {
	s.mu.Lock()
	err := s.peekErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Peek(ctx, now, b, results)
}

func (s *flakyStore) Sweep(ctx context.Context, now time.Time) (sluice.SweepResult, error) {
	s.mu.Lock()
	err := s.sweepErr
	s.mu.Unlock()
	if err != nil {
		return sluice.SweepResult{}, err
	}
	return s.Store.Sweep(ctx, now)
}

// refusals returns one refusal of each class from a real Limiter.
func refusals(t *testing.T) map[string]error {
	t.Helper()
	rps := sluice.Rule{Name: "per_second", Kind: sluice.KindRate, Subject: "key", Limit: 3, Window: time.Second}
	l, _ := withRules(t, rps, inFlight(1), daily(sluice.MetricTokens, 100))
	out := map[string]error{}
	r := admit(t, l, byKey("busy"))
	out["busy"] = refuse(t, l, byKey("busy"), sluice.ErrBusy)
	settle(t, r, sluice.Usage{})
	for range 3 {
		settle(t, admit(t, l, byKey("rate")), sluice.Usage{})
	}
	out["rate"] = refuse(t, l, byKey("rate"), sluice.ErrRateLimited)
	out["too large"] = refuse(t, l, tokens("big", 60, 41), sluice.ErrTooLarge)
	settle(t, admit(t, l, tokens("budget", 60, 40)), sluice.Usage{InputTokens: 60, OutputTokens: 40})
	out["budget"] = refuse(t, l, tokens("budget", 1, 0), sluice.ErrBudgetExhausted)
	return out
}

func TestErrors_IsAndAs(t *testing.T) {
	got := refusals(t)
	sentinels := map[string]error{
		"rate": sluice.ErrRateLimited, "busy": sluice.ErrBusy, "budget": sluice.ErrBudgetExhausted,
		"too large": sluice.ErrTooLarge,
	}
	all := []error{sluice.ErrRateLimited, sluice.ErrBusy, sluice.ErrBudgetExhausted, sluice.ErrTooLarge, sluice.ErrStoreUnavailable, sluice.ErrInvalidUsage}
	for name, err := range got {
		t.Run(name, func(t *testing.T) {
			wrapped := fmt.Errorf("call model: %w", err)
			for _, target := range all {
				want := target == sentinels[name]
				if errors.Is(wrapped, target) != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, target, !want, want)
				}
			}
			var (
				rate   *sluice.RateLimitError
				busy   *sluice.BusyError
				budget *sluice.BudgetError
				large  *sluice.TooLargeError
				store  *sluice.StoreError
			)
			as := map[string]bool{
				"rate":      errors.As(wrapped, &rate),
				"busy":      errors.As(wrapped, &busy),
				"budget":    errors.As(wrapped, &budget),
				"too large": errors.As(wrapped, &large),
				"store":     errors.As(wrapped, &store),
			}
			for class, ok := range as {
				if ok != (class == name) {
					t.Errorf("errors.As to the %s error: %v", class, ok)
				}
			}
		})
	}
	var rate *sluice.RateLimitError
	if errors.As(got["rate"], &rate); rate.Rule != "per_second" || rate.Kind != sluice.KindRate || rate.Limit != 3 || rate.Remaining != 0 || rate.RetryAfter != 334*time.Millisecond {
		t.Errorf("rate refusal %+v", rate.Refusal)
	}
	var busy *sluice.BusyError
	if errors.As(got["busy"], &busy); busy.Rule != "inflight" || busy.Kind != sluice.KindConcurrency || busy.Limit != 1 || busy.Used != 1 || busy.RetryAfter != time.Second {
		t.Errorf("busy refusal %+v", busy.Refusal)
	}
	var budget *sluice.BudgetError
	if errors.As(got["budget"], &budget); budget.Rule != "daily" || budget.Used != 100 || budget.Limit != 100 || budget.Remaining != 0 ||
		!budget.ResetAt.Equal(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)) || budget.Period != sluice.PeriodDay || budget.Metric != sluice.MetricTokens {
		t.Errorf("budget refusal %+v", budget.Refusal)
	}
	var large *sluice.TooLargeError
	if errors.As(got["too large"], &large); large.Rule != "daily" || large.Estimate != 101 || large.Limit != 100 || large.Metric != sluice.MetricTokens {
		t.Errorf("too large refusal %+v", large)
	}
}

func TestErrors_MessagesNameRuleAndReset(t *testing.T) {
	got := refusals(t)
	tests := []struct {
		name string
		want []string
	}{
		{"rate", []string{`"per_second"`, "3 requests per second", "retry in 334 milliseconds (at 2026-03-04T10:00:01Z)"}},
		{"busy", []string{`"inflight"`, "1 call in flight", "retry in 1 second (at 2026-03-04T10:00:01Z)"}},
		{"budget", []string{`"daily"`, "100 of 100 tokens", "this day", "resets at 2026-03-05T00:00:00Z"}},
		{"too large", []string{`"daily"`, "101 tokens", "100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := got[tt.name].Error()
			for _, s := range tt.want {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not contain %q", msg, s)
				}
			}
		})
	}
}

// A refusal's HTTP message says its outcome once, with no Go duration
// ("1m0s"), and a retry's instant beside its wait.
func TestRefusalOf_MessagesSayItOnceInWords(t *testing.T) {
	got := refusals(t)
	for name, want := range map[string]string{
		"rate":      `Rate limit "per_second" reached: 3 requests per second; retry in 334 milliseconds (at 2026-03-04T10:00:01Z).`,
		"busy":      `Concurrency limit "inflight" reached: 1 call in flight; retry in 1 second (at 2026-03-04T10:00:01Z).`,
		"budget":    `Budget "daily" exhausted: 100 of 100 tokens used this day; resets at 2026-03-05T00:00:00Z. Do not retry before the reset.`,
		"too large": `Request can never fit rule "daily": needs 101 tokens, the most it admits is 100 tokens. Lower max_tokens or shorten the prompt.`,
	} {
		hr, ok := sluicehttp.RefusalOf(got[name])
		if !ok || hr.Message != want {
			t.Errorf("%s: message %q, want %q", name, hr.Message, want)
		}
	}
	l, _ := withRules(t, rpm(1))
	admit(t, l, byKey("k"))
	hr, _ := sluicehttp.RefusalOf(refuse(t, l, byKey("k"), sluice.ErrRateLimited))
	if !strings.Contains(hr.Message, " per minute; retry in ") || strings.Contains(hr.Message, "1m0s") {
		t.Errorf("a rule per minute: %q, want it said in words", hr.Message)
	}
}

// A budget in a time zone still says when it resets in RFC 3339, in UTC.
func TestBudgetError_ResetAtIsRFC3339UTC(t *testing.T) {
	b := daily(sluice.MetricRequests, 1)
	b.TimeZone = "America/New_York"
	l, _ := withRules(t, b)
	admit(t, l, byKey("k"))
	err := refuse(t, l, byKey("k"), sluice.ErrBudgetExhausted)
	// 2026-03-05 00:00 in New York (EST, UTC-5) is 05:00 UTC.
	if !strings.Contains(err.Error(), "resets at 2026-03-05T05:00:00Z") {
		t.Fatalf("message %q, want the reset at 2026-03-05T05:00:00Z", err)
	}
}

func TestStoreError_WrapsStoreError(t *testing.T) {
	down := errors.New("connection refused")
	s := newFlakyStore()
	l, _ := newLimiter(t, sluice.Options{Store: s, Rules: []sluice.Rule{rpm(1)}})
	s.fail(down, nil, down, down)

	_, err := l.Admit(context.Background(), byKey("k"))
	var se *sluice.StoreError
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, down) || !errors.As(err, &se) || se.Op != "admit" {
		t.Fatalf("admit with the store down: %#v", err)
	}
	for _, msg := range []string{"store unavailable", "admit", "connection refused"} {
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("message %q does not contain %q", err, msg)
		}
	}
	if errors.Is(err, sluice.ErrRateLimited) {
		t.Error("a store error matches ErrRateLimited")
	}
	if _, err := l.Effective(context.Background(), ident("k")); !errors.Is(err, down) || !errors.As(err, &se) || se.Op != "peek" {
		t.Fatalf("effective with the store down: %v", err)
	}
	if _, err := l.Fit(context.Background(), tokens("k", 1, 1)); !errors.Is(err, down) || !errors.As(err, &se) || se.Op != "peek" {
		t.Fatalf("fit with the store down: %v", err)
	}
	if _, err := l.Sweep(context.Background()); !errors.Is(err, down) || !errors.As(err, &se) || se.Op != "sweep" {
		t.Fatalf("sweep with the store down: %v", err)
	}
	if st := l.Stats(); st.Refused != 1 || st.Admitted != 0 {
		t.Fatalf("stats %+v, want one refusal", st)
	}

	// Back up: the refused admission charged nothing.
	s.fail(nil, nil, nil, nil)
	admit(t, l, byKey("k"))
}

func TestReservation_SettleAfterStoreErrorCanBeRetried(t *testing.T) {
	down := errors.New("i/o timeout")
	s := newFlakyStore()
	l, _ := newLimiter(t, sluice.Options{Store: s, Rules: []sluice.Rule{daily(sluice.MetricTokens, 1000), inFlight(1)}})
	r := admit(t, l, tokens("k", 100, 200))

	s.fail(nil, down, nil, nil)
	err := r.Settle(context.Background(), sluice.Usage{InputTokens: 100, OutputTokens: 50})
	var se *sluice.StoreError
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, down) || !errors.As(err, &se) || se.Op != "settle" {
		t.Fatalf("settle with the store down: %#v", err)
	}
	if err := r.Release(context.Background()); !errors.Is(err, down) {
		t.Fatalf("release with the store down: %v, want the store error again", err)
	}
	if used := effective(t, l, ident("k"), "daily").Used; used != 300 {
		t.Fatalf("used %d after failed settles, want the 300 still reserved", used)
	}

	s.fail(nil, nil, nil, nil)
	settle(t, r, sluice.Usage{InputTokens: 100, OutputTokens: 50})
	if used := effective(t, l, ident("k"), "daily").Used; used != 150 {
		t.Fatalf("used %d after the retried settle, want 150", used)
	}
	// The lease is free and a third settle is a no-op.
	settle(t, r, sluice.Usage{InputTokens: 900})
	if used := effective(t, l, ident("k"), "daily").Used; used != 150 {
		t.Fatalf("used %d after settling again, want 150", used)
	}
	admit(t, l, tokens("k", 1, 1))
}

// A settlement that fails in the store and is retried is one overrun, not
// two: the hook feeds logs and the audit trail.
func TestReservation_SettleRetryCountsOverrunOnce(t *testing.T) {
	var overruns []sluice.Overrun
	s := newFlakyStore()
	l, _ := newLimiter(t, sluice.Options{Store: s, Rules: []sluice.Rule{daily(sluice.MetricTokens, 1000)},
		OnOverrun: func(o sluice.Overrun) { overruns = append(overruns, o) }})
	r := admit(t, l, tokens("k", 10, 10))
	s.fail(nil, errors.New("down"), nil, nil)
	if err := r.Settle(context.Background(), sluice.Usage{InputTokens: 10, OutputTokens: 500}); err == nil {
		t.Fatal("settle succeeded with the store down")
	}
	s.fail(nil, nil, nil, nil)
	settle(t, r, sluice.Usage{InputTokens: 10, OutputTokens: 500})
	if got := l.Stats().Overruns; got != 1 || len(overruns) != 1 {
		t.Fatalf("one overrun counted %d times, reported %d times", got, len(overruns))
	}
}

// Usage no call could produce, negative or above the ceiling, is not
// believed: each reservation is charged what it reserved (its lease freed),
// the value is never counted, and Settle says so with ErrInvalidUsage.
func TestReservation_SettleImpossibleUsageChargesReservation(t *testing.T) {
	l, _ := withRules(t, daily(sluice.MetricTokens, 1000), inFlight(1))
	used := int64(0)
	for _, u := range []sluice.Usage{
		{InputTokens: -1}, {OutputTokens: -1}, {CachedInputTokens: -1}, {CacheWriteTokens: -1}, {Cost: -1},
		{Custom: map[string]int64{"audio_seconds": -3}},
		{OutputTokens: math.MaxInt64}, {InputTokens: sluice.MaxTokens + 1}, {CachedInputTokens: sluice.MaxTokens + 1},
		{CacheWriteTokens: math.MaxInt64}, {Cost: sluice.MaxCost + 1}, {Custom: map[string]int64{"audio_seconds": sluice.MaxTokens + 1}},
	} {
		r := admit(t, l, tokens("k", 10, 10))
		err := r.Settle(context.Background(), u)
		if !errors.Is(err, sluice.ErrInvalidUsage) || !strings.HasPrefix(err.Error(), "settle: ") {
			t.Errorf("settle %+v: %v, want ErrInvalidUsage prefixed by settle", u, err)
		}
		used += 20
		if got := effective(t, l, ident("k"), "daily").Used; got != used {
			t.Fatalf("after settling %+v: used %d, want %d (the reservation charged)", u, got, used)
		}
		// The lease is free: the reservation is settled.
		settle(t, admit(t, l, tokens("k", 0, 0)), sluice.Usage{})
		if err := r.Settle(context.Background(), sluice.Usage{InputTokens: 1}); err != nil {
			t.Fatalf("settling again: %v", err)
		}
	}
	// SettleAsync tells done the same, once settled.
	r := admit(t, l, tokens("k", 10, 10))
	errc := make(chan error, 1)
	r.SettleAsync(context.Background(), sluice.Usage{OutputTokens: math.MaxInt64}, func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, sluice.ErrInvalidUsage) {
		t.Fatalf("SettleAsync: %v, want ErrInvalidUsage", err)
	}
	if got := effective(t, l, ident("k"), "daily").Used; got != used+20 {
		t.Fatalf("after SettleAsync: used %d, want %d", got, used+20)
	}
	// At the ceilings, usage is believed.
	r = admit(t, l, tokens("k", 10, 10))
	if err := r.Settle(context.Background(), sluice.Usage{InputTokens: sluice.MaxTokens, Cost: sluice.MaxCost}); err != nil {
		t.Fatalf("settle at the ceilings: %v", err)
	}
}

// An estimate above the ceiling is refused, as a negative one is, and
// charges nothing.
func TestLimiter_AdmitRefusesEstimateAboveCeiling(t *testing.T) {
	l, _ := withRules(t, daily(sluice.MetricTokens, math.MaxInt64))
	for _, max := range []sluice.Usage{
		{OutputTokens: sluice.MaxTokens + 1}, {InputTokens: math.MaxInt64}, {Cost: sluice.MaxCost + 1},
		{Custom: map[string]int64{"x": math.MaxInt64}},
	} {
		req := tokens("k", 0, 0)
		req.Max = max
		if _, err := l.Admit(context.Background(), req); !errors.Is(err, sluice.ErrInvalidUsage) {
			t.Errorf("admit with Max %+v: %v, want ErrInvalidUsage", max, err)
		}
		req.Max, req.Expected = sluice.Usage{OutputTokens: 1}, max
		if _, err := l.Admit(context.Background(), req); !errors.Is(err, sluice.ErrInvalidUsage) {
			t.Errorf("admit with Expected %+v: %v, want ErrInvalidUsage", max, err)
		}
	}
	if got := effective(t, l, ident("k"), "daily").Used; got != 0 {
		t.Fatalf("used %d after refused estimates, want 0", got)
	}
	settle(t, admit(t, l, tokens("k", sluice.MaxTokens, sluice.MaxTokens)), sluice.Usage{})
}

// TestSettle_RetryAfterLostReply settles through a store that applies the
// settlement and then reports an error, as one whose reply was lost would:
// the retry does not move the token bucket a second time, for a refund or
// for an overrun. (A batch with a budget or a lease is settled once by the
// store's own record of it; a batch of rate charges alone has none.)
func TestSettle_RetryAfterLostReply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output int64
		want   int64 // tokens counted by the bucket
	}{
		{"refund", 10, 110},
		{"overrun", 150, 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFlakyStore()
			l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{
				{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: 100_000, Window: time.Minute},
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := sluice.Identity{Key: "k"}
			r, err := l.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100, OutputTokens: 100}})
			if err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			s.settleLost = errors.New("reply lost")
			s.mu.Unlock()
			used := sluice.Usage{InputTokens: 100, OutputTokens: tc.output}
			if err := r.Settle(ctx, used); err == nil {
				t.Fatal("settle through a lost reply succeeded")
			}
			s.mu.Lock()
			s.settleLost = nil
			s.mu.Unlock()
			if err := r.Settle(ctx, used); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if err := r.Settle(ctx, used); err != nil {
				t.Fatalf("third settle: %v", err)
			}
			eff, err := l.Effective(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range eff {
				// The bucket refills while the test runs: allow a token.
				if e.Used != tc.want && e.Used != tc.want-1 {
					t.Errorf("%s counts %d, want %d", e.Rule, e.Used, tc.want)
				}
			}
		})
	}
}

// SettleAsync settles as Settle does and tells done: before it returns over
// the memory store; from a goroutine over a store that cannot settle
// asynchronously, with the store's error, after which it may be retried.
func TestReservation_SettleAsync(t *testing.T) {
	settleAsync := func(r *sluice.Reservation, u sluice.Usage) error {
		done := make(chan error, 1)
		r.SettleAsync(context.Background(), u, func(err error) { done <- err })
		return <-done
	}
	t.Run("memory", func(t *testing.T) {
		l, _ := withRules(t, daily(sluice.MetricTokens, 1000))
		r := admit(t, l, tokens("k", 100, 200))
		called := false
		r.SettleAsync(context.Background(), sluice.Usage{InputTokens: 100, OutputTokens: 50}, func(err error) {
			if err != nil {
				t.Errorf("settle: %v", err)
			}
			called = true
		})
		if !called {
			t.Fatal("done was not called before SettleAsync returned")
		}
		if err := settleAsync(r, sluice.Usage{InputTokens: 900}); err != nil {
			t.Fatalf("settling again: %v", err)
		}
		if used := effective(t, l, ident("k"), "daily").Used; used != 150 {
			t.Fatalf("used %d, want 150 settled once", used)
		}
	})
	t.Run("store error then retry", func(t *testing.T) {
		down := errors.New("i/o timeout")
		s := newFlakyStore()
		l, _ := newLimiter(t, sluice.Options{Store: s, Rules: []sluice.Rule{daily(sluice.MetricTokens, 1000), inFlight(1)}})
		r := admit(t, l, tokens("k", 100, 200))
		s.fail(nil, down, nil, nil)
		var se *sluice.StoreError
		if err := settleAsync(r, sluice.Usage{InputTokens: 100, OutputTokens: 50}); !errors.Is(err, down) || !errors.As(err, &se) || se.Op != "settle" {
			t.Fatalf("settle with the store down: %#v", err)
		}
		s.fail(nil, nil, nil, nil)
		if err := settleAsync(r, sluice.Usage{InputTokens: 100, OutputTokens: 50}); err != nil {
			t.Fatalf("retried settle: %v", err)
		}
		if used := effective(t, l, ident("k"), "daily").Used; used != 150 {
			t.Fatalf("used %d after the retried settle, want 150", used)
		}
		admit(t, l, tokens("k", 1, 1)) // the lease is free
	})
	t.Run("invalid usage", func(t *testing.T) {
		l, _ := withRules(t, daily(sluice.MetricTokens, 1000))
		r := admit(t, l, tokens("k", 10, 10))
		if err := settleAsync(r, sluice.Usage{InputTokens: -1}); !errors.Is(err, sluice.ErrInvalidUsage) {
			t.Fatalf("negative usage: %v, want ErrInvalidUsage", err)
		}
	})
}

// A cost rule's refusal says its money in dollars, in the error and in the
// HTTP message: "$1.01 of $1.00", never micro-dollars.
func TestErrors_CostInDollars(t *testing.T) {
	monthly := sluice.Rule{Name: "monthly", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricCost, Limit: 1_000_000, Period: sluice.PeriodMonth}
	rate := sluice.Rule{Name: "spend_rate", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricCost, Limit: 5_000_000, Window: time.Minute}
	l, _ := withRules(t, monthly, rate)
	costs := func(k string, c int64) sluice.Request {
		r := byKey(k)
		r.Max = sluice.Usage{Cost: c}
		return r
	}
	settle(t, admit(t, l, costs("a", 1_000_000)), sluice.Usage{Cost: 1_010_000})
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"exhausted", refuse(t, l, costs("a", 1), sluice.ErrBudgetExhausted), "$1.01 of $1.00 used this month"},
		{"too large", refuse(t, l, costs("b", 7_500_000), sluice.ErrTooLarge), "needs $7.50, the most it admits is $1.00"},
	}
	for _, tt := range tests {
		if !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, tt.err, tt.want)
		}
		hr, _ := sluicehttp.RefusalOf(tt.err)
		if !strings.Contains(hr.Message, tt.want) {
			t.Errorf("%s: message %q, want %q", tt.name, hr.Message, tt.want)
		}
	}
}
