package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

var (
	capOne      = sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1}
	dailyBudget = sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Limit: 1000, Period: sluice.PeriodDay, Metric: sluice.MetricTokens}
	perMinute   = sluice.Rule{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 100, Window: time.Minute}
)

// TestPhantomAdmission_CancelledWhenItsAnswerIsLate: Redis applies an
// admission whose answer is held past its caller's deadline; the
// cancellation the store sends then undoes it, whether it knows the
// admission by its reservation record or, without a budget, by its lease.
func TestPhantomAdmission_CancelledWhenItsAnswerIsLate(t *testing.T) {
	t.Parallel()
	redisURL(t)
	srv := startRedis(t)
	proxy := startDelayProxy(t, srv.addr())
	url := "redis://" + proxy.addr() + "/0"
	for _, tc := range []struct {
		name  string
		rules []sluice.Rule
	}{
		{"record", []sluice.Rule{capOne, dailyBudget, perMinute}},
		{"lease", []sluice.Rule{capOne, perMinute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := freePrefixFor(t, url)
			h := harness(t, redisstore.Options{URL: url, Client: pipelinedClient(t, url), Prefix: prefix, PinTime: true})
			s := h.Store.(*redisstore.Store)
			l := h.Limiter(tc.rules...)
			proxy.hold(time.Second)
			defer proxy.hold(0)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err := l.Admit(ctx, storetest.Tokens("k", 10, 0))
			cancel()
			if !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("admission whose answer is held: %v, want store unavailable", err)
			}
			waitFor(t, 5*time.Second, "the phantom admission cancelled", func() bool { return s.Stats().Phantoms == 1 })
			proxy.hold(0)
			if reserved, leases := holds(t, url, prefix); reserved != 0 || leases != 0 {
				t.Fatalf("after the cancellation: %d reserved, %d leases, want none", reserved, leases)
			}
			if used, _ := h.Used(l, storetest.Key("k").Identity, "rpm"); used != 0 {
				t.Fatalf("rate bucket drawn by %d after the cancellation, want 0", used)
			}
			h.Settle(h.Admit(l, storetest.Tokens("k", 10, 0)), sluice.Usage{InputTokens: 4})
			if st := s.Stats(); st.LateAdmissions != 0 || st.CancelsAbandoned != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestCancel_NeverRefundsARefusedAdmission: an admission refused at a
// limit, whose answer comes too late, is cancelled too; the cancellation
// finds nothing applied and gives nothing back: the rate bucket and the
// budget stay exactly at their limits.
func TestCancel_NeverRefundsARefusedAdmission(t *testing.T) {
	t.Parallel()
	redisURL(t)
	srv := startRedis(t)
	proxy := startDelayProxy(t, srv.addr())
	url := "redis://" + proxy.addr() + "/0"
	perHour := sluice.Rule{Name: "rph", Kind: sluice.KindRate, Subject: "key", Limit: 2, Window: time.Hour}
	small := sluice.Rule{Name: "small", Kind: sluice.KindBudget, Subject: "workspace", Limit: 20, Period: sluice.PeriodDay, Metric: sluice.MetricTokens}
	five := sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 5}
	for _, tc := range []struct {
		name    string
		rules   []sluice.Rule
		budget  bool
		refusal error
	}{
		{"record", []sluice.Rule{perHour, small, five}, true, sluice.ErrBudgetExhausted},
		{"lease", []sluice.Rule{perHour, five}, false, sluice.ErrRateLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := freePrefixFor(t, url)
			h := harness(t, redisstore.Options{URL: url, Client: pipelinedClient(t, url), Prefix: prefix, PinTime: true})
			s := h.Store.(*redisstore.Store)
			l := h.Limiter(tc.rules...)
			held := []*sluice.Reservation{h.Admit(l, storetest.Tokens("k", 10, 0)), h.Admit(l, storetest.Tokens("k", 10, 0))}
			proxy.hold(time.Second)
			defer proxy.hold(0)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err := l.Admit(ctx, storetest.Tokens("k", 10, 0))
			cancel()
			if !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("refused admission whose answer is held: %v, want store unavailable", err)
			}
			waitFor(t, 5*time.Second, "the cancellation done", func() bool { return redisstore.OutstandingCancels(s) == 0 })
			proxy.hold(0)
			// Not late: the admission was refused on its limits.
			if st := s.Stats(); st.Phantoms != 0 || st.LateAdmissions != 0 || st.CancelsAbandoned != 0 {
				t.Fatalf("stats %+v: a refused admission was cancelled as applied", st)
			}
			if used, remaining := h.Used(l, storetest.Key("k").Identity, "rph"); used != 2 || remaining != 0 {
				t.Fatalf("rate bucket %d used, %d remaining, want it at its limit", used, remaining)
			}
			if tc.budget {
				if used, _ := h.Used(l, storetest.Key("k").Identity, "small"); used != 20 {
					t.Fatalf("budget %d used, want 20", used)
				}
			}
			if _, leases := holds(t, url, prefix); leases != 2 {
				t.Fatalf("%d leases, want the 2 admitted", leases)
			}
			h.Refuse(l, storetest.Tokens("k", 10, 0), tc.refusal)
			for _, r := range held {
				h.Settle(r, sluice.Usage{InputTokens: 10})
			}
		})
	}
}

