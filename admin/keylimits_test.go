package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
)

// TestAPI_KeyCreateWithLimits checks that a key made with its own limits
// is limited by them from its first request, and no other key is.
func TestAPI_KeyCreateWithLimits(t *testing.T) {
	e := newEnv(t)
	r := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "w", "user": "a",
		"limits": map[string]any{"requests_per_minute": 2, "tokens_per_minute": 100_000, "max_in_flight": 4,
			"budget": map[string]any{"period": "month", "dollars": "25.50"}},
	})
	key := r.body["key"].(map[string]any)
	id := key["id"].(string)
	overrides, _ := r.body["overrides"].([]any)
	// The budget's limit in dollars, as it was sent.
	want := map[string]any{KeyRuleRequestsPerMinute: float64(2), KeyRuleTokensPerMinute: float64(100_000), KeyRuleInFlight: float64(4), "key_cost_per_month": "$25.5"}
	if len(overrides) != len(want) {
		t.Fatalf("overrides = %v, want %v", overrides, want)
	}
	for _, o := range overrides {
		o := o.(map[string]any)
		if o["attribute"] != "key" || o["value"] != id || o["limit"] != want[o["rule"].(string)] {
			t.Errorf("override %v, want limit %v for key %s", o, want[o["rule"].(string)], id)
		}
	}
	// Beside its own limits, the answer lists the deployment's rules that
	// apply to the key too, with their source: no surprise at the 21st
	// call of a minute.
	also := map[string]string{}
	for _, l := range r.body["also_applies"].([]any) {
		l := l.(map[string]any)
		also[l["rule"].(string)] = l["source"].(string)
	}
	if also["rate_per_minute"] == "" || also["daily_token_budget"] == "" || also["max_in_flight"] == "" {
		t.Errorf("also_applies = %v, want the deployment's rules with their source", r.body["also_applies"])
	}
	for rule := range want {
		if _, ok := also[rule]; ok {
			t.Errorf("also_applies lists the key's own limit %s", rule)
		}
	}
	// The limits apply to the key's requests at once (OnChange rebuilt
	// the policy), and to no other key's.
	mine := sluice.Identity{Workspace: "w", User: "a", Key: id}
	for i := range 2 {
		if err := e.admit(mine, 10); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	var rate *sluice.RateLimitError
	if err := e.admit(mine, 10); !errors.As(err, &rate) || rate.Rule != KeyRuleRequestsPerMinute {
		t.Fatalf("third request: err = %v, want a refusal by %s", err, KeyRuleRequestsPerMinute)
	}
	other := sluice.Identity{Workspace: "w", User: "b", Key: "otherkey2345"}
	for i := range 3 {
		if err := e.admit(other, 10); err != nil {
			t.Fatalf("another key's request %d: %v", i+1, err)
		}
	}
	// The rules were stored once, with limit 0; a second key reuses them.
	e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "w", "user": "c", "limits": map[string]any{"requests_per_minute": 5, "budget": map[string]any{"period": "day", "tokens": 1000}}})
	rules, err := e.cat.ListRules(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rules {
		if r.Limit != 0 {
			t.Errorf("stored rule %s has limit %d, want 0", r.Name, r.Limit)
		}
		names = append(names, r.Name)
	}
	slices.Sort(names)
	if want := []string{"key_cost_per_month", KeyRuleInFlight, KeyRuleRequestsPerMinute, "key_tokens_per_day", KeyRuleTokensPerMinute}; !slices.Equal(names, want) {
		t.Fatalf("stored rules %v, want %v", names, want)
	}
	// Everything was audited as done by the root token.
	entries, err := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, a := range entries {
		if a.Actor != rootActor {
			t.Errorf("audit %s by %q", a.Action, a.Actor)
		}
		count[a.Action]++
	}
	if count[catalog.ActionKeyCreate] != 2 || count[catalog.ActionOverrideSet] != 6 || count[catalog.ActionRuleCreate] != 5 {
		t.Fatalf("audit counts %v", count)
	}
}

