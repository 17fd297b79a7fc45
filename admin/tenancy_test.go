package admin

import (
	"errors"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

// A rule stored for an org through the API refuses that org's requests
// only; rules are listed, changed and deleted per org; a viewer reads its
// own org's rules and no other's.
func TestAPI_RulesScopedByOrg(t *testing.T) {
	e := newEnv(t)
	rule := func(org string, limit int) map[string]any {
		return map[string]any{"name": "one_per_user", "org": org, "kind": "budget", "subject": "user", "limit": limit, "period": "day"}
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, rule("orgA", 1))
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, rule("orgB", 3))
	e.must(http.StatusConflict, "POST", "/admin/v1/rules", rootToken, rule("orgA", 2))

	in := func(org string) sluice.Identity { return sluice.Identity{Org: org, Workspace: "shared", User: "dup"} }
	if err := e.admit(in("orgA"), 1); err != nil {
		t.Fatal(err)
	}
	if err := e.admit(in("orgA"), 1); !errors.Is(err, sluice.ErrBudgetExhausted) {
		t.Fatalf("orgA's second call: %v, want its rule's refusal", err)
	}
	for i := range 3 {
		if err := e.admit(in("orgB"), 1); err != nil {
			t.Fatalf("orgB call %d: %v (orgA's rule must not apply)", i, err)
		}
	}
	if err := e.admit(in("orgC"), 1); err != nil {
		t.Fatalf("orgC: %v (no org rule applies)", err)
	}

	// Changed and deleted per org.
	e.must(http.StatusOK, "PUT", "/admin/v1/rules/one_per_user?org=orgA", rootToken, rule("", 5))
	e.must(http.StatusNotFound, "PUT", "/admin/v1/rules/one_per_user", rootToken, rule("", 5)) // no deployment rule of that name
	e.must(http.StatusBadRequest, "PUT", "/admin/v1/rules/one_per_user?org=orgA", rootToken, rule("orgB", 5))
	if err := e.admit(in("orgA"), 1); err != nil {
		t.Fatalf("orgA after its rule was raised: %v", err)
	}
	e.must(http.StatusNoContent, "DELETE", "/admin/v1/rules/one_per_user?org=orgB", rootToken, nil)
	e.must(http.StatusNotFound, "GET", "/admin/v1/rules/one_per_user?org=orgB", rootToken, nil)
	if got := e.must(http.StatusOK, "GET", "/admin/v1/rules/one_per_user?org=orgA", rootToken, nil); got.body["rule"].(map[string]any)["limit"] != float64(5) {
		t.Fatalf("orgA's rule = %s", got.raw)
	}

	// Listing: every org, one org, the deployment's.
	count := func(token, query string) (stored, policy int) {
		r := e.must(http.StatusOK, "GET", "/admin/v1/rules"+query, token, nil)
		for _, p := range r.body["policy"].([]any) {
			if p.(map[string]any)["org"] != nil {
				policy++
			}
		}
		return len(r.body["rules"].([]any)), policy
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, rule("orgB", 3))
	if s, p := count(rootToken, ""); s != 2 || p != 2 {
		t.Errorf("every org: %d stored, %d org rules in force; want 2, 2", s, p)
	}
	if s, p := count(rootToken, "?org=orgA"); s != 1 || p != 1 {
		t.Errorf("orgA: %d stored, %d org rules in force; want 1, 1", s, p)
	}
	if s, _ := count(rootToken, "?org="); s != 0 {
		t.Errorf("deployment rules: %d stored, want 0", s)
	}

	// A viewer of orgA.
	r := e.must(http.StatusCreated, "POST", "/admin/v1/tokens", rootToken, map[string]any{"role": "viewer", "workspaces": []string{"shared"}, "org": "orgA"})
	viewer := r.body["secret"].(string)
	if s, p := count(viewer, ""); s != 1 || p != 1 {
		t.Errorf("orgA's viewer: %d stored, %d org rules in force; want its org's 1, 1", s, p)
	}
	e.must(http.StatusForbidden, "GET", "/admin/v1/rules?org=orgB", viewer, nil)
	e.must(http.StatusNotFound, "GET", "/admin/v1/rules/one_per_user?org=", rootToken, nil)
	if got := e.must(http.StatusOK, "GET", "/admin/v1/rules/one_per_user", viewer, nil); got.body["rule"].(map[string]any)["org"] != "orgA" {
		t.Fatalf("viewer's rule = %s", got.raw)
	}
	e.must(http.StatusForbidden, "DELETE", "/admin/v1/rules/one_per_user?org=orgA", viewer, nil)
	// An admin token takes no org.
	e.must(http.StatusBadRequest, "POST", "/admin/v1/tokens", rootToken, map[string]any{"role": "admin", "org": "orgA"})
}