// TestLateAdmission_RefusedByRedis: an admission that reaches Redis after
// its caller's deadline (Redis busy meanwhile) is refused by the script,
// with PinTime too (the give-up time is read on the server's own clock).
func TestLateAdmission_RefusedByRedis(t *testing.T) {
	t.Parallel()
	redisURL(t)
	srv := startRedis(t)
	url := "redis://" + srv.addr() + "/0"
	prefix := freePrefixFor(t, url)
	h := harness(t, redisstore.Options{URL: url, Prefix: prefix, PinTime: true})
	s := h.Store.(*redisstore.Store)
	l := h.Limiter(capOne, dailyBudget, perMinute)
	busy := busyRedis(t, url, 600*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := l.Admit(ctx, storetest.Tokens("k", 10, 0))
	cancel()
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("admission while Redis is busy: %v, want store unavailable", err)
	}
	<-busy
	waitFor(t, 5*time.Second, "the late admission refused", func() bool { return s.Stats().LateAdmissions == 1 })
	waitFor(t, 5*time.Second, "the cancellation done", func() bool { return redisstore.OutstandingCancels(s) == 0 })
	if st := s.Stats(); st.Phantoms != 0 || st.CancelsAbandoned != 0 {
		t.Fatalf("stats %+v", st)
	}
	if reserved, leases := holds(t, url, prefix); reserved != 0 || leases != 0 {
		t.Fatalf("after the late admission: %d reserved, %d leases, want none", reserved, leases)
	}
	h.Settle(h.Admit(l, storetest.Tokens("k", 10, 0)), sluice.Usage{InputTokens: 4})
}

// TestStall_NoPhantomHolds stalls Redis (SIGSTOP) for 3s under load with a
// concurrency cap of 1 and a budget: admissions during the stall fail with
// the store error, and two seconds after Redis resumes the cap is free and
// no budget holds anything for them.
func TestStall_NoPhantomHolds(t *testing.T) {
	t.Parallel()
	redisURL(t)
	srv := startRedis(t)
	url := "redis://" + srv.addr() + "/0"
	prefix := freePrefixFor(t, url)
	s := openStore(t, redisstore.Options{URL: url, Prefix: prefix, Timeout: 250 * time.Millisecond})
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{capOne, {Name: "daily", Kind: sluice.KindBudget,
		Subject: "workspace", Limit: 1 << 40, Period: sluice.PeriodDay, Metric: sluice.MetricTokens}}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		stop                         atomic.Bool
		admitted, storeErrs, settled atomic.Int64
		other                        atomic.Value
		wg                           sync.WaitGroup
	)
	ctx := context.Background()
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				r, err := l.Admit(ctx, storetest.Tokens("k", 10, 0))
				switch {
				case err == nil:
					admitted.Add(1)
					// A settlement that fails is retried (settling twice
					// settles once).
					for r.Settle(ctx, sluice.Usage{InputTokens: 7}) != nil {
						time.Sleep(20 * time.Millisecond)
					}
					settled.Add(7)
				case errors.Is(err, sluice.ErrBusy):
					time.Sleep(time.Millisecond)
				case errors.Is(err, sluice.ErrStoreUnavailable):
					storeErrs.Add(1)
				default:
					other.Store(err)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	before := admitted.Load()
	time.Sleep(3 * time.Second)
	during := storeErrs.Load()
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if err, _ := other.Load().(error); err != nil {
		t.Fatalf("admission failed with %v", err)
	}
	if before == 0 || during == 0 {
		t.Fatalf("%d admitted before the stall, %d store errors during it", before, during)
	}
	time.Sleep(time.Until(resumed.Add(2 * time.Second)))
	reserved, leases := holds(t, url, prefix)
	st := s.Stats()
	t.Logf("%d admitted, %d store errors (%d during the stall), stats %+v", admitted.Load(), storeErrs.Load(), during, st)
	if reserved != 0 || leases != 0 {
		t.Fatalf("2s after Redis resumed: %d reserved, %d leases, want none", reserved, leases)
	}
	r, err := l.Admit(ctx, storetest.Tokens("k", 10, 0))
	if err != nil {
		t.Fatalf("2s after Redis resumed: %v", err)
	}
	if err := r.Settle(ctx, sluice.Usage{InputTokens: 7}); err != nil {
		t.Fatal(err)
	}
	eff, err := l.Effective(ctx, storetest.Key("k").Identity)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eff {
		if e.Rule == "daily" && e.Used != settled.Load()+7 {
			t.Fatalf("budget used %d, want the %d settled", e.Used, settled.Load()+7)
		}
	}
}

