package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// The service keys of the identity tests, beside the harness's plain key
// (testKey: org o1, workspace w1, user u1).
const (
	// serviceKey may assert workspace, user and team, in any workspace.
	serviceKey = "sk-sluice-service"
	// listedKey may assert workspace and user, in ws-a and team-*.
	listedKey = "sk-sluice-listed"
	// userOnlyKey may assert the user only.
	userOnlyKey = "sk-sluice-user-only"
)

// withServiceKeys adds the service keys to a harness's keys.
func withServiceKeys(o *gateway.Options) {
	keys := fakeKeys{}
	for k, p := range o.Keys.(fakeKeys) {
		keys[k] = p
	}
	keys[serviceKey] = gateway.Principal{KeyID: "ks", Org: "o1", Workspace: "app", User: "server",
		Assert: []string{gateway.AssertWorkspace, gateway.AssertUser, gateway.AssertTeam}}
	keys[listedKey] = gateway.Principal{KeyID: "kl", Org: "o1", Workspace: "app", User: "server",
		Assert: []string{gateway.AssertWorkspace, gateway.AssertUser}, AssertWorkspaces: []string{"ws-a", "team-*"}}
	keys[userOnlyKey] = gateway.Principal{KeyID: "ku", Org: "o1", Workspace: "app", User: "server",
		Assert: []string{gateway.AssertUser}}
	o.Keys = keys
}

const identityChat = `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`

// as is the headers of a call made with key asserting headers.
func as(key string, headers map[string]string) map[string]string {
	out := map[string]string{"Authorization": "Bearer " + key}
	for k, v := range headers {
		out[k] = v
	}
	return out
}

func TestServiceKey_AssertedUsersGetTheirOwnCounters(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "per_user", Kind: sluice.KindRate, Subject: "user", Metric: sluice.MetricRequests, Limit: 1, Window: time.Hour},
		{Name: "per_team", Kind: sluice.KindBudget, Subject: "team", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_workspace", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_key", Kind: sluice.KindBudget, Subject: "key", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules, withServiceKeys)
	alice := as(serviceKey, map[string]string{gateway.HeaderWorkspace: "ws-a", gateway.HeaderUser: "alice", gateway.HeaderTeam: "red"})
	bob := as(serviceKey, map[string]string{gateway.HeaderWorkspace: " ws-b ", gateway.HeaderUser: "bob", gateway.HeaderTeam: "blue"})
	for _, step := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"alice's first call", alice, 200},
		{"alice throttled", alice, 429},
		{"bob still admitted", bob, 200},
		{"bob throttled", bob, 429},
		{"the key's own user, no headers", as(serviceKey, nil), 200},
	} {
		if r := h.post("/v1/chat/completions", identityChat, step.headers); r.status != step.want {
			t.Fatalf("%s: %d %s, want %d", step.name, r.status, r.body, step.want)
		}
	}
	for _, tc := range []struct {
		id   sluice.Identity
		rule string
		want int64
	}{
		{sluice.Identity{Org: "o1", Workspace: "ws-a", User: "alice", Team: "red", Key: "ks"}, "per_user", 1},
		{sluice.Identity{Org: "o1", Workspace: "ws-b", User: "bob", Team: "blue", Key: "ks"}, "per_user", 1},
		{sluice.Identity{Org: "o1", Workspace: "app", User: "server", Key: "ks"}, "per_user", 1},
		{sluice.Identity{Org: "o1", Workspace: "ws-a", User: "alice", Team: "red", Key: "ks"}, "per_team", 1},
		{sluice.Identity{Org: "o1", Workspace: "ws-b", User: "bob", Team: "blue", Key: "ks"}, "per_workspace", 1},
		{sluice.Identity{Org: "o1", Workspace: "app", User: "server", Key: "ks"}, "per_workspace", 1},
		// The key stays the key: its counters add up every user it calls for.
		{sluice.Identity{Org: "o1", Workspace: "app", User: "server", Key: "ks"}, "per_key", 3},
	} {
		if got := h.usedBy(tc.id, tc.rule); got != tc.want {
			t.Errorf("%s for %+v = %d, want %d", tc.rule, tc.id, got, tc.want)
		}
	}
	// The usage ledger has each call under the workspace it was made for.
	var workspaces []string
	for _, u := range h.rec.waitUsage(t, 3) {
		workspaces = append(workspaces, u.Workspace)
	}
	slices.Sort(workspaces)
	if !slices.Equal(workspaces, []string{"app", "ws-a", "ws-b"}) {
		t.Errorf("ledger workspaces %q, want app, ws-a, ws-b", workspaces)
	}
}

