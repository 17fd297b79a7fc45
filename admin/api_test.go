package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
)

func TestAPI_KeysCreateListRotateRevoke(t *testing.T) {
	e := newEnv(t)
	created := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"org": "acme-inc", "workspace": "acme", "team": "core", "user": "ada", "tier": "new",
		"allowed_models": []string{"mock-small"}, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
	})
	secret := created.body["secret"].(string)
	key := created.body["key"].(map[string]any)
	id := key["id"].(string)
	if key["org"] != "acme-inc" || key["team"] != "core" || key["tier"] != "new" || key["expires_at"] == nil {
		t.Fatalf("created key = %v", key)
	}
	if _, err := e.cat.Authenticate(context.Background(), secret); err != nil {
		t.Fatalf("the returned secret does not authenticate: %v", err)
	}
	list := e.must(http.StatusOK, "GET", "/admin/v1/keys?workspace=acme", rootToken, nil)
	if strings.Contains(list.raw, secret) || !strings.Contains(list.raw, id) {
		t.Fatalf("list = %s", list.raw)
	}
	rotated := e.must(http.StatusOK, "POST", "/admin/v1/keys/"+id+"/rotate", rootToken, nil)
	newSecret := rotated.body["secret"].(string)
	if newSecret == secret {
		t.Fatal("rotation kept the secret")
	}
	if _, err := e.cat.Authenticate(context.Background(), secret); !errors.Is(err, catalog.ErrUnknownKey) {
		t.Fatalf("old secret after rotation: %v", err)
	}
	e.must(http.StatusOK, "POST", "/admin/v1/keys/"+id+"/revoke", rootToken, nil)
	if _, err := e.cat.Authenticate(context.Background(), newSecret); !errors.Is(err, catalog.ErrRevokedKey) {
		t.Fatalf("after revoke: %v", err)
	}
	if r := e.must(http.StatusConflict, "POST", "/admin/v1/keys/"+id+"/rotate", rootToken, nil); r.errorCode() != "key_revoked" {
		t.Fatalf("rotate revoked: %s", r.raw)
	}
	e.must(http.StatusNotFound, "DELETE", "/admin/v1/keys/nosuchkey", rootToken, nil)
	audit := e.must(http.StatusOK, "GET", "/admin/v1/audit?target=key/"+id, rootToken, nil)
	var actions []string
	for _, a := range audit.body["entries"].([]any) {
		m := a.(map[string]any)
		actions = append(actions, m["actor"].(string)+":"+m["action"].(string))
	}
	if got := strings.Join(actions, " "); got != "admin:key.revoke admin:key.rotate admin:key.create" {
		t.Fatalf("audit = %s", got)
	}
	if strings.Contains(audit.raw, secret) || strings.Contains(audit.raw, newSecret) {
		t.Fatal("the audit log holds a secret")
	}
}