// TestCluster_StalledGlobalSlotHoldsNothing: on a Cluster, a request's
// workspace cap and a global budget sit on two masters. With the budget's
// master stopped, the first step (the cap) is admitted and the second
// times out: the first is released, the second refused by Redis when it
// resumes, and nothing is held afterwards.
//
// The cluster is the test's own: the package's is used by tests running
// beside this one, which a stopped master would fail.
func TestCluster_StalledGlobalSlotHoldsNothing(t *testing.T) {
	t.Parallel()
	own := ownCluster(t)
	url := own.url
	prefix := freePrefixForCluster(t, url)
	s := openStore(t, redisstore.Options{URL: url, Prefix: prefix, Timeout: 250 * time.Millisecond})
	l, err := sluice.New(sluice.Options{Store: s, Rules: []sluice.Rule{
		{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 1},
		{Name: "everyone", Kind: sluice.KindBudget, Subject: "global", Limit: 1 << 40, Period: sluice.PeriodDay, Metric: sluice.MetricTokens},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	raw := rawClient(t, url)
	defer raw.Close()
	// A workspace whose cap is on another master than the global budget.
	var req sluice.Request
	var budgetNode *redisServer
	for i := 0; budgetNode == nil; i++ {
		if i == 50 {
			t.Fatal("no workspace on another master than the global budget")
		}
		req = sluice.Request{Identity: sluice.Identity{Key: "k", Workspace: fmt.Sprintf("w%d", i)}, Max: sluice.Usage{InputTokens: 10}}
		r, err := l.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var capAt, budgetAt string
		for addr, node := range raw.Nodes() {
			for k, kind := range keysOf(t, node, prefix) {
				if kind == "c" && strings.Contains(k, req.Identity.Workspace) {
					capAt = addr
				}
				if kind == "b" {
					budgetAt = addr
				}
			}
		}
		if err := r.Settle(ctx, sluice.Usage{InputTokens: 1}); err != nil {
			t.Fatal(err)
		}
		if capAt != "" && budgetAt != "" && capAt != budgetAt {
			for _, srv := range own.servers {
				if srv.addr() == budgetAt {
					budgetNode = srv
				}
			}
		}
	}
	if err := budgetNode.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var failed int
	for range 3 {
		if _, err := l.Admit(ctx, req); errors.Is(err, sluice.ErrStoreUnavailable) {
			failed++
		} else {
			_ = budgetNode.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("admission with the budget's master stopped: %v, want store unavailable", err)
		}
	}
	time.Sleep(time.Second)
	if err := budgetNode.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	time.Sleep(time.Until(resumed.Add(2 * time.Second)))
	reserved, leases := holds(t, url, prefix)
	t.Logf("%d failed, stats %+v", failed, s.Stats())
	if reserved != 0 || leases != 0 {
		t.Fatalf("2s after the master resumed: %d reserved, %d leases, want none", reserved, leases)
	}
	waitFor(t, 5*time.Second, "an admission after the master resumed", func() bool {
		r, err := l.Admit(ctx, req)
		if err == nil {
			_ = r.Settle(ctx, sluice.Usage{InputTokens: 1})
		}
		return err == nil
	})
}
