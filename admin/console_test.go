package admin

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
)

// browser is an HTTP client with a cookie jar, for the console.
type browser struct {
	t      *testing.T
	e      *env
	client *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, client: &http.Client{Jar: jar}}
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.client.Get(b.e.srv.URL + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	resp, err := b.client.PostForm(b.e.srv.URL+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// login signs in through the form: its page, then the post with the
// form's CSRF token.
func (b *browser) login(token string) (int, string) {
	b.t.Helper()
	_, page := b.get("/ui/login")
	return b.post("/ui/login", url.Values{"token": {token}, "csrf": {csrfOf(b.t, page)}})
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF field on the page")
	}
	return m[1]
}

func TestConsole_LoginCookieAndPages(t *testing.T) {
	e := newEnv(t)
	e.createKey("acme", "ada")
	e.cat.RecordUsage(catalog.UsageEntry{Workspace: "acme", Route: "chat", Model: "mock-small", Requests: 3, InputTokens: 1200, OutputTokens: 300, CostMicros: 4200})
	e.cat.RecordUsage(catalog.UsageEntry{Workspace: "acme", Route: "chat", Model: "mock-small", At: time.Now().AddDate(0, 0, -3), Requests: 1, InputTokens: 500})
	e.cat.RecordUsage(catalog.UsageEntry{Workspace: "acme", Route: "chat", Model: "mock-small", Requests: 1, CacheHit: true, CacheSavedMicros: 1400})
	if err := e.cat.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	if status, body := b.get("/ui/"); status != http.StatusOK || !strings.Contains(body, `name="token"`) {
		t.Fatalf("unauthenticated /ui/ = %d, want the login page", status)
	}
	if status, body := b.login("wrong"); status != http.StatusUnauthorized || !strings.Contains(body, "invalid admin token") {
		t.Fatalf("bad login = %d %s", status, body)
	}
	jar, _ := cookiejar.New(nil)
	noFollow := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	loginPage, err := noFollow.Get(e.srv.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	pageBody, _ := io.ReadAll(loginPage.Body)
	loginPage.Body.Close()
	resp, err := noFollow.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {rootToken}, "csrf": {csrfOf(t, string(pageBody))}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.Value == rootToken {
		t.Fatalf("session cookie = %+v", ck)
	}

	b.login(rootToken)
	for path, want := range map[string]string{
		"/ui/":                `<td class="n">25% <span class="muted">($0.0014 saved)</span></td>`,
		"/ui/workspaces/acme": `<svg id="cost-chart"`,
		"/ui/rules":           "daily_token_budget",
		"/ui/overrides":       "No override",
		"/ui/reservations":    "None open",
		"/ui/audit":           "key.create",
	} {
		status, body := b.get(path)
		if status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d, want 200 containing %q:\n%s", path, status, want, body)
		}
	}
	if status, _ := b.get("/ui/workspaces/ghost"); status != http.StatusNotFound {
		t.Errorf("missing workspace = %d", status)
	}
	if status, _ := b.get("/ui/static/style.css"); status != http.StatusOK {
		t.Errorf("style.css = %d", status)
	}

	// An admin sets an override through the form; it applies at once.
	_, page := b.get("/ui/workspaces/acme")
	csrf := csrfOf(t, page)
	status, body := b.post("/ui/workspaces/acme/overrides", url.Values{"csrf": {csrf}, "rule": {"daily_token_budget"}, "limit": {"5,000"}})
	if status != http.StatusOK || !strings.Contains(body, "Override saved") || !strings.Contains(body, `<span class="limitvalue">5,000</span>`) {
		t.Fatalf("set override = %d:\n%s", status, body)
	}
	status, body = b.post("/ui/workspaces/acme/overrides", url.Values{"csrf": {csrf}, "rule": {"daily_token_budget"}, "limit": {"-4"}})
	if status != http.StatusBadRequest || !strings.Contains(body, "must not be negative") {
		t.Fatalf("negative override = %d:\n%s", status, body)
	}
	if status, _ := b.post("/ui/workspaces/acme/overrides", url.Values{"rule": {"daily_token_budget"}, "limit": {"1"}}); status != http.StatusForbidden {
		t.Fatalf("no CSRF token = %d, want 403", status)
	}
	overrides, _ := e.cat.ListOverrides(context.Background())
	if len(overrides) != 1 || *overrides[0].Limit != 5000 {
		t.Fatalf("overrides = %+v", overrides)
	}

	// A viewer sees the page without the form, cannot post, cannot read
	// another workspace.
	e.createKey("globex", "gus")
	viewer := e.token("viewer", "acme")
	v := e.browser()
	v.login(viewer)
	_, page = v.get("/ui/workspaces/acme")
	if strings.Contains(page, `id="override-form"`) || !strings.Contains(page, `id="readonly"`) {
		t.Fatalf("viewer's workspace page has a form:\n%s", page)
	}
	if _, list := v.get("/ui/"); strings.Contains(list, "globex") {
		t.Fatal("viewer sees another workspace")
	}
	if status, _ := v.get("/ui/workspaces/globex"); status != http.StatusForbidden {
		t.Fatalf("viewer on another workspace = %d", status)
	}
	if status, _ := v.get("/ui/reservations"); status != http.StatusForbidden {
		t.Fatalf("viewer on reservations = %d", status)
	}
	before := e.snapshot()
	status, body = v.post("/ui/workspaces/acme/overrides", url.Values{"csrf": {csrfOf(t, page)}, "rule": {"daily_token_budget"}, "limit": {"0"}})
	if status != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Fatalf("viewer post = %d:\n%s", status, body)
	}
	if after := e.snapshot(); after.overrides != before.overrides || after.deniedAudit != before.deniedAudit+1 {
		t.Fatalf("viewer post: %+v -> %+v", before, after)
	}
	// Revoking the viewer's token ends its console session at once.
	list := e.must(http.StatusOK, "GET", "/admin/v1/tokens", rootToken, nil)
	for _, tok := range list.body["tokens"].([]any) {
		id := tok.(map[string]any)["id"].(string)
		if strings.Contains(viewer, id) {
			e.must(http.StatusNoContent, "DELETE", "/admin/v1/tokens/"+id, rootToken, nil)
		}
	}
	if _, body := v.get("/ui/"); !strings.Contains(body, `name="token"`) {
		t.Fatal("a revoked token's session still works")
	}
	// Signing out ends the session.
	b.post("/ui/logout", nil)
	if _, body := b.get("/ui/"); !strings.Contains(body, `name="token"`) {
		t.Fatal("signed out, the console still answers")
	}
}

