package admin

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
)

// A client without a valid token that hammers the admin API leaves one
// audit entry per minute, with the count of those left out.
func TestAPI_AnonymousDenialsAuditedOncePerMinute(t *testing.T) {
	e := newEnv(t)
	before := e.snapshot()
	for range 100 {
		e.do("POST", "/admin/v1/rules", "wrong", `{}`)
	}
	if got := e.snapshot().deniedAudit - before.deniedAudit; got != 1 {
		t.Fatalf("100 anonymous denials in a minute wrote %d audit entries, want 1", got)
	}
	e.clock.Advance(time.Minute)
	e.do("POST", "/admin/v1/rules", "", `{}`)
	entries, err := e.cat.ListAudit(t.Context(), catalog.AuditQuery{Action: "denied", Limit: 10})
	if err != nil || len(entries) != 2 {
		t.Fatalf("entries %+v, %v", entries, err)
	}
	var after struct {
		Source     string `json:"source"`
		Suppressed int    `json:"suppressed"`
	}
	if err := json.Unmarshal(entries[0].After.(json.RawMessage), &after); err != nil || after.Suppressed != 99 || after.Source != "127.0.0.1" {
		t.Fatalf("the minute's second entry says %+v (%v), want 99 suppressed from 127.0.0.1", after, err)
	}
}
