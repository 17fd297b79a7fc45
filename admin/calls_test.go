package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
)

func TestAPI_UsageGroupedByKeyUserTeamTag(t *testing.T) {
	e := newEnv(t)
	for _, u := range []catalog.UsageEntry{
		{Org: "orgA", Workspace: "w", Route: "chat", Model: "m", KeyID: "k1", User: "ann", Team: "red", Tags: []string{"eval", "batch"}, Requests: 1, InputTokens: 10, OutputTokens: 1},
		{Org: "orgA", Workspace: "w", Route: "chat", Model: "m", KeyID: "k2", User: "bob", Team: "red", Tags: []string{"eval"}, Requests: 1, InputTokens: 20, OutputTokens: 2},
		{Org: "orgB", Workspace: "w", Route: "chat", Model: "m", KeyID: "k9", User: "eve", Team: "red", Tags: []string{"eval"}, Requests: 1, InputTokens: 900},
	} {
		e.cat.RecordUsage(u)
	}
	if err := e.cat.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	sums := func(path, token, field string) map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for _, r := range e.must(http.StatusOK, "GET", path, token, nil).body["usage"].([]any) {
			m := r.(map[string]any)
			name, _ := m[field].(string)
			out[name] += m["input_tokens"].(float64)
		}
		return out
	}
	for _, tc := range []struct {
		group, field string
		want         map[string]float64
	}{
		{"key", "key", map[string]float64{"k1": 10, "k2": 20}},
		{"user", "user", map[string]float64{"ann": 10, "bob": 20}},
		{"team", "team", map[string]float64{"red": 30}},
		{"tag", "tag", map[string]float64{"eval": 30, "batch": 10}},
	} {
		got := sums("/admin/v1/usage?org=orgA&group_by="+tc.group, rootToken, tc.field)
		if len(got) != len(tc.want) {
			t.Errorf("group_by=%s: %v, want %v", tc.group, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("group_by=%s: %v, want %v", tc.group, got, tc.want)
			}
		}
	}
	// A viewer of orgA reads orgA's spend only, by tag too.
	viewer := e.must(http.StatusCreated, "POST", "/admin/v1/tokens", rootToken,
		map[string]any{"role": "viewer", "workspaces": []string{"w"}, "org": "orgA"}).body["secret"].(string)
	if got := sums("/admin/v1/usage?group_by=tag", viewer, "tag"); got["eval"] != 30 || got["batch"] != 10 || len(got) != 2 {
		t.Errorf("orgA's viewer by tag: %v, want eval 30 and batch 10 (none of orgB's)", got)
	}
	e.must(http.StatusForbidden, "GET", "/admin/v1/usage?org=orgB&group_by=key", viewer, nil)
}