// TestAPI_BadInput sends each kind of bad request and checks the status,
// the code, and that nothing changed.
func TestAPI_BadInput(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	for i := range catalog.MaxRulesPerOrg {
		e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
			"name": fmt.Sprintf("full_%03d", i), "org": "full", "kind": "rate", "subject": "user", "limit": 10, "window": "1m"})
	}
	rate := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "chat_rpm", "kind": "rate", "subject": "workspace+user", "limit": 60, "window": "1m"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name         string
		method, path string
		body         any
		status       int
		code         string
		says         string
	}{
		{"unknown field in a key", "POST", "/admin/v1/keys", `{"workspace":"acme","user":"ada","colour":"red"}`, 400, "unknown_field", `"colour"`},
		{"key without user", "POST", "/admin/v1/keys", `{"workspace":"acme"}`, 400, "invalid", "user is required"},
		{"wrong type in a key", "POST", "/admin/v1/keys", `{"workspace":"acme","user":7}`, 400, "invalid_field", `field "user": want a string`},
		{"key expiring in the past", "POST", "/admin/v1/keys", `{"workspace":"acme","user":"ada","expires_at":"2001-01-01T00:00:00Z"}`, 400, "invalid", "not in the future"},
		{"not JSON", "POST", "/admin/v1/keys", `{"workspace":`, 400, "invalid_body", "not valid JSON"},
		{"empty body", "POST", "/admin/v1/rules", ``, 400, "invalid_body", "empty"},
		{"two objects", "POST", "/admin/v1/rules", `{"name":"a"} {"name":"b"}`, 400, "invalid_body", "one JSON object"},
		{"array body", "POST", "/admin/v1/rules", `[1]`, 400, "invalid_body", "must be a JSON object"},
		{"unknown field in a rule", "POST", "/admin/v1/rules", rate(map[string]any{"max": 3}), 400, "unknown_field", `"max"`},
		{"limit as a string", "POST", "/admin/v1/rules", rate(map[string]any{"limit": "60"}), 400, "invalid_field", `field "limit": want an integer`},
		{"negative limit", "POST", "/admin/v1/rules", rate(map[string]any{"limit": -5}), 400, "invalid", "must not be negative"},
		{"no limit", "POST", "/admin/v1/rules", `{"name":"x","kind":"rate","subject":"user","window":"1m"}`, 400, "invalid", "limit is required"},
		{"window as a number", "POST", "/admin/v1/rules", rate(map[string]any{"window": 60}), 400, "invalid_body", "duration string"},
		{"bad subject", "POST", "/admin/v1/rules", rate(map[string]any{"subject": "planet"}), 400, "invalid", "planet"},
		{"rate rule on budgets route", "POST", "/admin/v1/budgets", rate(nil), 400, "invalid", `kind must be "budget"`},
		{"201st rule of an org", "POST", "/admin/v1/rules", rate(map[string]any{"org": "full"}), 409, "too_many_rules", "already has 200 rules"},
		{"update of a missing rule", "PUT", "/admin/v1/rules/ghost", rate(nil), 404, "unknown_rule", "ghost"},
		{"delete of a missing rule", "DELETE", "/admin/v1/rules/ghost", nil, 404, "unknown_rule", "ghost"},
		{"override for a missing workspace", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"workspace","value":"ghost","limit":5}`, 404, "unknown_subject", `workspace "ghost"`},
		{"override for a missing user", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"user","value":"nobody","limit":5}`, 404, "unknown_subject", "nobody"},
		{"override for a missing key", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"key","value":"nokey","limit":5}`, 404, "unknown_subject", "nokey"},
		{"override of a missing rule", "PUT", "/admin/v1/overrides", `{"rule":"ghost","attribute":"workspace","value":"acme","limit":5}`, 404, "unknown_rule", "ghost"},
		{"negative override", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"workspace","value":"acme","limit":-1}`, 400, "invalid", "must not be negative"},
		{"override limit as a string", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"workspace","value":"acme","limit":"5"}`, 400, "invalid_field", `field "limit"`},
		{"override on ip", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"ip","value":"10.0.0.1","limit":5}`, 400, "invalid", "attribute must be one of"},
		{"override expired", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"workspace","value":"acme","limit":5,"expires_at":"2001-01-01T00:00:00Z"}`, 400, "invalid", "not in the future"},
		{"unknown field in an override", "PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"workspace","value":"acme","limit":5,"workspace":"acme"}`, 400, "unknown_field", `"workspace"`},
		{"delete of a missing override", "DELETE", "/admin/v1/overrides/daily_token_budget/workspace/acme", nil, 404, "unknown_override", "unknown override"},
		{"viewer token without workspaces", "POST", "/admin/v1/tokens", `{"role":"viewer"}`, 400, "invalid", "needs the workspaces"},
		{"token with a bad role", "POST", "/admin/v1/tokens", `{"role":"owner"}`, 400, "invalid", "role must be"},
		{"usage grouped by prompt", "GET", "/admin/v1/usage?group_by=prompt", nil, 400, "invalid", `cannot group by "prompt"`},
		{"usage with a bad date", "GET", "/admin/v1/usage?from=yesterday", nil, 400, "invalid", "from: want a date"},
		{"budgets of no subject", "GET", "/admin/v1/budgets", nil, 400, "subject_required", "name a subject"},
		{"budgets of a model only", "GET", "/admin/v1/budgets?model=mock-small", nil, 400, "subject_required", "workspace, user, team, key or org"},
		{"effective with a typo", "GET", "/admin/v1/effective?worksapce=acme", nil, 400, "unknown_parameter", "worksapce"},
		{"effective of a missing key", "GET", "/admin/v1/effective?key=nokey", nil, 404, "unknown_key", "unknown API key"},
		{"audit with a bad limit", "GET", "/admin/v1/audit?limit=0", nil, 400, "invalid", "limit"},
		{"unknown route", "GET", "/admin/v1/nothing", nil, 404, "not_found", "no such admin route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			r := e.do(tc.method, tc.path, rootToken, tc.body)
			if r.status != tc.status || r.errorCode() != tc.code || !strings.Contains(r.errorMessage(), tc.says) {
				t.Fatalf("= %d %s, want %d %s saying %q", r.status, r.raw, tc.status, tc.code, tc.says)
			}
			if after := e.snapshot(); after != before {
				t.Fatalf("the catalog changed: %+v -> %+v", before, after)
			}
		})
	}
	if n := e.changes.Load(); n != catalog.MaxRulesPerOrg {
		t.Fatalf("OnChange called %d times, want once per created rule (%d)", n, catalog.MaxRulesPerOrg)
	}
}