func TestServiceKey_HeadersAKeyMayNotAssertAreIgnoredAndCounted(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{
		{Name: "per_user", Kind: sluice.KindBudget, Subject: "workspace+user", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay},
		{Name: "per_team", Kind: sluice.KindBudget, Subject: "team", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay},
	}
	h := newHarness(t, rules, withServiceKeys)
	claim := map[string]string{gateway.HeaderWorkspace: "w9", gateway.HeaderUser: "u9", gateway.HeaderTeam: "t9"}
	for _, tc := range []struct {
		name        string
		key         string
		charged     sluice.Identity
		wantIgnored []string
	}{
		{"plain key", testKey, sluice.Identity{Org: "o1", Workspace: "w1", User: "u1"},
			[]string{gateway.HeaderWorkspace, gateway.HeaderUser, gateway.HeaderTeam}},
		{"user-only service key", userOnlyKey, sluice.Identity{Org: "o1", Workspace: "app", User: "u9"},
			[]string{gateway.HeaderWorkspace, gateway.HeaderTeam}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.rec.waitEvents(t, 0))
			// Even a value the gateway would refuse from a key that may
			// assert it is only ignored here.
			headers := as(tc.key, claim)
			headers[gateway.HeaderTeam] = strings.Repeat("t", 300)
			if r := h.post("/v1/chat/completions", identityChat, headers); r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := h.usedBy(tc.charged, "per_user"); got != 1 {
				t.Errorf("per_user charged %d to %+v, want 1", got, tc.charged)
			}
			ev := h.rec.waitEvents(t, before+1)[before]
			if !slices.Equal(ev.IgnoredIdentity, tc.wantIgnored) {
				t.Errorf("event's ignored headers %q, want %q", ev.IgnoredIdentity, tc.wantIgnored)
			}
		})
	}
	if got := h.usedBy(sluice.Identity{Org: "o1", Workspace: "w9", User: "u9", Team: "t9"}, "per_team"); got != 0 {
		t.Errorf("per_team charged %d to the team the headers claimed", got)
	}
	// A request without identity headers reports none.
	before := len(h.rec.waitEvents(t, 0))
	h.post("/v1/chat/completions", identityChat, nil)
	if ev := h.rec.waitEvents(t, before+1)[before]; ev.IgnoredIdentity != nil {
		t.Errorf("ignored headers %q on a request that sent none", ev.IgnoredIdentity)
	}
}

func TestServiceKey_WorkspaceOutsideItsListIsForbidden(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, withServiceKeys)
	for _, tc := range []struct {
		workspace string
		want      int
	}{
		{"ws-a", 200},     // exact
		{"ws-a2", 403},    // an exact name is no prefix
		{"ws", 403},       // nor a prefix of one
		{"team-red", 200}, // prefix
		{"team-", 200},    // the prefix itself
		{"team", 403},
		{"other", 403},
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
			r := h.post(path, identityChat, as(listedKey, map[string]string{gateway.HeaderWorkspace: tc.workspace}))
			if r.status != tc.want {
				t.Errorf("%s %s: %d %s, want %d", path, tc.workspace, r.status, r.body, tc.want)
				continue
			}
			if r.status != 403 {
				continue
			}
			var e errorReply
			if path == "/v1/messages" {
				e = anthropicError(t, r)
				if e.Error.Type != "permission_error" {
					t.Errorf("Anthropic error type %q, want permission_error", e.Error.Type)
				}
			} else {
				e = openaiError(t, r)
				if deref(e.Error.Code) != "workspace_not_allowed" || deref(e.Error.Param) != gateway.HeaderWorkspace {
					t.Errorf("OpenAI error %s", r.body)
				}
			}
			if !strings.Contains(e.Error.Message, `workspace "`+tc.workspace+`"`) {
				t.Errorf("message %q does not name the workspace", e.Error.Message)
			}
		}
	}
	// Without the header, the key's own workspace applies, listed or not.
	if r := h.post("/v1/chat/completions", identityChat, as(listedKey, nil)); r.status != 200 {
		t.Errorf("no header: %d %s", r.status, r.body)
	}
	if got := h.mockCalls(); got != 7 { // 3 allowed workspaces on two routes, and the last call
		t.Errorf("the provider had %d calls, want 7", got)
	}
}

