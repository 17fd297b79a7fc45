package admin

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestAPI_StoredRuleBusyRetryAfter: a concurrency rule stored through the
// admin API carries its busy hint into the policy, and reads it back.
func TestAPI_StoredRuleBusyRetryAfter(t *testing.T) {
	e := newEnv(t)
	r := e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "one_at_a_time", "kind": "concurrency", "subject": "user", "limit": 1, "busy_retry_after": "7s"})
	if rule := r.body["rule"].(map[string]any); rule["busy_retry_after"] != "7s" {
		t.Fatalf("created = %v", rule)
	}
	got := e.must(http.StatusOK, "GET", "/admin/v1/rules/one_at_a_time", rootToken, nil)
	if rule, _ := got.body["rule"].(map[string]any); rule == nil || rule["busy_retry_after"] != "7s" {
		t.Fatalf("read back: %s", got.raw)
	}
	id := sluice.Identity{Workspace: "acme", User: "ada"}
	if _, err := e.limiter.Admit(context.Background(), sluice.Request{Identity: id, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	_, err := e.limiter.Admit(context.Background(), sluice.Request{Identity: id, Timeout: time.Hour})
	var bz *sluice.BusyError
	if !errors.As(err, &bz) || bz.RetryAfter != 7*time.Second {
		t.Fatalf("second call: %v, want busy with a 7s hint", err)
	}
	// On a rule that is not a concurrency rule, the hint is refused.
	e.must(http.StatusBadRequest, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "rpm", "kind": "rate", "subject": "user", "limit": 1, "window": "1m", "busy_retry_after": "7s"})
	e.must(http.StatusBadRequest, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "bad", "kind": "concurrency", "subject": "user", "limit": 1, "busy_retry_after": 7})
}
