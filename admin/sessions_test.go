package admin

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
)

func TestAdmin_Sessions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	open := func(ws string) catalog.Session {
		s, _, err := e.cat.OpenSession(ctx, catalog.Session{KeyID: "k1", Workspace: ws, User: "ada", Model: "mock-small",
			ExpiresAt: time.Now().Add(time.Hour), MaxTurns: 10, MaxCost: 5_000_000}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, _ := open("acme"), open("other")
	viewer := e.token("viewer", "acme")

	all := e.must(http.StatusOK, "GET", "/admin/v1/sessions", rootToken, nil)
	if n := len(all.body["sessions"].([]any)); n != 2 {
		t.Fatalf("admin sees %d sessions: %s", n, all.raw)
	}
	// Money in dollars beside the micro-dollars.
	if s := all.body["sessions"].([]any)[0].(map[string]any); s["max_cost"] != "$5" || s["max_cost_micros"] != float64(5_000_000) || s["cost"] != "$0" {
		t.Errorf("session %v", s)
	}
	mine := e.must(http.StatusOK, "GET", "/admin/v1/sessions", viewer, nil)
	if n := len(mine.body["sessions"].([]any)); n != 1 {
		t.Fatalf("a viewer of acme sees %d sessions: %s", n, mine.raw)
	}
	if r := e.do("GET", "/admin/v1/sessions?workspace=other", viewer, nil); r.status != http.StatusForbidden {
		t.Fatalf("viewer reading another workspace: %d", r.status)
	}
	if r := e.do("DELETE", "/admin/v1/sessions/"+a.ID, viewer, nil); r.status != http.StatusForbidden {
		t.Fatalf("viewer ending a session: %d", r.status)
	}
	if _, err := e.cat.ChargeSession(ctx, a.ID, "k1", 100, 2500, 10); err != nil {
		t.Fatal(err)
	}
	ended := e.must(http.StatusOK, "DELETE", "/admin/v1/sessions/"+a.ID, rootToken, nil)
	if s := ended.body["session"].(map[string]any); s["closed_at"] == nil {
		t.Fatalf("ended: %s", ended.raw)
	}
	// The admin's close ended it: what it used is observed once, as that
	// of a session its client closed; a second close changes nothing.
	e.must(http.StatusOK, "DELETE", "/admin/v1/sessions/"+a.ID, rootToken, nil)
	f := e.scrape(rootToken)
	if n, closed := value(f, "sluice_session_cost_microdollars"), value(f, "sluice_sessions_total", "event", "closed_by_admin"); n != 1 || closed != 1 {
		t.Errorf("after an admin's close: %v session costs observed, %v closed by an admin; want 1 and 1", n, closed)
	}
	if r := e.do("DELETE", "/admin/v1/sessions/sess_nope", rootToken, nil); r.status != http.StatusNotFound || r.errorCode() != "unknown_session" {
		t.Fatalf("unknown session: %d %s", r.status, r.raw)
	}
	openOnly := e.must(http.StatusOK, "GET", "/admin/v1/sessions?open=true&workspace=acme", rootToken, nil)
	if n := len(openOnly.body["sessions"].([]any)); n != 0 {
		t.Fatalf("open acme sessions after the end: %s", openOnly.raw)
	}
	audit := e.must(http.StatusOK, "GET", "/admin/v1/audit?action=session.close", rootToken, nil)
	if n := len(audit.body["entries"].([]any)); n != 1 {
		t.Fatalf("audit: %s", audit.raw)
	}
}