// Overrides of two orgs' workspaces of one name are each their own.
func TestAPI_OverridesScopedByOrg(t *testing.T) {
	e := newEnv(t)
	for _, org := range []string{"orgA", "orgB"} {
		if _, _, err := e.cat.CreateKey(t.Context(), catalogKey(org, "shared", "u"), "setup"); err != nil {
			t.Fatal(err)
		}
	}
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "ws_daily", "kind": "budget", "subject": "workspace", "limit": 1, "period": "day"})
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{"rule": "ws_daily", "org": "orgA", "attribute": "workspace", "value": "shared", "limit": 3})
	e.must(http.StatusNotFound, "PUT", "/admin/v1/overrides", rootToken, map[string]any{"rule": "ws_daily", "org": "orgC", "attribute": "workspace", "value": "shared", "limit": 3})
	calls := func(org string) int {
		n := 0
		for range 5 {
			if err := e.admit(sluice.Identity{Org: org, Workspace: "shared", User: "u"}, 1); err != nil {
				break
			}
			n++
		}
		return n
	}
	if a, b := calls("orgA"), calls("orgB"); a != 3 || b != 1 {
		t.Fatalf("orgA admitted %d, orgB %d; want orgA's override of 3 and the rule's 1", a, b)
	}
	// orgA's viewer of its workspace "shared" reads orgA's key and
	// override, not orgB's of the same names.
	r := e.must(http.StatusCreated, "POST", "/admin/v1/tokens", rootToken, map[string]any{"role": "viewer", "workspaces": []string{"shared"}, "org": "orgA"})
	viewer := r.body["secret"].(string)
	keys := e.must(http.StatusOK, "GET", "/admin/v1/keys?workspace=shared", viewer, nil).body["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["org"] != "orgA" {
		t.Fatalf("orgA's viewer lists keys %v, want orgA's one", keys)
	}
	overrides := e.must(http.StatusOK, "GET", "/admin/v1/overrides", viewer, nil).body["overrides"].([]any)
	if len(overrides) != 1 || overrides[0].(map[string]any)["org"] != "orgA" {
		t.Fatalf("orgA's viewer lists overrides %v, want orgA's one", overrides)
	}
	e.must(http.StatusForbidden, "GET", "/admin/v1/effective?workspace=shared&org=orgB", viewer, nil)
	e.must(http.StatusForbidden, "GET", "/admin/v1/usage?workspace=shared&org=orgB", viewer, nil)
	e.cat.RecordUsage(catalog.UsageEntry{Org: "orgB", Workspace: "shared", Route: "chat", Model: "m", Requests: 1, InputTokens: 9})
	if err := e.cat.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rows := e.must(http.StatusOK, "GET", "/admin/v1/usage?workspace=shared", viewer, nil).body["usage"].([]any); len(rows) != 1 || rows[0].(map[string]any)["input_tokens"] != float64(0) {
		t.Fatalf("orgA's viewer reads usage %v, want none of orgB's", rows)
	}
	audit := e.must(http.StatusOK, "GET", "/admin/v1/audit", viewer, nil).body["entries"].([]any)
	for _, a := range audit {
		if m := a.(map[string]any); m["org"] != "orgA" {
			t.Errorf("orgA's viewer reads audit entry %v", m)
		}
	}
	if len(audit) != 2 { // orgA's key, orgA's override
		t.Errorf("orgA's viewer reads %d audit entries, want 2", len(audit))
	}
	e.must(http.StatusNoContent, "DELETE", "/admin/v1/overrides/ws_daily/workspace/shared?org=orgA", rootToken, nil)
	e.must(http.StatusNotFound, "DELETE", "/admin/v1/overrides/ws_daily/workspace/shared?org=orgB", rootToken, nil)
}

func catalogKey(org, workspace, user string) catalog.Key {
	return catalog.Key{Org: org, Workspace: workspace, User: user}
}