func TestAPI_AuthTokensAndRoles(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	otherKey, _ := e.createKey("globex", "gus")
	viewer := e.token("viewer", "acme")
	admin := e.token("admin")

	// An admin token made through the API writes, audited under its ID.
	r := e.must(http.StatusOK, "PUT", "/admin/v1/overrides", admin, map[string]any{"rule": "daily_token_budget", "attribute": "workspace", "value": "acme", "limit": 500})
	_ = r
	entries, _ := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Action: catalog.ActionOverrideSet})
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Actor, "token:") {
		t.Fatalf("override audit = %+v", entries)
	}

	// A viewer reads its workspace.
	e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme", viewer, nil)
	e.must(http.StatusOK, "GET", "/admin/v1/effective", viewer, nil) // its one workspace
	e.must(http.StatusOK, "GET", "/admin/v1/usage?workspace=acme", viewer, nil)
	e.must(http.StatusOK, "GET", "/admin/v1/budgets?workspace=acme", viewer, nil)
	e.must(http.StatusOK, "GET", "/admin/v1/rules", viewer, nil)
	keys := e.must(http.StatusOK, "GET", "/admin/v1/keys", viewer, nil)
	if strings.Contains(keys.raw, "globex") || !strings.Contains(keys.raw, "acme") {
		t.Fatalf("viewer's keys = %s", keys.raw)
	}
	ov := e.must(http.StatusOK, "GET", "/admin/v1/overrides", viewer, nil)
	if !strings.Contains(ov.raw, `"acme"`) {
		t.Fatalf("viewer's overrides = %s", ov.raw)
	}
	aud := e.must(http.StatusOK, "GET", "/admin/v1/audit", viewer, nil)
	if strings.Contains(aud.raw, "globex") || !strings.Contains(aud.raw, "override.set") {
		t.Fatalf("viewer's audit = %s", aud.raw)
	}

	// A forged workspace in a viewer's query is refused.
	for _, path := range []string{
		"/admin/v1/effective?workspace=globex",
		"/admin/v1/effective?key=" + otherKey,
		"/admin/v1/effective?workspace=acme&key=" + otherKey,
		"/admin/v1/budgets?workspace=globex",
		"/admin/v1/usage?workspace=globex",
		"/admin/v1/keys?workspace=globex",
		"/admin/v1/keys/" + otherKey,
		"/admin/v1/overrides?workspace=globex",
		"/admin/v1/audit?workspace=globex",
	} {
		if r := e.do("GET", path, viewer, nil); r.status != http.StatusForbidden || r.errorCode() != "forbidden_workspace" {
			t.Errorf("viewer GET %s = %d %s, want 403 forbidden_workspace", path, r.status, r.raw)
		}
	}
	for _, path := range []string{"/admin/v1/tokens", "/admin/v1/reservations"} {
		e.must(http.StatusForbidden, "GET", path, viewer, nil)
	}

	// A viewer's writes are refused, change nothing, and are audited.
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/admin/v1/overrides", `{"rule":"daily_token_budget","attribute":"workspace","value":"acme","limit":0}`},
		{"POST", "/admin/v1/keys", `{"workspace":"acme","user":"eve"}`},
		{"POST", "/admin/v1/rules", `{"name":"x","kind":"rate","subject":"user","limit":1,"window":"1m"}`},
		{"POST", "/admin/v1/tokens", `{"role":"admin"}`},
		{"POST", "/admin/v1/reload", ``},
	} {
		before := e.snapshot()
		r := e.do(w.method, w.path, viewer, w.body)
		if r.status != http.StatusForbidden || !strings.Contains(r.errorMessage(), "read-only") {
			t.Errorf("viewer %s %s = %d %s, want 403", w.method, w.path, r.status, r.raw)
		}
		after := e.snapshot()
		if after.deniedAudit != before.deniedAudit+1 || after.keys != before.keys || after.rules != before.rules ||
			after.overrides != before.overrides || after.tokens != before.tokens {
			t.Errorf("viewer %s %s: %+v -> %+v, want only one denied audit entry more", w.method, w.path, before, after)
		}
	}
	denied, _ := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Action: "denied", Limit: 1})
	if len(denied) != 1 || !strings.HasPrefix(denied[0].Actor, "token:") || denied[0].Target != "POST /admin/v1/reload" {
		t.Fatalf("denied entry = %+v", denied)
	}

	// Missing, wrong, expired and revoked tokens are 401; a write attempt
	// with one is audited, without the token.
	expiring, _, _ := e.cat.CreateAdminToken(context.Background(), catalog.AdminToken{Role: catalog.RoleAdmin,
		ExpiresAt: time.Now().Add(50 * time.Millisecond)}, "admin")
	revoked := e.token("admin")
	list := e.must(http.StatusOK, "GET", "/admin/v1/tokens", rootToken, nil)
	var revokedID string
	for _, tok := range list.body["tokens"].([]any) {
		m := tok.(map[string]any)
		if strings.Contains(revoked, m["id"].(string)) {
			revokedID = m["id"].(string)
		}
	}
	if strings.Contains(list.raw, revoked) {
		t.Fatal("the token list shows a secret")
	}
	e.must(http.StatusNoContent, "DELETE", "/admin/v1/tokens/"+revokedID, rootToken, nil)
	time.Sleep(60 * time.Millisecond) // let the short token expire
	for i, tc := range []struct{ token, says string }{
		{"", "admin token required"},
		{"wrong", "invalid admin token"},
		{rootToken + "x", "invalid admin token"},
		{expiring, "admin token expired"},
		{revoked, "admin token revoked"},
	} {
		for _, method := range []string{"GET", "PUT"} {
			before := e.snapshot()
			r := e.do(method, "/admin/v1/overrides", tc.token, `{"rule":"daily_token_budget","attribute":"workspace","value":"acme","limit":0}`)
			if r.status != http.StatusUnauthorized || !strings.Contains(r.errorMessage(), tc.says) {
				t.Errorf("%s with token %q = %d %s, want 401 saying %q", method, tc.token, r.status, r.raw, tc.says)
			}
			after := e.snapshot()
			wantDenied := before.deniedAudit
			if method == "PUT" && i == 0 {
				// Once a minute per source (TestAPI_AnonymousDenialsAuditedOncePerMinute).
				wantDenied++
			}
			if after.deniedAudit != wantDenied || after.overrides != before.overrides {
				t.Errorf("%s with token %q: %+v -> %+v", method, tc.token, before, after)
			}
		}
	}
	all, _ := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Limit: 1000})
	for _, a := range all {
		if strings.Contains(fmt.Sprint(a.Before, a.After, a.Target, a.Actor), "sluice-adm-") {
			t.Fatalf("an audit entry holds a token: %+v", a)
		}
	}
	// /metrics needs a token too.
	e.must(http.StatusUnauthorized, "GET", "/metrics", "", nil)
	e.must(http.StatusOK, "GET", "/metrics", viewer, nil)
	e.must(http.StatusOK, "GET", "/healthz", "", nil)
}

