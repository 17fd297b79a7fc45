package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// leaseTimeout is the scenarios' Options.LeaseTimeout: renewals every 40s.
const leaseTimeout = 2 * time.Minute

// leaseLimiter is h.Limiter with Options.LeaseTimeout; nil, after a log
// line, when the store cannot renew (its reservations keep the model
// deadline, which the other scenarios cover).
func leaseLimiter(h *Harness, rules ...sluice.Rule) *sluice.Limiter {
	h.T.Helper()
	if _, ok := h.Store.(sluice.LeaseRenewer); !ok {
		h.T.Logf("%T is not a sluice.LeaseRenewer", h.Store)
		return nil
	}
	l, err := sluice.New(sluice.Options{Store: h.Store, Clock: h.Clock, Rules: rules, ServerID: "test-server",
		DefaultTimeout: 10 * time.Minute, ExpirySlack: 30 * time.Second, LeaseTimeout: leaseTimeout})
	if err != nil {
		h.T.Fatalf("new limiter: %v", err)
	}
	return l
}

// leaseRules are a charged budget, a released budget and one place per
// workspace.
var leaseRules = []sluice.Rule{
	{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	{Name: "user_tokens", Kind: sluice.KindBudget, Subject: "user", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay,
		OnExpiry: sluice.ExpiryRelease},
	{Name: "ws_busy", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 1},
}

// call is a request of 300 tokens in workspace ws by user u.
func call(ws, u string) sluice.Request {
	return sluice.Request{Identity: sluice.Identity{Key: "k", Workspace: ws, User: u},
		Max: sluice.Usage{InputTokens: 100, OutputTokens: 200}}
}

// sweep sweeps with l and checks how many reservations it settled.
func sweep(h *Harness, l *sluice.Limiter, want int) sluice.SweepResult {
	h.T.Helper()
	res, err := l.Sweep(h.Ctx)
	if err != nil || res.Reservations != want {
		h.T.Fatalf("sweep at +%v = %+v, %v; want %d reservations", h.Clock.Now().Sub(Start), res, err, want)
	}
	return res
}

func renew(h *Harness, l *sluice.Limiter) {
	h.T.Helper()
	if err := l.RenewLeases(h.Ctx); err != nil {
		h.T.Fatalf("renew leases: %v", err)
	}
}

// listedDeadline checks that the store lists r due at its Deadline, when it
// lists reservations.
func listedDeadline(h *Harness, r *sluice.Reservation) {
	h.T.Helper()
	rl, ok := h.Store.(reservationLister)
	if !ok {
		return
	}
	list, err := rl.Reservations(h.Ctx, 100)
	if err != nil {
		h.T.Fatalf("reservations: %v", err)
	}
	for _, o := range list {
		if o.ID == r.ID() {
			if !o.Deadline.Equal(r.Deadline()) {
				h.T.Fatalf("reservation %d listed due %v, its Deadline is %v", r.ID(), o.Deadline, r.Deadline())
			}
			return
		}
	}
	h.T.Fatalf("reservation %d not listed", r.ID())
}

var leaseScenarios = map[string]func(t *testing.T, h *Harness){
	// A reservation nobody renews is swept at its lease's end, not at its
	// model deadline: its place comes back, its budgets are charged or
	// released once, and a settlement that comes after changes nothing.
	"LeasePassedIsSweptOnce": func(t *testing.T, h *Harness) {
		l := leaseLimiter(h, leaseRules...)
		if l == nil {
			return
		}
		r := h.Admit(l, call("w", "ann"))
		if want := Start.Add(leaseTimeout); !r.Deadline().Equal(want) {
			t.Fatalf("deadline %v, want the lease's end %v", r.Deadline(), want)
		}
		listedDeadline(h, r)
		h.Refuse(l, call("w", "bob"), sluice.ErrBusy)
		h.Clock.Advance(leaseTimeout - time.Second)
		sweep(h, l, 0)
		h.Refuse(l, call("w", "bob"), sluice.ErrBusy)
		h.Clock.Advance(time.Second)
		if res := sweep(h, l, 1); res.Charged != 1 || res.Released != 1 {
			t.Fatalf("sweep %+v, want one budget charged and one released", res)
		}
		sweep(h, l, 0)
		next := h.Admit(l, call("w", "bob"))
		// The late settlement of the swept reservation frees nothing and
		// charges nothing more.
		h.Settle(r, sluice.Usage{InputTokens: 1, OutputTokens: 1})
		h.Refuse(l, call("w", "cat"), sluice.ErrBusy)
		id := call("w", "ann").Identity
		if used, _ := h.Used(l, id, "ws_tokens"); used != 600 {
			t.Fatalf("ws_tokens used %d, want 300 charged by the sweep and 300 reserved by the next call", used)
		}
		if used, _ := h.Used(l, id, "user_tokens"); used != 0 {
			t.Fatalf("ann's user_tokens used %d, want 0: released once by the sweep", used)
		}
		h.Settle(next, sluice.Usage{InputTokens: 10, OutputTokens: 20})
		if used, _ := h.Used(l, id, "ws_tokens"); used != 330 {
			t.Fatalf("ws_tokens used %d, want 330", used)
		}
	},
	// A reservation renewed every LeaseTimeout/3 outlives its first lease
	// and is settled at its usage; renewals never take it past its model
	// deadline plus slack, where the sweep settles it.
	"LeaseRenewedIsNotSwept": func(t *testing.T, h *Harness) {
		l := leaseLimiter(h, leaseRules...)
		if l == nil {
			return
		}
		long := call("w1", "ann")
		long.Timeout = 3 * time.Minute // until 3m30s with the slack
		held := h.Admit(l, long)
		settled := h.Admit(l, call("w2", "bob"))
		// A batch of a lease only, which stores keep no record of.
		bare := leaseLimiter(h, sluice.Rule{Name: "user_busy", Kind: sluice.KindConcurrency, Subject: "user", Limit: 1})
		h.Admit(bare, call("w3", "dan"))
		for range 4 {
			h.Clock.Advance(leaseTimeout / 3)
			renew(h, l)
			renew(h, bare)
			sweep(h, l, 0)
			h.Refuse(l, call("w1", "cat"), sluice.ErrBusy)
			h.Refuse(l, call("w2", "cat"), sluice.ErrBusy)
			h.Refuse(bare, call("w3", "dan"), sluice.ErrBusy)
		}
		// 2m40s: both outlived their first lease.
		if want := Start.Add(3*time.Minute + 30*time.Second); !held.Deadline().Equal(want) {
			t.Fatalf("renewed deadline %v, want the model deadline plus slack %v", held.Deadline(), want)
		}
		if want := h.Clock.Now().Add(leaseTimeout); !settled.Deadline().Equal(want) {
			t.Fatalf("renewed deadline %v, want %v", settled.Deadline(), want)
		}
		listedDeadline(h, held)
		listedDeadline(h, settled)
		h.Settle(settled, sluice.Usage{InputTokens: 10, OutputTokens: 20})
		if used, _ := h.Used(l, call("w2", "bob").Identity, "ws_tokens"); used != 30 {
			t.Fatalf("w2 used %d, want its usage, 30", used)
		}
		h.Admit(l, call("w2", "cat"))
		h.Clock.Set(held.Deadline().Add(-time.Second))
		renew(h, l)
		sweep(h, l, 0)
		h.Clock.Advance(time.Second)
		renew(h, l)
		sweep(h, l, 1)
		h.Admit(l, call("w1", "cat"))
	},
	// Two replicas: the one alive renews its reservation, the other died
	// holding one. The dead one's is swept at its lease's end, by the
	// live one's sweep; the live one's is kept and settled at its usage.
	"LeaseOfVanishedReplicaIsSwept": func(t *testing.T, h *Harness) {
		alive, dead := leaseLimiter(h, leaseRules...), leaseLimiter(h, leaseRules...)
		if alive == nil {
			return
		}
		mine := h.Admit(alive, call("w1", "ann"))
		h.Admit(dead, call("w2", "bob"))
		for range 3 {
			h.Clock.Advance(leaseTimeout / 3)
			if h.Clock.Now().Sub(Start) < leaseTimeout {
				sweep(h, alive, 0)
			}
			renew(h, alive)
		}
		if res := sweep(h, alive, 1); res.Charged != 1 {
			t.Fatalf("sweep %+v, want the dead replica's reservation charged", res)
		}
		h.Refuse(alive, call("w1", "cat"), sluice.ErrBusy)
		h.Admit(alive, call("w2", "cat"))
		h.Settle(mine, sluice.Usage{InputTokens: 5, OutputTokens: 5})
		if used, _ := h.Used(alive, call("w1", "ann").Identity, "ws_tokens"); used != 10 {
			t.Fatalf("w1 used %d, want its usage, 10", used)
		}
		if used, _ := h.Used(alive, call("w2", "bob").Identity, "ws_tokens"); used != 600 {
			t.Fatalf("w2 used %d, want 300 charged by the sweep and 300 reserved", used)
		}
	},
}
