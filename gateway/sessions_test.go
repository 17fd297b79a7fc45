package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/catalogsessions"
)

// sessionReply is a session as the client API shows it.
type sessionReply struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Model     string `json:"model"`
	Status    string `json:"status"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
	Ceilings  struct {
		WallClockSeconds int64  `json:"wall_clock_seconds"`
		Turns            int64  `json:"turns"`
		Tokens           int64  `json:"tokens"`
		CostMicros       int64  `json:"cost_micros"`
		Cost             string `json:"cost"`
		ContextTokens    int64  `json:"context_tokens"`
	} `json:"ceilings"`
	Used struct {
		Turns      int64  `json:"turns"`
		Tokens     int64  `json:"tokens"`
		CostMicros int64  `json:"cost_micros"`
		Cost       string `json:"cost"`
	} `json:"used"`
	CeilingReached string   `json:"ceiling_reached"`
	LoweredBy      []string `json:"lowered_by"`
}

// sessionHarness is a gateway with sessions kept in a SQLite catalog: the
// default terms are mock-small, one hour, 3 turns, 10,000 tokens, at most
// 2 open per user; the tier "pro" gets mock-large. Then tweak changes the
// gateway's options.
func sessionHarness(t *testing.T, rules []sluice.Rule, tweak ...func(*gateway.Options)) *harness {
	t.Helper()
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return startHarness(t, setup{rules: rules, tweak: append([]func(*gateway.Options){func(o *gateway.Options) {
		o.Sessions = &gateway.Sessions{Store: catalogsessions.Store{Catalog: cat}, MaxOpenPerUser: 2, Terms: func(p gateway.Principal) gateway.SessionTerms {
			terms := gateway.SessionTerms{Model: "mock-small", MaxDuration: time.Hour, MaxTurns: 3, MaxTokens: 10_000}
			if p.Tier == "pro" {
				terms.Model = "mock-large"
			}
			return terms
		}}
	}}, tweak...)})
}

func (h *harness) sessionCall(method, path, body string, headers map[string]string) (reply, sessionReply) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s sessionReply
	if resp.StatusCode < 300 {
		if err := json.Unmarshal(b, &s); err != nil {
			h.t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, s
}

// sessionChat asks mock-small for exactly 10 output tokens.
const sessionChat = `{"model":"mock-small","max_tokens":10,"messages":[{"role":"user","content":"twelve bytes"}]}`

func TestGateway_SessionTurnsAndTokens(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, nil)
	r, s := h.sessionCall("POST", "/v1/sessions", "", nil)
	if r.status != 201 || !strings.HasPrefix(s.ID, "sess_") || s.Object != "session" || s.Model != "mock-small" || s.Status != "open" ||
		s.Ceilings.Turns != 3 || s.Ceilings.Tokens != 10_000 || s.Ceilings.WallClockSeconds != 3600 || s.ExpiresAt-s.CreatedAt != 3600 {
		t.Fatalf("mint: %d %s", r.status, r.body)
	}
	in := map[string]string{gateway.HeaderSession: s.ID}
	for turn := 1; turn <= 3; turn++ {
		if r := h.post("/v1/chat/completions", sessionChat, in); r.status != 200 {
			t.Fatalf("turn %d: %d %s", turn, r.status, r.body)
		}
	}
	rec := h.rec.waitUsage(t, 3)
	var want int64
	for _, u := range rec {
		want += u.InputTokens + u.OutputTokens
	}
	eventually(t, "the three turns settled on the session", func() bool {
		_, got := h.sessionCall("GET", "/v1/sessions/"+s.ID, "", nil)
		return got.Used.Turns == 3 && got.Used.Tokens == want
	})
	calls := h.mockCalls()
	r = h.post("/v1/chat/completions", sessionChat, in)
	var e errorReply
	_ = json.Unmarshal(r.body, &e)
	if r.status != 429 || r.header.Get("x-should-retry") != "false" || r.header.Get("Retry-After") != "" ||
		e.Error.Code == nil || *e.Error.Code != "session_ceiling_reached" || !strings.Contains(e.Error.Message, "turns ceiling") ||
		e.Error.Limit == nil || e.Error.Limit.Rule != "session_turns" || e.Error.Limit.Limit != 3 || e.Error.Limit.Used != 3 || e.Error.Limit.Remaining != 0 {
		t.Fatalf("fourth turn: %d %v %s", r.status, r.header, r.body)
	}
	if h.mockCalls() != calls {
		t.Error("the refused turn reached the provider")
	}
	// The refusal charged nothing anywhere: the session and the engine.
	_, got := h.sessionCall("GET", "/v1/sessions/"+s.ID, "", nil)
	if got.Used.Turns != 3 || got.Used.Tokens != want || got.CeilingReached != "turns" {
		t.Errorf("after the refusal: %+v", got)
	}
	// A call without the header is not the session's.
	if r := h.post("/v1/chat/completions", sessionChat, nil); r.status != 200 {
		t.Fatalf("call outside the session: %d %s", r.status, r.body)
	}
	// Closing it, twice: one closed event, with what the session used.
	h.sessionCall("DELETE", "/v1/sessions/"+s.ID, "", nil)
	h.sessionCall("DELETE", "/v1/sessions/"+s.ID, "", nil)
	events := h.rec.waitEvents(t, 7) // mint, 3 turns, refusal, outside call, the first close
	count := map[string]int{}
	for _, e := range events {
		count[e.Session]++
		switch e.Session {
		case "ceiling":
			// The ceiling ended the session: what it used is observed
			// then, and not again at the close.
			if e.Ceiling != "turns" || e.Outcome != "session_ceiling" || e.Class != "terminal" || e.Status != 429 ||
				!e.SessionEnded || e.SessionUsed.Turns != 3 || e.SessionUsed.Tokens != want {
				t.Errorf("ceiling event %+v", e)
			}
		case "closed":
			if e.SessionUsed.Turns != 3 || e.SessionUsed.Tokens != want || e.Route != "sessions" || e.SessionEnded {
				t.Errorf("closed event %+v", e)
			}
		}
	}
	if count["opened"] != 1 || count["ceiling"] != 1 || count["closed"] != 1 {
		t.Errorf("session events %v, want one opened, one ceiling, one closed", count)
	}
}

func TestGateway_SessionTokenCeilingReservesTheWorstCase(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, nil)
	_, s := h.sessionCall("POST", "/v1/sessions", `{"max_tokens":100,"max_turns":2}`, nil)
	if s.Ceilings.Tokens != 100 || s.Ceilings.Turns != 2 {
		t.Fatalf("lowered ceilings: %+v", s)
	}
	in := map[string]string{gateway.HeaderSession: s.ID}
	// No output cap: the model's 4,096 is the worst case, over the 100 left.
	r := h.post("/v1/chat/completions", `{"model":"mock-small","messages":[{"role":"user","content":"hi"}]}`, in)
	if r.status != 429 || !strings.Contains(string(r.body), "tokens ceiling") {
		t.Fatalf("worst case over the ceiling: %d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", sessionChat, in); r.status != 200 {
		t.Fatalf("a call that fits: %d %s", r.status, r.body)
	}
	// Raising a ceiling is refused.
	if r, _ := h.sessionCall("POST", "/v1/sessions", `{"max_turns":4}`, nil); r.status != 400 || !strings.Contains(string(r.body), "max_turns") {
		t.Fatalf("raised ceiling: %d %s", r.status, r.body)
	}
	if r, _ := h.sessionCall("POST", "/v1/sessions", `{"max_turns":"x"}`, nil); r.status != 400 {
		t.Fatalf("bad JSON: %d %s", r.status, r.body)
	}
}

func TestGateway_SessionMintIsIdempotentCappedAndGated(t *testing.T) {
	t.Parallel()
	budget := sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}
	h := sessionHarness(t, []sluice.Rule{budget})
	idem := map[string]string{"Idempotency-Key": "mint-7"}
	r1, s1 := h.sessionCall("POST", "/v1/sessions", "", idem)
	r2, s2 := h.sessionCall("POST", "/v1/sessions", "", idem)
	if r1.status != 201 || r2.status != 200 || s1.ID != s2.ID {
		t.Fatalf("retried mint: %d %s / %d %s", r1.status, r1.body, r2.status, r2.body)
	}
	if r, _ := h.sessionCall("POST", "/v1/sessions", "", nil); r.status != 201 {
		t.Fatalf("second session: %d %s", r.status, r.body)
	}
	r, _ := h.sessionCall("POST", "/v1/sessions", "", nil)
	if r.status != 429 || !strings.Contains(string(r.body), "too_many_sessions") || r.header.Get("x-should-retry") != "false" {
		t.Fatalf("third open session: %d %s", r.status, r.body)
	}
	// Closing one frees its place; the closed one refuses calls.
	if r, s := h.sessionCall("DELETE", "/v1/sessions/"+s1.ID, "", nil); r.status != 200 || s.Status != "closed" {
		t.Fatalf("close: %d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: s1.ID}); r.status != 409 {
		t.Fatalf("call on a closed session: %d %s", r.status, r.body)
	}
	// Spend the budget: the mint gate refuses as the budget would.
	if r := h.post("/v1/chat/completions", sessionChat, nil); r.status != 200 {
		t.Fatalf("spending call: %d %s", r.status, r.body)
	}
	r, _ = h.sessionCall("POST", "/v1/sessions", "", nil)
	if r.status != 429 || !strings.Contains(string(r.body), `"rule":"daily"`) || r.header.Get("x-should-retry") != "false" {
		t.Fatalf("mint on a spent budget: %d %s", r.status, r.body)
	}
}

func TestGateway_SessionBelongsToItsKeyAndModel(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, nil)
	_, s := h.sessionCall("POST", "/v1/sessions", "", nil)
	other := map[string]string{"Authorization": "Bearer sk-sluice-other", gateway.HeaderSession: s.ID}
	if r := h.post("/v1/chat/completions", sessionChat, other); r.status != 404 {
		t.Fatalf("another key's session: %d %s", r.status, r.body)
	}
	in := map[string]string{gateway.HeaderSession: s.ID}
	large := `{"model":"mock-large","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	if r := h.post("/v1/chat/completions", large, in); r.status != 400 || !strings.Contains(string(r.body), "mock-small") {
		t.Fatalf("another model in the session: %d %s", r.status, r.body)
	}
	// An alias of the session's model is the same model.
	if r := h.post("/v1/chat/completions", strings.Replace(sessionChat, "mock-small", "small", 1), in); r.status != 200 {
		t.Fatalf("alias: %d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: "sess_nope"}); r.status != 404 {
		t.Fatalf("unknown session: %d %s", r.status, r.body)
	}
	if r, _ := h.sessionCall("PUT", "/v1/sessions/"+s.ID, "", nil); r.status != 405 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "POST", h.url+"/v1/sessions", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("mint without a key: %d", resp.StatusCode)
	}
}