func TestAPI_OverrideAppliesToTheNextRequest(t *testing.T) {
	e := newEnv(t)
	keyID, _ := e.createKey("acme", "ada")
	id := sluice.Identity{Workspace: "acme", User: "ada", Key: keyID}
	if err := e.admit(id, 10); err != nil {
		t.Fatal(err)
	}
	// A limit of 1 request per minute for the workspace: the next request
	// is refused, with no wait for a refresh.
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "rate_per_minute", "attribute": "workspace", "value": "acme", "limit": 1, "burst": nil})
	if err := e.admit(id, 10); !errors.Is(err, sluice.ErrRateLimited) {
		t.Fatalf("after override limit 1: %v, want rate limited", err)
	}
	eff := e.must(http.StatusOK, "GET", "/admin/v1/effective?key="+keyID, rootToken, nil)
	rpm := limitIn(t, eff, "limits", "rate_per_minute")
	if rpm == nil || rpm["source"] != "override" || rpm["limit"] != float64(1) {
		t.Fatalf("effective rate_per_minute = %v", rpm)
	}
	if ident := eff.body["identity"].(map[string]any); ident["workspace"] != "acme" || ident["user"] != "ada" {
		t.Fatalf("identity from the key = %v", ident)
	}
	// 0 disables the rule for the subject; the next request passes.
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "rate_per_minute", "attribute": "workspace", "value": "acme", "limit": 0})
	if err := e.admit(id, 10); err != nil {
		t.Fatalf("after override 0: %v", err)
	}
	eff = e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if limitIn(t, eff, "limits", "rate_per_minute") != nil {
		t.Fatalf("a disabled rule is listed: %s", eff.raw)
	}
	// Deleting the override restores the rule's limit.
	e.must(http.StatusNoContent, "DELETE", "/admin/v1/overrides/rate_per_minute/workspace/acme", rootToken, nil)
	eff = e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if rpm := limitIn(t, eff, "limits", "rate_per_minute"); rpm == nil || rpm["limit"] != float64(20) || rpm["source"] != "config" {
		t.Fatalf("after delete = %v", rpm)
	}
	list := e.must(http.StatusOK, "GET", "/admin/v1/overrides?workspace=acme", rootToken, nil)
	if n := len(list.body["overrides"].([]any)); n != 0 {
		t.Fatalf("%d overrides left", n)
	}
	audit := e.must(http.StatusOK, "GET", "/admin/v1/audit?target=override/rate_per_minute/workspace/acme", rootToken, nil)
	entries := audit.body["entries"].([]any)
	if len(entries) != 3 {
		t.Fatalf("audit = %s", audit.raw)
	}
	last := entries[1].(map[string]any) // the second set: before limit 1, after limit 0
	if last["before"].(map[string]any)["limit"] != float64(1) || last["after"].(map[string]any)["limit"] != float64(0) {
		t.Fatalf("audit before/after = %v", last)
	}
}

