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
