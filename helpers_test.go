package sluice_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// testingT is what the helpers need of a *testing.T or a *rapid.T.
type testingT interface {
	Helper()
	Fatalf(format string, args ...any)
}

// start is when every test begins: Wednesday 2026-03-04 10:00 UTC.
var start = storetest.Start

// newLimiter returns a Limiter over a fresh memstore and a manual clock set
// to start. Zero fields of opts get test defaults: a one-minute model
// deadline and 30 seconds of slack.
func newLimiter(t testingT, opts sluice.Options) (*sluice.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(start)
	if opts.Store == nil {
		opts.Store = memstore.New(memstore.Options{})
	}
	if opts.Clock == nil {
		opts.Clock = clock
	} else if c, ok := opts.Clock.(*storetest.Clock); ok {
		clock = c
	}
	if opts.ServerID == "" {
		opts.ServerID = "test-server"
	}
	if opts.DefaultTimeout == 0 {
		opts.DefaultTimeout = time.Minute
	}
	if opts.ExpirySlack == 0 {
		opts.ExpirySlack = 30 * time.Second
	}
	l, err := sluice.New(opts)
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	return l, clock
}

// withRules returns a Limiter enforcing rules.
func withRules(t *testing.T, rules ...sluice.Rule) (*sluice.Limiter, *storetest.Clock) {
	t.Helper()
	return newLimiter(t, sluice.Options{Rules: rules})
}

func admit(t *testing.T, l *sluice.Limiter, req sluice.Request) *sluice.Reservation {
	t.Helper()
	r, err := l.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("admit %+v: %v", req.Identity, err)
	}
	return r
}

// refuse expects req to be refused with an error matching target.
func refuse(t *testing.T, l *sluice.Limiter, req sluice.Request, target error) error {
	t.Helper()
	r, err := l.Admit(context.Background(), req)
	if err == nil {
		_ = r.Release(context.Background())
		t.Fatalf("admit %+v: admitted, want %v", req.Identity, target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("admit %+v: got %v, want %v", req.Identity, err, target)
	}
	return err
}

// admitN admits req until it is refused (at most max times) and returns how
// many were admitted.
func admitN(t *testing.T, l *sluice.Limiter, req sluice.Request, max int) int {
	t.Helper()
	for i := range max {
		if _, err := l.Admit(context.Background(), req); err != nil {
			if !errors.Is(err, sluice.ErrRateLimited) && !errors.Is(err, sluice.ErrBusy) && !errors.Is(err, sluice.ErrBudgetExhausted) {
				t.Fatalf("admission %d: %v", i, err)
			}
			return i
		}
	}
	return max
}

func settle(t *testing.T, r *sluice.Reservation, u sluice.Usage) {
	t.Helper()
	if err := r.Settle(context.Background(), u); err != nil {
		t.Fatalf("settle: %v", err)
	}
}

// effective returns what Limiter.Effective reports for rule and id.
func effective(t testingT, l *sluice.Limiter, id sluice.Identity, rule string) sluice.Headroom {
	t.Helper()
	all, err := l.Effective(context.Background(), id)
	if err != nil {
		t.Fatalf("effective: %v", err)
	}
	for _, e := range all {
		if e.Rule == rule {
			return e
		}
	}
	t.Fatalf("effective: no rule %q in %+v", rule, all)
	return sluice.Headroom{}
}

// applies reports whether rule applies to id.
func applies(t *testing.T, l *sluice.Limiter, id sluice.Identity, rule string) bool {
	t.Helper()
	all, err := l.Effective(context.Background(), id)
	if err != nil {
		t.Fatalf("effective: %v", err)
	}
	for _, e := range all {
		if e.Rule == rule {
			return true
		}
	}
	return false
}

// ident is the identity of API key k in workspace ws of org o, user u.
func ident(k string) sluice.Identity {
	return sluice.Identity{Org: "o", Workspace: "ws", User: "u", Key: k}
}

// byKey is a request of no cost for API key k.
func byKey(k string) sluice.Request { return sluice.Request{Identity: ident(k)} }

// tokens is a request for API key k bounded by in input and out output
// tokens.
func tokens(k string, in, out int64) sluice.Request {
	r := byKey(k)
	r.Max = sluice.Usage{InputTokens: in, OutputTokens: out}
	return r
}

func rpm(limit int64) sluice.Rule {
	return sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: limit, Window: time.Minute}
}

func tpm(limit int64) sluice.Rule {
	return sluice.Rule{Name: "tpm", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricTokens, Limit: limit, Window: time.Minute}
}

func inFlight(limit int64) sluice.Rule {
	return sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: limit}
}

func daily(metric sluice.Metric, limit int64) sluice.Rule {
	return sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: metric, Limit: limit, Period: sluice.PeriodDay}
}

func ptr[T any](v T) *T { return &v }

// waitTimers blocks until clock has n timers waiting: the sign that the
// goroutines under test are parked on it. It yields the processor rather
// than sleeping, and gives up after a few seconds of real time.
func waitTimers(t *testing.T, clock *storetest.Clock, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clock.Timers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("clock has %d timers waiting, want %d", clock.Timers(), n)
		}
		runtime.Gosched()
	}
}
