package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
)

// TestLedger_CallRecordKeepsSessionConnectionAndAudio: a live response's
// record reaches the catalog with its session, its connection and its
// audio tokens.
func TestLedger_CallRecordKeepsSessionConnectionAndAudio(t *testing.T) {
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ledger{cat: cat}.RecordUsage(gateway.UsageRecord{At: time.Now(), Org: "acme", Workspace: "w", Route: "realtime", Model: "mock-small", KeyID: "k1",
		RequestID: "req_c/1", InputTokens: 30, OutputTokens: 12, AudioInputTokens: 20, AudioOutputTokens: 7, SessionID: "sess_1", ConnectionID: "req_c"})
	if err := cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := cat.Calls(context.Background(), catalog.CallQuery{SessionID: "sess_1"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("calls %+v, %v; want one", recs, err)
	}
	if r := recs[0]; r.RequestID != "req_c/1" || r.ConnectionID != "req_c" || r.AudioInputTokens != 20 || r.AudioOutputTokens != 7 {
		t.Errorf("record %+v, want its connection and audio tokens", r)
	}
}
