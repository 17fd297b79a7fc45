package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var sweepReportScenarios = map[string]func(t *testing.T, h *Harness){
	// A reservation left unsettled is swept, and the Limiter's OnSwept hears
	// who it was for (the workspace within its org, braces and all) and what
	// its budget was charged, which is what the store then holds. For the
	// stores that are a sluice.SweepReporter (the four of this module); the
	// interface is optional.
	"SweepReportTellsWhoAndWhat": func(t *testing.T, h *Harness) {
		if _, ok := h.Store.(sluice.SweepReporter); !ok {
			return
		}
		var swept []sluice.SweptReservation
		l, err := sluice.New(sluice.Options{Store: h.Store, Clock: h.Clock, Rules: []sluice.Rule{
			{Name: "ws_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
			{Name: "user_busy", Kind: sluice.KindConcurrency, Subject: "user", Limit: 5},
		}, OnSwept: func(r sluice.SweptReservation) { swept = append(swept, r) }})
		if err != nil {
			t.Fatal(err)
		}
		id := sluice.Identity{Org: "acme", Workspace: "w{1}", User: "ann"}
		if _, err := l.Admit(h.Ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 40, OutputTokens: 600}, Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		h.Clock.Advance(5 * time.Minute)
		res, err := l.Sweep(h.Ctx)
		if err != nil || res.Reservations != 1 || res.Charged != 1 {
			t.Fatalf("sweep %+v, %v", res, err)
		}
		if len(swept) != 1 {
			t.Fatalf("OnSwept heard %d, want 1", len(swept))
		}
		got := swept[0]
		if !got.Known || got.Identity.Org != "acme" || got.Identity.Workspace != "w{1}" || got.Identity.User != "ann" || got.Charged[sluice.MetricTokens] != 640 {
			t.Fatalf("swept %+v, want acme's w{1} and ann, charged 640 tokens", got)
		}
		eff, err := l.Effective(h.Ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range eff {
			if e.Rule == "ws_tokens" && e.Used != 640 {
				t.Errorf("the store holds %d, want the 640 reported", e.Used)
			}
		}
	},
}
