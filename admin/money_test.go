package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
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

// TestAPI_OverrideAndReportedMoneyInDollars: an override of a cost rule is
// sent and read back in dollars, as the rule is; a bare whole number is
// refused with what to send; the effective limits, the budgets and the
// usage report money in the same form; a token rule's override and limits
// stay counts.
func TestAPI_OverrideAndReportedMoneyInDollars(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "spend", "kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$500", "period": "month"})
	r := e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "spend", "attribute": "workspace", "value": "acme", "limit": "$50"})
	if o := r.body["override"].(map[string]any); o["limit"] != "$50" || o["burst"] != nil {
		t.Fatalf("override = %s", r.raw)
	}
	acme := sluice.Identity{Org: sluice.DefaultOrg, Workspace: "acme"}
	eff, err := e.limiter.Effective(context.Background(), acme)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range eff {
		if l.Rule == "spend" && l.Limit != 50_000_000 {
			t.Fatalf("in force: %d micro-dollars, want $50", l.Limit)
		}
	}
	list := e.must(http.StatusOK, "GET", "/admin/v1/overrides?workspace=acme", rootToken, nil)
	if o := list.body["overrides"].([]any)[0].(map[string]any); o["limit"] != "$50" {
		t.Fatalf("list = %s", list.raw)
	}
	bad := e.do("PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "spend", "attribute": "workspace", "value": "acme", "limit": 50_000_000})
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.raw, `$50.00`) || !strings.Contains(bad.raw, "dollars") {
		t.Fatalf("a micro-dollar override: %d %s", bad.status, bad.raw)
	}
	e.must(http.StatusBadRequest, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "spend", "attribute": "workspace", "value": "acme", "limit": "-$5"})
	tok := e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "daily_token_budget", "attribute": "workspace", "value": "acme", "limit": 5000})
	if o := tok.body["override"].(map[string]any); o["limit"] != float64(5000) {
		t.Fatalf("token override = %s", tok.raw)
	}
	e.must(http.StatusBadRequest, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "daily_token_budget", "attribute": "workspace", "value": "acme", "limit": "$5"})

	// $1.25 spent.
	res, err := e.limiter.Admit(context.Background(), sluice.Request{Identity: acme, Max: sluice.Usage{Cost: 1_250_000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Settle(context.Background(), sluice.Usage{Cost: 1_250_000}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct{ path, field string }{{"/admin/v1/effective?workspace=acme", "limits"}, {"/admin/v1/budgets?workspace=acme", "budgets"}} {
		r := e.must(http.StatusOK, "GET", q.path, rootToken, nil)
		spend := limitIn(t, r, q.field, "spend")
		if spend == nil || spend["limit"] != "$50" || spend["used"] != "$1.25" || spend["remaining"] != "$48.75" || spend["reserved"] != "$0" {
			t.Errorf("%s: spend = %v", q.path, spend)
		}
		if tokens := limitIn(t, r, q.field, "daily_token_budget"); tokens == nil || tokens["limit"] != float64(5000) {
			t.Errorf("%s: daily_token_budget = %v", q.path, tokens)
		}
	}

	e.cat.RecordUsage(catalog.UsageEntry{Workspace: "acme", Route: "chat", Model: "mock-small", Requests: 1, InputTokens: 10, CostMicros: 1_250_007})
	if err := e.cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	u := e.must(http.StatusOK, "GET", "/admin/v1/usage?workspace=acme", rootToken, nil)
	if row := u.body["usage"].([]any)[0].(map[string]any); row["cost"] != "$1.250007" || row["cost_micros"] != float64(1_250_007) {
		t.Errorf("usage = %s", u.raw)
	}
}

// TestAPI_CallsAndAuditMoneyInDollars: a call record has what it reserved
// and what it cost in dollars beside the micro-dollars; the audit log
// writes a cost rule's amounts and its overrides' in dollars, before and
// after, as the rules and overrides APIs do; a token rule's stay counts.
func TestAPI_CallsAndAuditMoneyInDollars(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	e.cat.RecordCall(catalog.CallRecord{RequestID: "c1", Workspace: "acme", Outcome: catalog.OutcomeReported, ReservedCost: 2500, CostMicros: 1_250_000})
	if err := e.cat.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := e.must(http.StatusOK, "GET", "/admin/v1/calls", rootToken, nil).body["calls"].([]any)[0].(map[string]any)
	if c["reserved_cost"] != "$0.0025" || c["cost"] != "$1.25" || c["reserved_cost_micros"] != float64(2500) || c["cost_micros"] != float64(1_250_000) {
		t.Errorf("call record %v", c)
	}

	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "spend", "kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$500", "soft_limit": "$400", "period": "month"})
	e.must(http.StatusOK, "PUT", "/admin/v1/rules/spend", rootToken, map[string]any{
		"kind": "budget", "subject": "workspace", "metric": "cost", "limit": "$600", "period": "month"})
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "spend", "attribute": "workspace", "value": "acme", "limit": "$50"})
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "daily_token_budget", "attribute": "workspace", "value": "acme", "limit": 5000})
	entries := func(target string) []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, a := range e.must(http.StatusOK, "GET", "/admin/v1/audit?target="+target, rootToken, nil).body["entries"].([]any) {
			out = append(out, a.(map[string]any))
		}
		return out
	}
	field := func(e map[string]any, side, name string) any {
		v, _ := e[side].(map[string]any)
		return v[name]
	}
	rule := entries("rule/spend") // newest first
	if len(rule) != 2 || field(rule[0], "before", "limit") != "$500" || field(rule[0], "after", "limit") != "$600" ||
		field(rule[1], "after", "limit") != "$500" || field(rule[1], "after", "soft_limit") != "$400" {
		t.Errorf("the cost rule's audit: %v", rule)
	}
	if o := entries("override/spend/workspace/acme"); len(o) != 1 || field(o[0], "after", "limit") != "$50" || field(o[0], "after", "burst") != nil {
		t.Errorf("the cost override's audit: %v", o)
	}
	if o := entries("override/daily_token_budget/workspace/acme"); len(o) != 1 || field(o[0], "after", "limit") != float64(5000) {
		t.Errorf("the token override's audit: %v", o)
	}

	// The console says the same.
	b := e.browser()
	b.login(rootToken)
	for path, want := range map[string][]string{
		"/ui/overrides":       {"$50.00", "5,000"},
		"/ui/workspaces/acme": {"$50.00", "5,000"},
		"/ui/audit":           {`<b>limit</b> <del>$500</del> → <ins>$600</ins>`},
	} {
		status, body := b.get(path)
		for _, w := range want {
			if status != http.StatusOK || !strings.Contains(body, w) {
				t.Errorf("GET %s = %d, want 200 containing %q", path, status, w)
			}
		}
		if strings.Contains(body, "50,000,000") || strings.Contains(body, "600000000") {
			t.Errorf("GET %s shows micro-dollars", path)
		}
	}
}
