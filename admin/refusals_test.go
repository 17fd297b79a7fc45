package admin

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway/event"
)

func TestRefusedCall_KeepsKnownKeysRefusalsOnly(t *testing.T) {
	refused := event.Event{RequestID: "r1", Org: "o", Workspace: "w", KeyID: "k1", Route: "chat", Model: "m", Outcome: "rate_limited", Status: 429}
	for _, tc := range []struct {
		name string
		e    event.Event
		want bool
	}{
		{"a refusal of a known key", refused, true},
		{"admitted", event.Event{KeyID: "k1", Outcome: "admitted"}, false},
		{"no key known (a bad key, a body over the cap)", event.Event{Outcome: "unauthorized", Status: 401}, false},
		{"a failure charged: its settlement records it", event.Event{KeyID: "k1", Outcome: "upstream_error", Usage: sluice.Usage{OutputTokens: 4}}, false},
	} {
		r, ok := RefusedCall(tc.e)
		if ok != tc.want {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.want)
		}
		if ok && (r.RequestID != "r1" || r.KeyID != "k1" || r.Workspace != "w" || r.Outcome != "rate_limited" || r.Route != "chat" || r.Model != "m") {
			t.Errorf("%s: record %+v", tc.name, r)
		}
	}
}

// TestAPI_RefusedCallsAndOutcomeCounts: refused calls are listed beside the
// settled ones, filtered by outcome (refused: every refusal), and counted
// by outcome per key and per workspace, in a viewer's scope only.
func TestAPI_RefusedCallsAndOutcomeCounts(t *testing.T) {
	e := newEnv(t)
	recordRefusals(t, e)
	ids := func(path string) []string {
		t.Helper()
		var out []string
		for _, c := range e.must(http.StatusOK, "GET", path, rootToken, nil).body["calls"].([]any) {
			out = append(out, c.(map[string]any)["request_id"].(string))
		}
		return out
	}
	if got := ids("/admin/v1/calls?workspace=acme&outcome=refused"); !slices.Equal(got, []string{"x1", "r3", "r2"}) {
		t.Errorf("refused calls %v, want x1 r3 r2", got)
	}
	if got := ids("/admin/v1/calls?outcome=budget_exceeded"); !slices.Equal(got, []string{"r3"}) {
		t.Errorf("budget refusals %v, want r3", got)
	}
	counts := e.must(http.StatusOK, "GET", "/admin/v1/calls/outcomes?org=default&workspace=acme", rootToken, nil).body
	row := func(m any) string {
		r := m.(map[string]any)
		return fmt.Sprintf("%s/%s/%s=%d", r["workspace"], r["key"], r["outcome"], int64(r["calls"].(float64)))
	}
	var byKey, byWorkspace []string
	for _, m := range counts["by_key"].([]any) {
		byKey = append(byKey, row(m))
	}
	for _, m := range counts["by_workspace"].([]any) {
		byWorkspace = append(byWorkspace, row(m))
	}
	if want := []string{"acme/k1/rate_limited=1", "acme/k1/reported=1", "acme/k2/budget_exceeded=1", "acme/k2/rate_limited=1"}; !slices.Equal(byKey, want) {
		t.Errorf("by key %v, want %v", byKey, want)
	}
	if want := []string{"acme//budget_exceeded=1", "acme//rate_limited=2", "acme//reported=1"}; !slices.Equal(byWorkspace, want) {
		t.Errorf("by workspace %v, want %v", byWorkspace, want)
	}
	// A viewer of acme reads acme's only.
	viewer := e.token("viewer", "acme")
	for _, m := range e.must(http.StatusOK, "GET", "/admin/v1/calls/outcomes", viewer, nil).body["by_key"].([]any) {
		if ws := m.(map[string]any)["workspace"]; ws != "acme" {
			t.Errorf("the viewer of acme reads %v's counts", ws)
		}
	}
	e.must(http.StatusForbidden, "GET", "/admin/v1/calls/outcomes?workspace=globex", viewer, nil)
	e.must(http.StatusBadRequest, "GET", "/admin/v1/calls/outcomes?limit=3", rootToken, nil)
}

// TestConsole_CallsPageShowsRefusals: the Calls page counts outcomes by
// workspace and key and lists the refused calls, filterable by outcome.
func TestConsole_CallsPageShowsRefusals(t *testing.T) {
	e := newEnv(t)
	recordRefusals(t, e)
	b := e.browser()
	b.login(rootToken)
	status, page := b.get("/ui/calls")
	if status != http.StatusOK {
		t.Fatalf("/ui/calls = %d", status)
	}
	for _, want := range []string{`id="outcomes-by-workspace"`, `id="outcomes-by-key"`, `href="/ui/calls?key=k2&amp;outcome=budget_exceeded"`,
		`<span class="badge warn">budget_exceeded</span>`, "<code>r3</code>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the Calls page lacks %s", want)
		}
	}
	_, page = b.get("/ui/calls?outcome=refused")
	if !strings.Contains(page, "<code>r2</code>") || strings.Contains(page, "<code>r1</code>") || !strings.Contains(page, `<option selected>refused</option>`) {
		t.Errorf("refused calls page lists the settled call r1, or not the refusal r2, or forgot its filter")
	}
}

// recordRefusals records, as the gateway's Observer would, a settled call
// and refusals in acme (and one in globex).
func recordRefusals(t *testing.T, e *env) {
	t.Helper()
	now := time.Now().UTC()
	e.cat.RecordCall(catalog.CallRecord{At: now.Add(-4 * time.Minute), RequestID: "r1", Workspace: "acme", KeyID: "k1", Route: "chat", Model: "mock-small",
		Outcome: catalog.OutcomeReported, InputTokens: 10})
	for i, ev := range []event.Event{
		{RequestID: "r2", Workspace: "acme", KeyID: "k1", Route: "chat", Model: "mock-small", Outcome: "rate_limited", Status: 429},
		{RequestID: "r3", Workspace: "acme", KeyID: "k2", Route: "chat", Model: "mock-small", Outcome: "budget_exceeded", Status: 429},
		{RequestID: "x1", Workspace: "acme", KeyID: "k2", Route: "messages", Outcome: "rate_limited", Status: 429},
		{RequestID: "g1", Workspace: "globex", KeyID: "k9", Route: "chat", Outcome: "too_large", Status: 413},
	} {
		r, ok := RefusedCall(ev)
		if !ok {
			t.Fatalf("%+v not recorded", ev)
		}
		if ev.RequestID == "g1" {
			r.At = now.Add(-5 * time.Minute)
		} else {
			r.At = now.Add(time.Duration(i-3) * time.Minute)
		}
		e.cat.RecordCall(r)
	}
	if err := e.cat.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}
