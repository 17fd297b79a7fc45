package sluicehttp_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// newLimiter returns a Limiter over a fresh memstore (unless opts names a
// store) and a manual clock set to storetest.Start, with a one-minute
// model deadline.
func newLimiter(t *testing.T, opts sluice.Options) (*sluice.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(storetest.Start)
	if opts.Store == nil {
		opts.Store = memstore.New(memstore.Options{})
	}
	opts.Clock, opts.ServerID, opts.DefaultTimeout = clock, "test-server", time.Minute
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

// admit admits req, or fails the test.
func admit(t *testing.T, l *sluice.Limiter, req sluice.Request) *sluice.Reservation {
	t.Helper()
	r, err := l.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("admit %+v: %v", req.Identity, err)
	}
	return r
}

// effective returns what Limiter.Effective reports for rule and id.
func effective(t *testing.T, l *sluice.Limiter, id sluice.Identity, rule string) sluice.Headroom {
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

// flakyStore is a memstore whose Admit or Settle fails, as a store whose
// server went away would.
type flakyStore struct {
	// Store is a memstore, as a sluice.Store only: its own SettleAsync
	// would settle past the failures below.
	sluice.Store
	admitErr, settleErr error
}

func newFlakyStore() *flakyStore { return &flakyStore{Store: memstore.New(memstore.Options{})} }

// fail sets the error of Admit and of Settle; nil makes it work again.
func (s *flakyStore) fail(admit, settle error) { s.admitErr, s.settleErr = admit, settle }

func (s *flakyStore) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	if s.admitErr != nil {
		return false, s.admitErr
	}
	return s.Store.Admit(ctx, now, b, results)
}

func (s *flakyStore) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	if s.settleErr != nil {
		return s.settleErr
	}
	return s.Store.Settle(ctx, now, b)
}