func TestAPI_RulesLifecycle(t *testing.T) {
	e := newEnv(t)
	id := sluice.Identity{Workspace: "acme", User: "ada"}
	r := e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "ada_daily", "kind": "budget", "subject": "user", "metric": "requests", "limit": 2, "period": "day"})
	if rule := r.body["rule"].(map[string]any); rule["enabled"] != true || rule["org"] != nil {
		t.Fatalf("created = %v", rule)
	}
	e.must(http.StatusConflict, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "ada_daily", "kind": "budget", "subject": "user", "limit": 2, "period": "day"})
	list := e.must(http.StatusOK, "GET", "/admin/v1/rules", rootToken, nil)
	var source string
	for _, p := range list.body["policy"].([]any) {
		if m := p.(map[string]any); m["name"] == "ada_daily" {
			source = m["source"].(string)
		}
	}
	if source != "rule" {
		t.Fatalf("stored rule's source = %q in %s", source, list.raw)
	}
	for range 2 {
		if err := e.admit(id, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.admit(id, 1); !errors.Is(err, sluice.ErrBudgetExhausted) {
		t.Fatalf("third request: %v, want budget exhausted", err)
	}
	// Disabling stops counting at once.
	e.must(http.StatusOK, "POST", "/admin/v1/rules/ada_daily/disable", rootToken, nil)
	if err := e.admit(id, 1); err != nil {
		t.Fatalf("after disable: %v", err)
	}
	// Enabling again finds the usage counted before (same counters).
	e.must(http.StatusOK, "POST", "/admin/v1/rules/ada_daily/enable", rootToken, nil)
	if err := e.admit(id, 1); !errors.Is(err, sluice.ErrBudgetExhausted) {
		t.Fatalf("after enable: %v, want budget exhausted", err)
	}
	// Raising the limit keeps the usage; changing the subject starts new
	// counters.
	e.must(http.StatusOK, "PUT", "/admin/v1/rules/ada_daily", rootToken, map[string]any{
		"kind": "budget", "subject": "user", "metric": "requests", "limit": 3, "period": "day"})
	eff := e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if l := limitIn(t, eff, "limits", "ada_daily"); l["used"] != float64(2) || l["limit"] != float64(3) {
		t.Fatalf("after raising the limit: %v", l)
	}
	e.must(http.StatusOK, "PUT", "/admin/v1/rules/ada_daily", rootToken, map[string]any{
		"kind": "budget", "subject": "workspace+user", "metric": "requests", "limit": 3, "period": "day"})
	eff = e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if l := limitIn(t, eff, "limits", "ada_daily"); l["used"] != float64(0) {
		t.Fatalf("after changing the subject: %v", l)
	}
	// A stored rule replaces the config rule of the same name.
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{
		"name": "rate_per_minute", "kind": "rate", "subject": "workspace+user", "limit": 5, "window": "1m"})
	eff = e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if l := limitIn(t, eff, "limits", "rate_per_minute"); l["limit"] != float64(5) || l["source"] != "rule" || l["window"] != "1m0s" {
		t.Fatalf("stored rate_per_minute = %v", l)
	}
	e.must(http.StatusNoContent, "DELETE", "/admin/v1/rules/ada_daily", rootToken, nil)
	e.must(http.StatusNotFound, "GET", "/admin/v1/rules/ada_daily", rootToken, nil)
	eff = e.must(http.StatusOK, "GET", "/admin/v1/effective?workspace=acme&user=ada", rootToken, nil)
	if limitIn(t, eff, "limits", "ada_daily") != nil {
		t.Fatal("a deleted rule still applies")
	}
	audit := e.must(http.StatusOK, "GET", "/admin/v1/audit?target=rule/ada_daily", rootToken, nil)
	if n := len(audit.body["entries"].([]any)); n != 6 {
		t.Fatalf("%d audit entries for the rule, want 6 (create, disable, enable, 2 updates, delete)", n)
	}
}

