package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestAPI_CostRuleMoneyInDollars: a cost rule's limit and soft_limit are
// sent and read back in dollars; a bare whole number is refused with what
// to send for both of its readings; a token rule's limit stays a count.
func TestAPI_CostRuleMoneyInDollars(t *testing.T) {
	e := newEnv(t)
	r := e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "spend", "kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$500", "soft_limit": 400.5, "period": "month"})
	rule := r.body["rule"].(map[string]any)
	if rule["limit"] != "$500" || rule["soft_limit"] != "$400.5" {
		t.Fatalf("created = %v", rule)
	}
	for _, p := range e.limiter.Policy().Rules {
		if p.Name == "spend" && (p.Limit != 500_000_000 || p.SoftLimit != 400_500_000) {
			t.Fatalf("in the policy: limit %d, soft %d micro-dollars", p.Limit, p.SoftLimit)
		}
	}
	e.must(http.StatusOK, "PUT", "/admin/v1/rules/spend", rootToken, map[string]any{
		"kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$500", "period": "month"})
	list := e.must(http.StatusOK, "GET", "/admin/v1/rules", rootToken, nil)
	if !strings.Contains(list.raw, `"$500"`) {
		t.Errorf("list: %s", list.raw)
	}
	bad := e.do("POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "old", "kind": "budget", "subject": "workspace", "metric": "cost", "limit": 500000000, "period": "month"})
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.raw, `$500.00`) || !strings.Contains(bad.raw, "dollars") {
		t.Fatalf("a micro-dollar limit: %d %s", bad.status, bad.raw)
	}
	e.must(http.StatusBadRequest, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "worse", "kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$1.2.3", "period": "month"})
	tok := e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "tpd", "kind": "budget", "subject": "workspace", "metric": "tokens", "limit": 2000000, "period": "day"})
	if tok.body["rule"].(map[string]any)["limit"] != float64(2000000) {
		t.Fatalf("token rule: %s", tok.raw)
	}
	e.must(http.StatusBadRequest, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "tpd2", "kind": "budget", "subject": "workspace", "metric": "tokens", "limit": "$5", "period": "day"})
}
