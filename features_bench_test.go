package sluice_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkAdmitSettleFeaturesUnused is BenchmarkAdmitSettle3Rules on the
// core alone (none), and with optional features installed but unused by
// the request (issue 30: each feature a leaf that costs nothing when
// unused). New installs waiting and turns always (the request has no
// MaxWait and no Turn), and sweep attribution with Options.OnSwept (a
// sweep is not an admission).
func BenchmarkAdmitSettleFeaturesUnused(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts func(*sluice.Options)
		none bool
	}{
		{name: "none", none: true},
		{name: "waiting_turns", opts: func(*sluice.Options) {}},
		{name: "sweep_attribution", opts: func(o *sluice.Options) { o.OnSwept = func(sluice.SweptReservation) {} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := sluice.Options{
				Store:    memstore.New(memstore.Options{}),
				ServerID: "bench",
				Simple: sluice.Simple{
					RequestsPerMinute: benchRequestsPerMinute,
					TokensPerMinute:   benchTokensPerMinute,
					Concurrency:       benchConcurrency,
					Subject:           "key",
				},
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
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := admitSettle(ctx, l, "key-1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
