package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkAdmitSettleClasses is an admission and settlement against a
// requests rate per key and a global concurrency cap, the cap without
// classes (the peer), with classes admitting from the class's own share,
// and with the class's share held so that every admission borrows another
// class's (two attempts and a demand marker).
func BenchmarkAdmitSettleClasses(b *testing.B) {
	for _, tc := range []struct {
		name    string
		classes []sluice.Class
		class   string
	}{
		{"off", nil, ""},
		{"own_share", []sluice.Class{{Name: "interactive", Weight: 3, Floor: benchConcurrency / 2}, {Name: "batch"}}, "interactive"},
		{"borrowed", []sluice.Class{{Name: "interactive", Floor: benchConcurrency - 1}, {Name: "batch"}}, "batch"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), ServerID: "bench", Rules: []sluice.Rule{
				{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: benchRequestsPerMinute, Window: time.Minute},
				{Name: "model-calls", Kind: sluice.KindConcurrency, Subject: "global", Limit: benchConcurrency, Classes: tc.classes},
			}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			req := sluice.Request{Identity: sluice.Identity{Key: "k", Class: tc.class}, Max: benchMax}
			if tc.name == "borrowed" {
				// batch's share is 1: hold it, and every admission borrows.
				if _, err := l.Admit(ctx, req); err != nil {
					b.Fatal(err)
				}
				r, err := l.Admit(ctx, req)
				if err != nil || r.Result().Classes[0].BorrowedFrom != "interactive" {
					b.Fatalf("admission %v, want one borrowing interactive's share", err)
				}
				if err := r.Settle(ctx, benchUsed); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				r, err := l.Admit(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Settle(ctx, benchUsed); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
	}
}