// TestConsole_Sessions: the sessions page lists the open sessions a token
// may read; an admin ends one with its button (audited), a viewer sees no
// button and cannot post.
func TestConsole_Sessions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	for _, ws := range []string{"acme", "globex"} {
		s, _, err := e.cat.OpenSession(ctx, catalog.Session{KeyID: "k1", Workspace: ws, User: "ada", Model: "mock-small",
			ExpiresAt: time.Now().Add(time.Hour), MaxTurns: 20, MaxCost: 2_000_000}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	b := e.browser()
	b.login(rootToken)
	status, page := b.get("/ui/sessions")
	if status != http.StatusOK || !strings.Contains(page, ids[0]) || !strings.Contains(page, ids[1]) || !strings.Contains(page, "0 / 20") {
		t.Fatalf("admin's sessions page = %d:\n%s", status, page)
	}
	status, page = b.post("/ui/sessions/"+ids[0]+"/end", url.Values{"csrf": {csrfOf(t, page)}})
	if status != http.StatusOK || !strings.Contains(page, "Session "+ids[0]+" ended") || strings.Contains(page, "<td>"+ids[0]+"</td>") {
		t.Fatalf("end = %d:\n%s", status, page)
	}
	if s, _ := e.cat.GetSession(ctx, ids[0], "k1"); s.ClosedAt.IsZero() {
		t.Fatal("the session is still open")
	}

	viewer := e.token("viewer", "globex")
	v := e.browser()
	v.login(viewer)
	status, page = v.get("/ui/sessions")
	if status != http.StatusOK || !strings.Contains(page, ids[1]) || strings.Contains(page, "end-session") {
		t.Fatalf("viewer's sessions page = %d:\n%s", status, page)
	}
	csrf := csrfOf(t, page)
	if status, _ := v.post("/ui/sessions/"+ids[1]+"/end", url.Values{"csrf": {csrf}}); status != http.StatusForbidden {
		t.Fatalf("viewer ending a session = %d", status)
	}
}

// Signing in needs the form's own CSRF token, and a browser's cross-origin
// post is refused; the console keeps a bounded number of logins.
func TestConsole_LoginNeedsTheFormAndTheOrigin(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	if status, _ := b.post("/ui/login", url.Values{"token": {rootToken}}); status != http.StatusForbidden {
		t.Fatalf("sign-in without the form's token = %d, want 403", status)
	}
	_, page := b.get("/ui/login")
	form := url.Values{"token": {rootToken}, "csrf": {csrfOf(t, page)}}
	req, _ := http.NewRequest("POST", e.srv.URL+"/ui/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site sign-in = %d, want 403", resp.StatusCode)
	}
	if status, body := b.post("/ui/login", form); status != http.StatusOK || !strings.Contains(body, "Workspaces") {
		t.Fatalf("sign-in with the form = %d", status)
	}
	for range maxSessions + 5 {
		e.browser().login(rootToken)
	}
	e.handler.console.mu.Lock()
	n := len(e.handler.console.sessions)
	e.handler.console.mu.Unlock()
	if n > maxSessions {
		t.Fatalf("%d console sessions kept, want at most %d", n, maxSessions)
	}
}

// One token signing in again and again (any viewer may) forgets its own
// oldest logins, not everyone else's: 1,000 such logins once signed every
// admin out.
func TestConsole_SessionsCappedPerToken(t *testing.T) {
	e := newEnv(t)
	viewer := e.must(http.StatusCreated, "POST", "/admin/v1/tokens", rootToken,
		map[string]any{"role": "viewer", "workspaces": []string{"w"}}).body["secret"].(string)
	admin := e.browser()
	if status, _ := admin.login(rootToken); status != http.StatusOK {
		t.Fatalf("admin sign-in = %d", status)
	}
	for range maxSessions + 5 {
		e.clock.Advance(time.Millisecond) // each login newer than the last
		e.browser().login(viewer)
	}
	if status, body := admin.get("/ui/"); status != http.StatusOK || !strings.Contains(body, "Workspaces") {
		t.Fatalf("the admin's console after a viewer's %d logins = %d, want still signed in", maxSessions+5, status)
	}
	e.handler.console.mu.Lock()
	n := len(e.handler.console.sessions)
	e.handler.console.mu.Unlock()
	if n != maxSessionsPerToken+1 {
		t.Fatalf("%d console sessions kept, want the viewer's %d and the admin's", n, maxSessionsPerToken)
	}
}