func TestAPI_BudgetsWithLiveUsageAndReserved(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	e.must(http.StatusCreated, "POST", "/admin/v1/budgets", rootToken, map[string]any{
		"name": "acme_cost", "subject": "workspace", "metric": "cost", "limit": "$5", "period": "month"})
	id := sluice.Identity{Workspace: "acme", User: "ada"}
	if err := e.admit(id, 300); err != nil {
		t.Fatal(err)
	}
	open, err := e.limiter.Admit(context.Background(), sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 1000, Cost: 2000}})
	if err != nil {
		t.Fatal(err)
	}
	r := e.must(http.StatusOK, "GET", "/admin/v1/budgets?workspace=acme", rootToken, nil)
	daily := limitIn(t, r, "budgets", "daily_token_budget")
	if daily == nil || daily["used"] != float64(1300) || daily["reserved"] != float64(1000) ||
		daily["remaining"] != float64(1_000_000-1300) || daily["period"] != "day" || daily["reset_at"] == nil {
		t.Fatalf("daily budget = %v", daily)
	}
	cost := limitIn(t, r, "budgets", "acme_cost")
	// Money in dollars: the 2,000 micro-dollars reserved are $0.002.
	if cost == nil || cost["reserved"] != "$0.002" || cost["used"] != "$0.002" || cost["limit"] != "$5" || cost["source"] != "rule" {
		t.Fatalf("cost budget = %v", cost)
	}
	if limitIn(t, r, "budgets", "rate_per_minute") != nil {
		t.Fatal("a rate rule is listed as a budget")
	}
	res := e.must(http.StatusOK, "GET", "/admin/v1/reservations", rootToken, nil)
	if n := len(res.body["reservations"].([]any)); n != 1 {
		t.Fatalf("open reservations = %s", res.raw)
	}
	// The id is a string (it may pass 2^53, where a JavaScript number is
	// no longer exact); each charge names its rule and metric.
	listed := res.body["reservations"].([]any)[0].(map[string]any)
	if id, ok := listed["id"].(string); !ok || id != strconv.FormatUint(open.ID(), 10) {
		t.Errorf("reservation id = %#v, want the string %d", listed["id"], open.ID())
	}
	named := map[string]string{}
	for _, c := range listed["charges"].([]any) {
		c := c.(map[string]any)
		rule, _ := c["rule"].(string)
		named[rule], _ = c["metric"].(string)
	}
	if named["acme_cost"] != "cost" || named["daily_token_budget"] != "tokens" {
		t.Errorf("reservation charges = %v, want each named by rule and metric", listed["charges"])
	}
	if err := open.Settle(context.Background(), sluice.Usage{InputTokens: 400, Cost: 800}); err != nil {
		t.Fatal(err)
	}
	r = e.must(http.StatusOK, "GET", "/admin/v1/budgets?workspace=acme", rootToken, nil)
	if daily := limitIn(t, r, "budgets", "daily_token_budget"); daily["used"] != float64(700) || daily["reserved"] != float64(0) {
		t.Fatalf("after settle = %v", daily)
	}
	res = e.must(http.StatusOK, "GET", "/admin/v1/reservations", rootToken, nil)
	if n := len(res.body["reservations"].([]any)); n != 0 {
		t.Fatalf("open reservations after settle = %s", res.raw)
	}
}