// TestGateway_SessionSubjectRules: a rule with subject session counts each
// session apart.
func TestGateway_SessionSubjectRules(t *testing.T) {
	t.Parallel()
	perSession := sluice.Rule{Name: "per_session", Kind: sluice.KindRate, Subject: "session", Limit: 1, Window: time.Minute}
	h := sessionHarness(t, []sluice.Rule{perSession})
	_, a := h.sessionCall("POST", "/v1/sessions", "", nil)
	_, b := h.sessionCall("POST", "/v1/sessions", "", nil)
	if r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: a.ID}); r.status != 200 {
		t.Fatalf("a: %d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: a.ID}); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("a again: %d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: b.ID}); r.status != 200 {
		t.Fatalf("b: %d %s", r.status, r.body)
	}
	// The rate refusal took no turn from the session.
	_, got := h.sessionCall("GET", "/v1/sessions/"+a.ID, "", nil)
	if got.Used.Turns != 1 {
		t.Errorf("session a: %+v", got.Used)
	}
	// Calls outside any session are not counted by the rule.
	for i := range 2 {
		if r := h.post("/v1/chat/completions", sessionChat, nil); r.status != 200 {
			t.Fatalf("call %d outside sessions: %d %s", i, r.status, r.body)
		}
	}
	// A session header no session could have is refused before any lookup.
	if r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: strings.Repeat("x", 300)}); r.status != 404 {
		t.Fatalf("absurd session id: %d %s", r.status, r.body)
	}
}

