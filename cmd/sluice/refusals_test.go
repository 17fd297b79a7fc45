package main

import (
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
)

// TestObservability_RecordsRefusedCalls: serve's Observer keeps the
// refusals of known keys as call records, and nothing else (a settled call
// is recorded by its settlement, a bad key's refusal by nobody).
func TestObservability_RecordsRefusedCalls(t *testing.T) {
	o := newObservability(&config.Config{}, slog.New(slog.DiscardHandler))
	var recorded []catalog.CallRecord
	o.recordCall = func(r catalog.CallRecord) { recorded = append(recorded, r) }
	o.Observe(gateway.Event{RequestID: "r1", Workspace: "w", KeyID: "k1", Outcome: "budget_exceeded", Status: 429, SessionID: "sess_1"})
	o.Observe(gateway.Event{RequestID: "r2", Workspace: "w", KeyID: "k1", Outcome: "admitted", Status: 200})
	o.Observe(gateway.Event{RequestID: "r3", Outcome: "unauthorized", Status: 401})
	if len(recorded) != 1 || recorded[0].RequestID != "r1" || recorded[0].Outcome != "budget_exceeded" || recorded[0].SessionID != "sess_1" {
		t.Fatalf("recorded %+v, want r1's refusal only, in its session", recorded)
	}
}
