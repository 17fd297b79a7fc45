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
