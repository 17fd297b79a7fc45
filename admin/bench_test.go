package admin

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkAdmitSettle measures what the instrumented store adds to an
// admission and its settlement, beside the bare memory store.
func BenchmarkAdmitSettle(b *testing.B) {
	for _, tc := range []struct {
		name  string
		store func() sluice.Store
	}{
		{"memstore", func() sluice.Store { return memstore.New(memstore.Options{}) }},
		{"instrumented", func() sluice.Store { return NewMetrics(MetricsOptions{}).Store(memstore.New(memstore.Options{})) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rules := []sluice.Rule{baseRules[1], baseRules[2]} // the budget and the in-flight cap: every call admitted
			rules[0].Limit = 1 << 50                           // never spent, however long the benchmark runs
			rules[1].Limit = 1 << 20
			l, err := sluice.New(sluice.Options{Store: tc.store(), Rules: rules, ServerID: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				id := sluice.Identity{Workspace: "acme", User: "ada"}
				for pb.Next() {
					res, err := l.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 1}})
					if err != nil {
						b.Error(err)
						return
					}
					_ = res.Settle(ctx, sluice.Usage{InputTokens: 1})
				}
			})
		})
	}
}

// BenchmarkMetricsObserve is the metrics' cost per finished request.
func BenchmarkMetricsObserve(b *testing.B) {
	m := NewMetrics(MetricsOptions{Models: map[string]string{"mock-small": "mock-small"}, Providers: []string{"mock"}})
	ev := gateway.Event{Route: "chat", Model: "mock-small", Provider: "mock", Outcome: "admitted", Status: 200, UpstreamStatus: 200,
		Attempts: 1, Decision: 200 * time.Microsecond, Duration: 300 * time.Millisecond, Upstream: 290 * time.Millisecond,
		Usage: sluice.Usage{InputTokens: 100, OutputTokens: 50, Cost: 42}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(ev)
		}
	})
}

// BenchmarkLogRequest is one request's log line, redaction included, as a
// busy gateway writes it for every call.
func BenchmarkLogRequest(b *testing.B) {
	log := NewLogger(io.Discard, false)
	e := event.Event{RequestID: "req_694a4596c4d3afb9", Route: "chat", Model: "mock-small", Provider: "mock", Org: "default",
		Workspace: "demo", KeyID: "nivpgwbnysv4", Duration: 4261 * time.Microsecond, Outcome: "admitted", Status: 200,
		UpstreamStatus: 200, Attempts: 1, Decision: 32 * time.Microsecond, Usage: sluice.Usage{InputTokens: 12, OutputTokens: 16, Cost: 40}}
	b.ReportAllocs()
	for b.Loop() {
		LogRequest(log, e)
	}
}