func TestServiceKey_MalformedValuesAreRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, withServiceKeys)
	for _, tc := range []struct {
		name   string
		header string
		value  string
		want   int
		says   string
	}{
		{"256 bytes", gateway.HeaderUser, strings.Repeat("u", 256), 200, ""},
		{"257 bytes", gateway.HeaderUser, strings.Repeat("u", 257), 400, "longer than 256 bytes"},
		{"oversized workspace", gateway.HeaderWorkspace, strings.Repeat("w", 1000), 400, "longer than 256 bytes"},
		{"blank", gateway.HeaderTeam, "   ", 400, "is empty"},
		{"tab inside", gateway.HeaderUser, "al\tice", 400, "control characters"},
		{"C1 control", gateway.HeaderUser, "al\u0085ice", 400, "control characters"},
		{"not UTF-8", gateway.HeaderWorkspace, "ws\xff", 400, "not valid UTF-8"},
		{"unicode name", gateway.HeaderUser, "zoë", 200, ""},
	} {
		r := h.post("/v1/chat/completions", identityChat, as(serviceKey, map[string]string{tc.header: tc.value}))
		if r.status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.want)
			continue
		}
		if tc.want == 400 {
			e := openaiError(t, r)
			if deref(e.Error.Code) != "invalid_identity_header" || deref(e.Error.Param) != tc.header || !strings.Contains(e.Error.Message, tc.says) {
				t.Errorf("%s: error %s, want invalid_identity_header on %s saying %q", tc.name, r.body, tc.header, tc.says)
			}
		}
	}
	// Bytes an HTTP client refuses to send (the server refuses them before
	// the gateway reads the request), and a header sent twice.
	for _, tc := range []struct{ name, lines, code string }{
		{"control byte", gateway.HeaderUser + ": al\x01ice\r\n", "malformed_request"},
		{"DEL", gateway.HeaderUser + ": al\x7fice\r\n", "malformed_request"},
		{"twice", gateway.HeaderUser + ": alice\r\n" + gateway.HeaderUser + ": bob\r\n", "invalid_identity_header"},
	} {
		status, body := rawPost(t, h.url, serviceKey, tc.lines, identityChat)
		if status != 400 || !strings.Contains(body, `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s, want 400 %s", tc.name, status, body, tc.code)
		}
	}
}

// rawPost sends a chat request with extra header lines as they are, and
// returns the status and body of the answer.
func rawPost(t *testing.T, base, key, lines, body string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer " + key + "\r\n" + lines + "Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServiceKey_SessionsAreMintedForTheAssertedIdentity(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{{Name: "per_user", Kind: sluice.KindBudget, Subject: "workspace+user", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay}}
	h := sessionHarness(t, rules, withServiceKeys) // at most 2 open sessions per user
	alice := as(serviceKey, map[string]string{gateway.HeaderWorkspace: "ws-a", gateway.HeaderUser: "alice"})
	bob := as(serviceKey, map[string]string{gateway.HeaderWorkspace: "ws-a", gateway.HeaderUser: "bob"})
	var aliceSession string
	for _, step := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"alice's first", alice, 201},
		{"alice's second", alice, 201},
		{"alice's third: over her cap", alice, 429},
		{"bob's first: his own cap", bob, 201},
		{"the key's own user", as(serviceKey, nil), 201},
	} {
		r, s := h.sessionCall("POST", "/v1/sessions", "", step.headers)
		if r.status != step.want {
			t.Fatalf("%s: %d %s, want %d", step.name, r.status, r.body, step.want)
		}
		if aliceSession == "" {
			aliceSession = s.ID
		}
	}
	// A call on alice's session is hers, with or without the headers.
	inSession := func(headers map[string]string) map[string]string {
		out := as(serviceKey, headers)
		out[gateway.HeaderSession] = aliceSession
		return out
	}
	for _, headers := range []map[string]string{
		nil,
		{gateway.HeaderWorkspace: "ws-a", gateway.HeaderUser: "alice"},
	} {
		if r := h.post("/v1/chat/completions", sessionChat, inSession(headers)); r.status != 200 {
			t.Fatalf("call on alice's session with %v: %d %s", headers, r.status, r.body)
		}
	}
	if got := h.usedBy(sluice.Identity{Org: "o1", Workspace: "ws-a", User: "alice", Key: "ks"}, "per_user"); got != 2 {
		t.Errorf("alice was charged %d calls, want 2", got)
	}
	// Another identity may not ride on her session.
	for _, headers := range []map[string]string{
		{gateway.HeaderUser: "bob"},
		{gateway.HeaderWorkspace: "ws-b"},
	} {
		r := h.post("/v1/chat/completions", sessionChat, inSession(headers))
		if r.status != 400 || !strings.Contains(string(r.body), "session_identity") {
			t.Errorf("call on alice's session with %v: %d %s, want 400 session_identity", headers, r.status, r.body)
		}
	}
	// The mint refuses a workspace outside a key's list as a call would.
	r, _ := h.sessionCall("POST", "/v1/sessions", "", as(listedKey, map[string]string{gateway.HeaderWorkspace: "other"}))
	if r.status != 403 || !strings.Contains(string(r.body), "workspace_not_allowed") {
		t.Errorf("mint for a workspace outside the list: %d %s", r.status, r.body)
	}
}

// TestServiceKey_AssertedValuesStayInTheKeysOrg checks that what a service
// key asserts is counted within its own org: two orgs' service keys
// asserting the same user share nothing, while in one org an asserted user
// is the user of that name.
func TestServiceKey_AssertedValuesStayInTheKeysOrg(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{{Name: "per_user", Kind: sluice.KindRate, Subject: "workspace+user", Metric: sluice.MetricRequests, Limit: 1, Window: time.Hour}}
	all := []string{gateway.AssertWorkspace, gateway.AssertUser, gateway.AssertTeam}
	h := newHarness(t, rules, func(o *gateway.Options) {
		o.Keys = fakeKeys{
			"sk-service-a": {KeyID: "ksa", Org: "orgA", Workspace: "app", User: "server", Assert: all},
			"sk-service-b": {KeyID: "ksb", Org: "orgB", Workspace: "app", User: "server", Assert: all},
			"sk-alice-a":   {KeyID: "kaa", Org: "orgA", Workspace: "shared", User: "alice"},
		}
	})
	alice := map[string]string{gateway.HeaderWorkspace: "shared", gateway.HeaderUser: "alice"}
	for _, step := range []struct {
		name, key string
		headers   map[string]string
		want      int
	}{
		{"orgA's alice", "sk-service-a", alice, 200},
		{"orgA's alice again", "sk-service-a", alice, 429},
		{"orgB's alice: another org's counter", "sk-service-b", alice, 200},
		{"orgA's own key for alice: the same user", "sk-alice-a", nil, 429},
		// A header naming the org is no identity header: still orgB's server.
		{"orgB's server, whatever X-Sluice-Org says", "sk-service-b", map[string]string{"X-Sluice-Org": "orgA"}, 200},
	} {
		if r := h.post("/v1/chat/completions", identityChat, as(step.key, step.headers)); r.status != step.want {
			t.Fatalf("%s: %d %s, want %d", step.name, r.status, r.body, step.want)
		}
	}
}

// TestServiceKey_AssertedWorkspacePicksTheTenantModel checks that a tenant
// model's route for a workspace serves the workspace a service key asserts.
func TestServiceKey_AssertedWorkspacePicksTheTenantModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(o *gateway.Options) {
		o.Keys = fakeKeys{"sk-service-b": {KeyID: "ksb", Org: "orgB", Workspace: "w1", User: "server", Assert: []string{gateway.AssertWorkspace}}}
		o.TenantModels = tenantModels // orgB's cheap is mock-large, its research workspace's mock-small
	})
	for _, tc := range []struct {
		workspace, served string
	}{
		{"", "mock-large"},
		{"research", "mock-small"},
	} {
		headers := as("sk-service-b", nil)
		if tc.workspace != "" {
			headers[gateway.HeaderWorkspace] = tc.workspace
		}
		r := h.post("/v1/chat/completions", chatBody("cheap"), headers)
		if r.status != 200 || r.header.Get("X-Sluice-Model") != tc.served {
			t.Errorf("workspace %q: %d %s, X-Sluice-Model %q; want %s", tc.workspace, r.status, r.body, r.header.Get("X-Sluice-Model"), tc.served)
		}
	}
}