// TestGateway_SessionContextCeiling: one call whose input is over the
// session's context ceiling is refused, whatever else is left.
func TestGateway_SessionContextCeiling(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, nil)
	_, s := h.sessionCall("POST", "/v1/sessions", `{"max_context_tokens":50}`, nil)
	if s.Ceilings.ContextTokens != 50 {
		t.Fatalf("ceilings %+v", s.Ceilings)
	}
	in := map[string]string{gateway.HeaderSession: s.ID}
	long := `{"model":"mock-small","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("resent transcript ", 20) + `"}]}`
	r := h.post("/v1/chat/completions", long, in)
	if r.status != 429 || !strings.Contains(string(r.body), "context") || r.header.Get("x-should-retry") != "false" {
		t.Fatalf("long context: %d %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", sessionChat, in); r.status != 200 {
		t.Fatalf("short context: %d %s", r.status, r.body)
	}
}

// TestGateway_SessionWallClockEndsTheCall: a call still running when its
// session's wall clock ends is cut then, answered with the session's
// ceiling refusal (not as a provider that could not be reached), the
// provider sees it cancelled, and the reservation is charged: the
// provider may have done the work.
func TestGateway_SessionWallClockEndsTheCall(t *testing.T) {
	t.Parallel()
	// Real time: the call's cut is a deadline on its connection to the
	// provider, and a fake clock does not move while the provider works.
	h := sessionHarness(t, nil)
	_, s := h.sessionCall("POST", "/v1/sessions", `{"max_duration_seconds":1}`, nil)
	slow := `{"model":"mock-small","max_tokens":10,"messages":[{"role":"user","content":"slow [mock delay=5000]"}]}`
	start := time.Now()
	r := h.post("/v1/chat/completions", slow, map[string]string{gateway.HeaderSession: s.ID})
	if took := time.Since(start); r.status != 429 || took > 3*time.Second || !strings.Contains(string(r.body), "session_ceiling_reached") ||
		!strings.Contains(string(r.body), `"type":"budget_exceeded"`) || r.header.Get("x-should-retry") != "false" {
		t.Fatalf("call past the session's end: %d after %v: %s", r.status, took, r.body)
	}
	eventually(t, "the provider to see the call cancelled", func() bool { return h.mock.Stats().CallsCancelled == 1 })
	rec := h.rec.waitUsage(t, 1)[0]
	if rec.OutputTokens != 10 || rec.InputTokens <= 0 {
		t.Errorf("ledger %+v, want the reservation", rec)
	}
	eventually(t, "the session to be charged the reservation", func() bool {
		_, got := h.sessionCall("GET", "/v1/sessions/"+s.ID, "", nil)
		return got.Used.Turns == 1 && got.Used.Tokens == rec.InputTokens+10
	})
	// Past its end the session refuses calls: catalog's TestCatalog_SessionCeilings,
	// on a fake clock.
}

