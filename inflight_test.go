package sluice_test

import (
	"testing"

	"github.com/sluicehq/sluice"
)

// A live connection holds one lease; the responses made on it are counted
// by every other rule but do not take a second place.
func TestLimiter_InFlightCallTakesNoSecondLease(t *testing.T) {
	oneAtATime := sluice.Rule{Name: "one", Kind: sluice.KindConcurrency, Subject: "key", Limit: 1}
	l, _ := withRules(t, oneAtATime, rpm(10))
	conn := admit(t, l, byKey("k"))
	inside := byKey("k")
	inside.InFlight = true
	settle(t, admit(t, l, inside), sluice.Usage{})
	refuse(t, l, byKey("k"), sluice.ErrBusy) // a second connection
	settle(t, conn, sluice.Usage{})
	admit(t, l, byKey("k"))
}

// A budget on a custom metric neither charges nor refuses a call that does
// not name the metric: a user whose live seconds are spent may still chat.
func TestLimiter_CustomMetricRuleAppliesToCallsThatNameIt(t *testing.T) {
	l, _ := withRules(t, named(daily("seconds", 60), "live"))
	live := byKey("k")
	live.Max.Custom = map[string]int64{"seconds": 60}
	admit(t, l, live)
	admit(t, l, byKey("k")) // names no seconds
	refuse(t, l, live, sluice.ErrBudgetExhausted)
	later := byKey("k")
	later.Max.Custom = map[string]int64{"seconds": 0} // reports them at settlement
	refuse(t, l, later, sluice.ErrBudgetExhausted)
}

// A top-up of what a call meters as it goes (the next slice of a live
// connection's seconds) is charged by the rules on the metrics it names
// alone: it counts no request, takes no place and charges no tokens, and
// a spent budget of its metric refuses it.
func TestLimiter_NamedMetricsOnlyChargesTheNamedMetricAlone(t *testing.T) {
	l, _ := withRules(t, rpm(1), inFlight(1), named(daily(sluice.MetricTokens, 100), "tokens"), named(daily("seconds", 90), "live"))
	conn := byKey("k")
	conn.Max = sluice.Usage{InputTokens: 10, Custom: map[string]int64{"seconds": 60}}
	held := admit(t, l, conn)
	topUp := byKey("k")
	topUp.NamedMetricsOnly = true
	topUp.Max = sluice.Usage{InputTokens: 50, Custom: map[string]int64{"seconds": 30}}
	slice := admit(t, l, topUp) // past rpm and in-flight, both full
	if e := effective(t, l, ident("k"), "live"); e.Remaining != 0 {
		t.Fatalf("seconds remaining %d, want 0 after 60 + 30", e.Remaining)
	}
	if e := effective(t, l, ident("k"), "tokens"); e.Remaining != 90 {
		t.Fatalf("tokens remaining %d, want 90: the top-up charges no tokens", e.Remaining)
	}
	refuse(t, l, topUp, sluice.ErrBudgetExhausted)
	settle(t, slice, sluice.Usage{Custom: map[string]int64{"seconds": 12}})
	settle(t, held, sluice.Usage{InputTokens: 10, Custom: map[string]int64{"seconds": 60}})
	if e := effective(t, l, ident("k"), "live"); e.Remaining != 18 {
		t.Fatalf("seconds remaining %d, want 18 after 60 + 12 charged", e.Remaining)
	}
	none := byKey("k")
	none.NamedMetricsOnly = true
	settle(t, admit(t, l, none), sluice.Usage{}) // names nothing: charges nothing, even past rpm
}