func TestAPI_Calls(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range []catalog.CallRecord{
		{RequestID: "a1", Org: "orgA", Workspace: "w", KeyID: "k1", Model: "m1", Route: "chat", Outcome: catalog.OutcomeReported, ReservedTokens: 50, InputTokens: 5, OutputTokens: 6, CostMicros: 11},
		{RequestID: "a2", Org: "orgA", Workspace: "v", KeyID: "k2", Model: "m2", Route: "realtime", Outcome: catalog.OutcomeEstimated, ReservedTokens: 40, InputTokens: 30, OutputTokens: 10,
			SessionID: "sess_1", ConnectionID: "c1", AudioInputTokens: 20, AudioOutputTokens: 4},
		{RequestID: "b1", Org: "orgB", Workspace: "w", KeyID: "k9", Model: "m1", Route: "chat", Outcome: catalog.OutcomeSwept, ReservedTokens: 70},
	} {
		c.At = at.Add(time.Duration(i) * 24 * time.Hour)
		e.cat.RecordCall(c)
	}
	if err := e.cat.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	ids := func(path, token string) []string {
		t.Helper()
		var out []string
		for _, c := range e.must(http.StatusOK, "GET", path, token, nil).body["calls"].([]any) {
			out = append(out, c.(map[string]any)["request_id"].(string))
		}
		return out
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/admin/v1/calls", []string{"b1", "a2", "a1"}},
		{"/admin/v1/calls?key=k1", []string{"a1"}},
		{"/admin/v1/calls?workspace=w", []string{"b1", "a1"}},
		{"/admin/v1/calls?model=m1&org=orgA", []string{"a1"}},
		{"/admin/v1/calls?since=2026-03-02", []string{"b1", "a2"}},
		{"/admin/v1/calls?until=2026-03-02", []string{"a1"}},
		{"/admin/v1/calls?limit=1", []string{"b1"}},
		{"/admin/v1/calls?session=sess_1", []string{"a2"}},
	} {
		if got := ids(tc.path, rootToken); len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || (len(got) > 1 && got[1] != tc.want[1]) {
			t.Errorf("%s: %v, want %v", tc.path, got, tc.want)
		}
	}
	r := e.must(http.StatusOK, "GET", "/admin/v1/calls?key=k1", rootToken, nil).body["calls"].([]any)[0].(map[string]any)
	if r["outcome"] != "reported" || r["reserved_tokens"] != float64(50) || r["cost_micros"] != float64(11) || r["at"] != "2026-03-01T12:00:00Z" {
		t.Errorf("record %v", r)
	}
	r = e.must(http.StatusOK, "GET", "/admin/v1/calls?session=sess_1", rootToken, nil).body["calls"].([]any)[0].(map[string]any)
	if r["session_id"] != "sess_1" || r["connection_id"] != "c1" || r["audio_input_tokens"] != float64(20) || r["audio_output_tokens"] != float64(4) {
		t.Errorf("a live response's record %v, want its session, connection and audio tokens", r)
	}
	for _, bad := range []string{"?limit=0", "?limit=1001", "?since=yesterday", "?before_id=-1", "?prompt=x", "?since=2026-03-02&until=2026-03-01"} {
		if got := e.do("GET", "/admin/v1/calls"+bad, rootToken, nil); got.status != http.StatusBadRequest {
			t.Errorf("calls%s: %d %s, want 400", bad, got.status, got.raw)
		}
	}
	// A viewer reads its org's workspaces only.
	viewer := e.must(http.StatusCreated, "POST", "/admin/v1/tokens", rootToken,
		map[string]any{"role": "viewer", "workspaces": []string{"w"}, "org": "orgA"}).body["secret"].(string)
	if got := ids("/admin/v1/calls", viewer); len(got) != 1 || got[0] != "a1" {
		t.Errorf("orgA's viewer of w reads %v, want [a1]", got)
	}
	e.must(http.StatusForbidden, "GET", "/admin/v1/calls?workspace=v", viewer, nil)
	e.must(http.StatusForbidden, "GET", "/admin/v1/calls?org=orgB", viewer, nil)
}

// TestConsole_CallsPageShowsSessionsAndAudio: the Calls page names each
// call's session (a link to its calls) and, for a live response, its
// connection and its audio tokens.
func TestConsole_CallsPageShowsSessionsAndAudio(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC()
	e.cat.RecordCall(catalog.CallRecord{At: now.Add(-2 * time.Minute), RequestID: "h1", Workspace: "acme", KeyID: "k1", Route: "chat", Model: "mock-small",
		Outcome: catalog.OutcomeReported, SessionID: "sess_1"})
	e.cat.RecordCall(catalog.CallRecord{At: now.Add(-time.Minute), RequestID: "c1/1", Workspace: "acme", KeyID: "k1", Route: "realtime", Model: "mock-small",
		Outcome: catalog.OutcomeReported, InputTokens: 30, OutputTokens: 12, AudioInputTokens: 20, AudioOutputTokens: 7, SessionID: "sess_1", ConnectionID: "c1"})
	e.cat.RecordCall(catalog.CallRecord{At: now, RequestID: "o1", Workspace: "acme", KeyID: "k1", Route: "chat", Model: "mock-small", Outcome: catalog.OutcomeReported})
	if err := e.cat.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(rootToken)
	_, page := b.get("/ui/calls")
	for _, want := range []string{`href="/ui/calls?session=sess_1"`, `(on <code>c1</code>)`, `(20 audio)`, `(7 audio)`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Calls page lacks %s", want)
		}
	}
	_, page = b.get("/ui/calls?session=sess_1")
	if !strings.Contains(page, "<code>h1</code>") || !strings.Contains(page, "<code>c1/1</code>") || strings.Contains(page, "<code>o1</code>") {
		t.Errorf("the session's calls page lists o1, made outside it, or not h1 and c1/1")
	}
}