// TestAPI_KeyCreateWithLimitsUsesRuleInForce checks that a per-key rule
// from the config file is used as it is (its limit for every key, the
// override for this one), and that a rule of the name with another shape
// refuses the creation with nothing made.
func TestAPI_KeyCreateWithLimitsUsesRuleInForce(t *testing.T) {
	e := newEnv(t)
	configRPM := sluice.Rule{Name: KeyRuleRequestsPerMinute, Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests, Limit: 1, Window: time.Minute}
	wrongTPM := sluice.Rule{Name: KeyRuleTokensPerMinute, Kind: sluice.KindRate, Subject: "user", Metric: sluice.MetricTokens, Limit: 1000, Window: time.Minute}
	if err := e.limiter.SetPolicy(sluice.Policy{Rules: append(slices.Clone(baseRules), configRPM, wrongTPM)}); err != nil {
		t.Fatal(err)
	}
	e.handler.opts.OnChange = nil // keep the policy set above
	before := e.snapshot()
	r := e.must(http.StatusConflict, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "w", "user": "a", "limits": map[string]any{"requests_per_minute": 3, "tokens_per_minute": 10}})
	if r.errorCode() != "rule_conflict" {
		t.Fatalf("answer %s, want rule_conflict", r.raw)
	}
	if after := e.snapshot(); after != before {
		t.Fatalf("a refused creation changed the catalog: %+v, then %+v", before, after)
	}
	r = e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "w", "user": "a", "limits": map[string]any{"requests_per_minute": 3}})
	if rules, _ := e.cat.ListRules(context.Background()); len(rules) != 0 {
		t.Fatalf("the config's rule was shadowed by a stored one: %+v", rules)
	}
	id := r.body["key"].(map[string]any)["id"].(string)
	if err := e.limiter.SetPolicy(withRules(t, e, configRPM)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := e.admit(sluice.Identity{Workspace: "w", User: "a", Key: id}, 1); err != nil {
			t.Fatalf("request %d within the key's own 3: %v", i+1, err)
		}
	}
	if err := e.admit(sluice.Identity{Workspace: "w", User: "a", Key: id}, 1); err == nil {
		t.Fatal("fourth request admitted past the key's own limit of 3")
	}
	if err := e.admit(sluice.Identity{Workspace: "w", User: "b", Key: "otherkey2345"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.admit(sluice.Identity{Workspace: "w", User: "b", Key: "otherkey2345"}, 1); err == nil {
		t.Fatal("another key passed the config's limit of 1")
	}
}

// withRules is the stored policy plus extra rules, standing for a config
// file that defines them.
func withRules(t *testing.T, e *env, extra ...sluice.Rule) sluice.Policy {
	t.Helper()
	p, _, err := LoadPolicy(context.Background(), e.cat, []config.Layer{{Source: "config", Rules: append(slices.Clone(baseRules), extra...)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAPI_KeyCreateWithLimitsRefusesBadLimits(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		limits any
		code   string
	}{
		{"negative", map[string]any{"requests_per_minute": -1}, "invalid_limits"},
		{"budget without amount", map[string]any{"budget": map[string]any{"period": "month"}}, "invalid_limits"},
		{"budget with both", map[string]any{"budget": map[string]any{"period": "month", "dollars": 5, "tokens": 5}}, "invalid_limits"},
		{"budget period", map[string]any{"budget": map[string]any{"period": "year", "dollars": 5}}, "invalid_limits"},
		{"dollars with 7 decimals", map[string]any{"budget": map[string]any{"period": "day", "dollars": "0.0000001"}}, "invalid_limits"},
		{"unknown limit", map[string]any{"rpm": 5}, "unknown_field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			r := e.must(http.StatusBadRequest, "POST", "/admin/v1/keys", rootToken, map[string]any{"workspace": "w", "user": "a", "limits": tc.limits})
			if r.errorCode() != tc.code {
				t.Errorf("answer %s, want code %s", r.raw, tc.code)
			}
			if after := e.snapshot(); after != before {
				t.Errorf("a refused key changed the catalog: %+v, then %+v", before, after)
			}
		})
	}
}

// TestAPI_KeyPatch checks that PATCH changes name, tier, allowed models
// and expiry, keeps the secret, is audited, and refuses what it cannot
// change.
func TestAPI_KeyPatch(t *testing.T) {
	e := newEnv(t)
	created := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{"workspace": "w", "user": "a", "name": "old", "tier": "new"})
	id := created.body["key"].(map[string]any)["id"].(string)
	secret := created.body["secret"].(string)
	expires := e.clock.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	r := e.must(http.StatusOK, "PATCH", "/admin/v1/keys/"+id, rootToken, map[string]any{
		"name": "laptop", "tier": "standard", "allowed_models": []string{"mock-small"}, "expires_at": expires})
	k := r.body["key"].(map[string]any)
	if k["name"] != "laptop" || k["tier"] != "standard" || k["expires_at"] != expires.Format(time.RFC3339) || k["workspace"] != "w" {
		t.Fatalf("patched key = %v", k)
	}
	got, err := e.cat.Authenticate(context.Background(), secret)
	if err != nil || got.Tier != "standard" || !slices.Equal(got.AllowedModels, []string{"mock-small"}) {
		t.Fatalf("the old secret after PATCH: %+v, %v", got, err)
	}
	// null clears the expiry; absent fields stay.
	r = e.must(http.StatusOK, "PATCH", "/admin/v1/keys/"+id, rootToken, `{"expires_at": null, "allowed_models": []}`)
	k = r.body["key"].(map[string]any)
	if _, ok := k["expires_at"]; ok || k["name"] != "laptop" || k["allowed_models"] != nil {
		t.Fatalf("second PATCH = %v", k)
	}
	entries, _ := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Action: catalog.ActionKeyUpdate})
	if len(entries) != 2 || entries[0].Actor != rootActor {
		t.Fatalf("key.update audit = %+v", entries)
	}
	viewer := e.token(catalog.RoleViewer, "w")
	for _, tc := range []struct {
		token  string
		path   string
		body   any
		status int
		code   string
	}{
		{rootToken, "/admin/v1/keys/" + id, map[string]any{"workspace": "other"}, http.StatusBadRequest, "unknown_field"},
		{rootToken, "/admin/v1/keys/" + id, map[string]any{}, http.StatusBadRequest, "invalid_body"},
		{rootToken, "/admin/v1/keys/" + id, map[string]any{"expires_at": "yesterday"}, http.StatusBadRequest, "invalid_field"},
		{rootToken, "/admin/v1/keys/" + id, map[string]any{"expires_at": e.clock.Now().Add(-time.Hour)}, http.StatusBadRequest, "invalid"},
		{rootToken, "/admin/v1/keys/nosuchkey234", map[string]any{"name": "x"}, http.StatusNotFound, "unknown_key"},
		{viewer, "/admin/v1/keys/" + id, map[string]any{"name": "x"}, http.StatusForbidden, "forbidden"},
	} {
		r := e.must(tc.status, "PATCH", tc.path, tc.token, tc.body)
		if r.errorCode() != tc.code {
			t.Errorf("PATCH %s %v = %s, want code %s", tc.path, tc.body, r.raw, tc.code)
		}
	}
	e.must(http.StatusOK, "POST", "/admin/v1/keys/"+id+"/revoke", rootToken, nil)
	if r := e.must(http.StatusConflict, "PATCH", "/admin/v1/keys/"+id, rootToken, map[string]any{"name": "x"}); r.errorCode() != "key_revoked" {
		t.Fatalf("PATCH of a revoked key = %s", r.raw)
	}
}

// TestAPI_KeyCreateWithLimitsChecksTheOrgsRule checks that an org's own rule
// of the name, which replaces the deployment's for its keys, is checked for
// a key of that org only.
func TestAPI_KeyCreateWithLimitsChecksTheOrgsRule(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, "POST", "/admin/v1/rules?org=acme", rootToken, map[string]any{
		"name": KeyRuleInFlight, "org": "acme", "kind": "rate", "subject": "user", "limit": 5, "window": "1m"})
	r := e.must(http.StatusConflict, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"org": "acme", "workspace": "w", "user": "a", "limits": map[string]any{"max_in_flight": 2}})
	if r.errorCode() != "rule_conflict" || !strings.Contains(r.errorMessage(), "org acme") {
		t.Fatalf("acme key: %s", r.raw)
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "w", "user": "a", "limits": map[string]any{"max_in_flight": 2}})
}
