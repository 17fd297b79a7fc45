package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestAPI_StoredRuleFromTheProvider: a rule stored with limit_from:
// provider is in force at its own limit until the provider has said, then
// at the provider's, and /admin/v1/effective says which; a rule that cannot
// take its limit from a provider is refused, naming the field.
func TestAPI_StoredRuleFromTheProvider(t *testing.T) {
	e := newEnv(t)
	r := e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "provider_rpm", "kind": "rate", "subject": "model", "limit": 50, "window": "1m", "limit_from": "provider"})
	if rule := r.body["rule"].(map[string]any); rule["limit_from"] != "provider" {
		t.Fatalf("created = %v", rule)
	}
	const path = "/admin/v1/effective?workspace=acme&user=ada&model=mock-small"
	rpm := limitIn(t, e.must(http.StatusOK, "GET", path, rootToken, nil), "limits", "provider_rpm")
	if rpm == nil || rpm["limit"] != float64(50) || rpm["source"] != "rule" {
		t.Fatalf("before the provider said: %v", rpm)
	}
	e.limiter.SetProviderLimits("mock-small", sluice.ProviderLimits{Requests: 600})
	rpm = limitIn(t, e.must(http.StatusOK, "GET", path, rootToken, nil), "limits", "provider_rpm")
	if rpm == nil || rpm["limit"] != float64(600) || rpm["source"] != "provider" {
		t.Fatalf("once the provider said 600 a minute: %v", rpm)
	}
	bad := e.must(http.StatusBadRequest, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "per_workspace", "kind": "rate", "subject": "workspace", "limit": 5, "window": "1m", "limit_from": "provider"})
	if !strings.Contains(bad.raw, "limit_from") {
		t.Fatalf("refused without naming the field: %s", bad.raw)
	}
}
