package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkAdmitSettleFeaturesUnused is BenchmarkAdmitSettle3Rules on the
// core alone (none), and with optional features installed but unused by
// the request (issue 30: each feature a leaf that costs nothing when
// unused). New installs waiting, turns, provider limits and classes
// always (the request has no MaxWait and no Turn, and no rule takes its
// limit from a provider or has classes: "waiting_turns" has all four),
// and sweep attribution with Options.OnSwept (a sweep is not an
// admission), and leases with Options.LeaseTimeout (over memstore, a
// LeaseRenewer): as leases renew only reservations that hold a budget or
// a call in flight, they are compared without the concurrency rule
// (rates_*), where no reservation holds a lease, and with it
// (leases_in_use), where each admission holds one until it settles.
func BenchmarkAdmitSettleFeaturesUnused(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts func(*sluice.Options)
		none bool
		// rates drops the concurrency rule.
		rates bool
	}{
		{name: "none", none: true},
		{name: "waiting_turns", opts: func(*sluice.Options) {}},
		{name: "sweep_attribution", opts: func(o *sluice.Options) { o.OnSwept = func(sluice.SweptReservation) {} }},
		{name: "leases_in_use", opts: leaseTimeout},
		{name: "rates_none", none: true, rates: true},
		{name: "rates_leases", opts: leaseTimeout, rates: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := benchOptions()
			if bc.rates {
				opts.Simple.Concurrency = 0
			}
			if bc.opts != nil {
				bc.opts(&opts)
			}
			l, err := sluice.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			if bc.none {
				sluice.WithoutFeatures(l)
			}
			admitSettleLoop(b, l)
		})
	}
}

func leaseTimeout(o *sluice.Options) { o.LeaseTimeout = time.Minute }