func TestAPI_UsageFromTheLedger(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	day := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, u := range []catalog.UsageEntry{
		{Workspace: "acme", Route: "chat", Model: "mock-small", At: day, Requests: 1, InputTokens: 10, OutputTokens: 5, CostMicros: 7},
		{Workspace: "acme", Route: "chat", Model: "mock-large", At: day, Requests: 1, InputTokens: 20, OutputTokens: 5, CostMicros: 70},
		{Workspace: "acme", Route: "messages", Model: "mock-small", At: day.AddDate(0, 0, 1), Requests: 2, InputTokens: 30},
		{Workspace: "globex", Route: "chat", Model: "mock-small", At: day, Requests: 9, InputTokens: 900, KeyID: "k-globex"},
		{Workspace: "initech", Route: "chat", Model: "mock-small", At: day, Requests: 4, InputTokens: 400, KeyID: "k-globex"},
	} {
		_ = i
		e.cat.RecordUsage(u)
	}
	if err := e.cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.must(http.StatusOK, "GET", "/admin/v1/usage?workspace=acme&from=2026-03-01&to=2026-03-02&group_by=day", rootToken, nil)
	rows := r.body["usage"].([]any)
	if len(rows) != 2 || rows[0].(map[string]any)["input_tokens"] != float64(30) || rows[1].(map[string]any)["requests"] != float64(2) {
		t.Fatalf("by day = %s", r.raw)
	}
	r = e.must(http.StatusOK, "GET", "/admin/v1/usage?workspace=acme&group_by=day,route,model", rootToken, nil)
	if rows := r.body["usage"].([]any); len(rows) != 3 {
		t.Fatalf("by day, route, model = %s", r.raw)
	}
	r = e.must(http.StatusOK, "GET", "/admin/v1/usage?from=2026-03-01T00:00:00Z&to=2026-03-01", rootToken, nil)
	if rows := r.body["usage"].([]any); len(rows) != 1 || rows[0].(map[string]any)["requests"] != float64(15) {
		t.Fatalf("all workspaces, one day = %s", r.raw)
	}
	// One key's usage, in every workspace it was charged to.
	r = e.must(http.StatusOK, "GET", "/admin/v1/usage?key=k-globex&group_by=workspace", rootToken, nil)
	if rows := r.body["usage"].([]any); len(rows) != 2 || rows[0].(map[string]any)["requests"].(float64)+rows[1].(map[string]any)["requests"].(float64) != 13 {
		t.Fatalf("by key = %s", r.raw)
	}
	e.must(http.StatusBadRequest, "GET", "/admin/v1/usage?from=2026-03-02&to=2026-03-01", rootToken, nil)
}