// failingSessions is a session store whose charges fail, as a database
// that went away would.
type failingSessions struct{ gateway.SessionStore }

func (failingSessions) ChargeSession(context.Context, string, string, int64, int64, int64) (gateway.Session, error) {
	return gateway.Session{}, errors.New("connection refused")
}

// TestGateway_SessionStoreDown: a call in a session whose store does not
// answer is refused 503 with Retry-After, and the limiter's admission is
// given back: nothing is charged.
func TestGateway_SessionStoreDown(t *testing.T) {
	t.Parallel()
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Sessions = &gateway.Sessions{Store: failingSessions{catalogsessions.Store{Catalog: cat}}, Terms: func(gateway.Principal) gateway.SessionTerms {
			return gateway.SessionTerms{Model: "mock-small", MaxDuration: time.Hour}
		}}
	}}})
	_, s := h.sessionCall("POST", "/v1/sessions", "", nil)
	r := h.post("/v1/chat/completions", sessionChat, map[string]string{gateway.HeaderSession: s.ID})
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("session store down: %d %v %s", r.status, r.header, r.body)
	}
	if got := h.used("daily_tokens"); got != 0 || h.mockCalls() != 0 {
		t.Fatalf("charged %d tokens, %d provider calls", got, h.mockCalls())
	}
}

// TestGateway_SessionShortenedToWhatTheBudgetFunds: a session minted on a
// budget that cannot fund its configured ceilings gets the ceilings the
// budget can, says which budget lowered them, and then holds them.
func TestGateway_SessionShortenedToWhatTheBudgetFunds(t *testing.T) {
	t.Parallel()
	budget := sluice.Rule{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 2000, Period: sluice.PeriodDay}
	h := sessionHarness(t, []sluice.Rule{budget})
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":500,"messages":[{"role":"user","content":"spend some"}]}`, nil); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	eventually(t, "the spend to settle", func() bool { return h.used("daily_tokens") > 500 })
	left := 2000 - h.used("daily_tokens")
	r, s := h.sessionCall("POST", "/v1/sessions", "", nil) // configured: 10,000 tokens
	if r.status != 201 || s.Ceilings.Tokens != left || len(s.LoweredBy) != 1 || s.LoweredBy[0] != "daily_tokens" {
		t.Fatalf("mint with %d tokens left in the budget: %s", left, r.body)
	}
	// Asked for less than the budget has: not lowered.
	if r, s := h.sessionCall("POST", "/v1/sessions", `{"max_tokens":100}`, nil); s.Ceilings.Tokens != 100 || len(s.LoweredBy) != 0 {
		t.Fatalf("a smaller session: %s", r.body)
	}
}

// TestGateway_SessionMoneyInDollars: a session's cost ceiling and spend are
// written in dollars beside the micro-dollars; no cost ceiling, no cost.
func TestGateway_SessionMoneyInDollars(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, nil)
	r, s := h.sessionCall("POST", "/v1/sessions", `{"max_cost_micros":2500000}`, nil)
	if r.status != 201 || s.Ceilings.CostMicros != 2_500_000 || s.Ceilings.Cost != "$2.5" || s.Used.Cost != "$0" {
		t.Fatalf("mint with a cost ceiling: %d %s", r.status, r.body)
	}
	r, s = h.sessionCall("POST", "/v1/sessions", "", nil)
	if r.status != 201 || s.Ceilings.Cost != "" || s.Used.Cost != "$0" {
		t.Fatalf("mint without a cost ceiling: %d %s", r.status, r.body)
	}
}