func TestAPI_AuditFilters(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	e.must(http.StatusCreated, "POST", "/admin/v1/rules", rootToken, map[string]any{"name": "a", "kind": "rate", "subject": "user", "limit": 1, "window": "1s"})
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{"rule": "a", "attribute": "user", "value": "ada", "limit": 3})
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"", 3},
		{"?actor=admin", 2},
		{"?actor=setup", 1},
		{"?action=rule.create", 1},
		{"?target=rule/a", 1},
		{"?since=" + since, 3},
		{"?since=2200-01-01", 0},
		{"?limit=1", 1},
		{"?workspace=acme", 1},
	} {
		r := e.must(http.StatusOK, "GET", "/admin/v1/audit"+tc.query, rootToken, nil)
		if n := len(r.body["entries"].([]any)); n != tc.want {
			t.Errorf("audit%s: %d entries, want %d: %s", tc.query, n, tc.want, r.raw)
		}
	}
}

func TestAPI_ReloadKeepsTheOldPolicyOnError(t *testing.T) {
	e := newEnv(t)
	bad := errors.New(`config: rules[0]: limit: must not be negative`)
	e.reloadErr.Store(&bad)
	before := e.limiter.Policy()
	r := e.must(http.StatusUnprocessableEntity, "POST", "/admin/v1/reload", rootToken, nil)
	if r.errorCode() != "invalid_config" || !strings.Contains(r.errorMessage(), "must not be negative") || !strings.Contains(r.errorMessage(), "kept") {
		t.Fatalf("bad reload = %s", r.raw)
	}
	if len(e.limiter.Policy().Rules) != len(before.Rules) {
		t.Fatal("the policy changed")
	}
	e.reloadErr.Store(nil)
	e.must(http.StatusOK, "POST", "/admin/v1/reload", rootToken, nil)
	entries, _ := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Action: "config.reload"})
	if len(entries) != 2 || !entries[1].Denied || entries[0].Denied {
		t.Fatalf("reload audit = %+v", entries)
	}
}
