package gateway_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// dailyRequests is a budget of 100 requests a day per workspace: the rule
// whose fields the gateway's own refusals below must carry.
var dailyRequests = sluice.Rule{Name: "daily_requests", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 100, Period: sluice.PeriodDay}

// checkRequestFields checks the X-RateLimit, IETF and OpenAI request fields
// describe rule with limit, and remaining as the store has it now: what a
// refusal that charged nothing leaves.
func checkRequestFields(t *testing.T, h *harness, r reply, rule string, limit int64, maxReset time.Duration) {
	t.Helper()
	remaining := limit - h.used(rule)
	checkLimitHeaders(t, r, rule, limit, remaining, maxReset)
	if got := r.header.Get("x-ratelimit-limit-requests"); got != strconv.FormatInt(limit, 10) {
		t.Errorf("x-ratelimit-limit-requests %q, want %d", got, limit)
	}
	if got := r.header.Get("x-ratelimit-remaining-requests"); got != strconv.FormatInt(remaining, 10) {
		t.Errorf("x-ratelimit-remaining-requests %q, want %d", got, remaining)
	}
}

// TestGateway_SessionCeilingCarriesRateLimitFields: a call refused by its
// session's ceiling carries the fields of the key's rules, with the
// refused call's reservation given back.
func TestGateway_SessionCeilingCarriesRateLimitFields(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, []sluice.Rule{dailyRequests})
	_, s := h.sessionCall("POST", "/v1/sessions", `{"max_turns":1}`, nil)
	in := map[string]string{gateway.HeaderSession: s.ID}
	if r := h.post("/v1/chat/completions", sessionChat, in); r.status != 200 {
		t.Fatalf("first turn: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	r := h.post("/v1/chat/completions", sessionChat, in)
	if r.status != 429 || !strings.Contains(string(r.body), "session_ceiling_reached") {
		t.Fatalf("second turn: %d %s", r.status, r.body)
	}
	if h.used("daily_requests") != 1 {
		t.Fatalf("the budget counts %d requests, want the 1 served", h.used("daily_requests"))
	}
	checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
}

// TestGateway_PacedRefusalCarriesRateLimitFields: a call refused by pacing
// (its provider's own limit) carries the fields of the key's rules.
func TestGateway_PacedRefusalCarriesRateLimitFields(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{dailyRequests}, mock: mockprovider.Options{RateLimitRequests: 1, RateLimitWindow: 20 * time.Second},
		tweak: []func(*gateway.Options){paced, func(o *gateway.Options) { o.PaceMaxWait = 50 * time.Millisecond }}})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	r := h.post("/v1/chat/completions", smallChat, nil)
	if r.status != 429 || !strings.Contains(string(r.body), "provider_rate_limited") {
		t.Fatalf("paced call: %d %s", r.status, r.body)
	}
	checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
}

// TestGateway_UnauthenticatedRefusalsCarryThePreAuthFields: a 401, and a
// body too large refused before its key is read, carry the fields of the
// one limit that applies to an unknown caller, its address's pre-auth
// limit; without it, none.
func TestGateway_UnauthenticatedRefusalsCarryThePreAuthFields(t *testing.T) {
	t.Parallel()
	badKey := map[string]string{"Authorization": "Bearer sk-sluice-wrong"}
	preAuth := func(o *gateway.Options) { o.PreAuthPerMinute, o.MaxBodyBytes = 5, 1024 }
	t.Run("BadKey", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{dailyRequests}, preAuth)
		for i := range 2 {
			r := h.post("/v1/chat/completions", smallChat, badKey)
			if r.status != 401 {
				t.Fatalf("bad key: %d %s", r.status, r.body)
			}
			// Each request arriving is counted; the bucket refills one
			// every 12 s.
			checkLimitHeaders(t, r, gateway.PreAuthRule, 5, int64(4-i), time.Minute)
			if !strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"pre_auth_per_ip";q=5;w=60`) {
				t.Errorf("RateLimit-Policy %q", r.header.Get("RateLimit-Policy"))
			}
		}
	})
	t.Run("BodyTooLarge", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{dailyRequests}, preAuth)
		r := h.post("/v1/chat/completions", `{"model":"mock-small","messages":[{"role":"user","content":"`+strings.Repeat("x", 2048)+`"}]}`, nil)
		if r.status != 413 {
			t.Fatalf("large body: %d %s", r.status, r.body)
		}
		// Read, not charged: the body was never read, nor its key.
		checkLimitHeaders(t, r, gateway.PreAuthRule, 5, 5, time.Minute)
	})
	t.Run("NoPreAuthLimit", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{dailyRequests})
		r := h.post("/v1/chat/completions", smallChat, badKey)
		if r.status != 401 {
			t.Fatalf("bad key: %d %s", r.status, r.body)
		}
		for _, f := range []string{"X-RateLimit-Limit", "RateLimit", "RateLimit-Policy", "x-ratelimit-limit-requests"} {
			if v := r.header.Get(f); v != "" {
				t.Errorf("a 401 without a pre-auth limit carries %s: %q, a tenant's or the deployment's figures", f, v)
			}
		}
	})
}

// TestGateway_AuthenticatedBadRequestCarriesRateLimitFields: a request
// refused after its key is known (a model that does not exist) carries its
// key's fields.
func TestGateway_AuthenticatedBadRequestCarriesRateLimitFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []sluice.Rule{dailyRequests})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	r := h.post("/v1/chat/completions", `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 404 {
		t.Fatalf("unknown model: %d %s", r.status, r.body)
	}
	checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
}

// TestGateway_SessionRouteRefusalsCarryRateLimitFields: every refusal a
// session route answers once the key is known carries the fields of the
// key's rules, read without charging.
func TestGateway_SessionRouteRefusalsCarryRateLimitFields(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, []sluice.Rule{dailyRequests})
	if r := h.post("/v1/chat/completions", sessionChat, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"BadJSON", "POST", "/v1/sessions", `{"max_turns":`, 400, "invalid_json"},
		{"CeilingAboveTerms", "POST", "/v1/sessions", `{"max_turns":99}`, 400, "invalid_value"},
		{"UnknownSession", "GET", "/v1/sessions/sess_nobody", "", 404, "session_not_found"},
		{"CloseUnknown", "DELETE", "/v1/sessions/sess_nobody", "", 404, "session_not_found"},
		{"LongID", "GET", "/v1/sessions/" + strings.Repeat("x", 65), "", 404, "session_not_found"},
		{"Method", "PUT", "/v1/sessions", "", 405, "method_not_allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := h.sessionCall(c.method, c.path, c.body, nil)
			if r.status != c.status || !strings.Contains(string(r.body), c.code) {
				t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
			}
			checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
		})
	}
	t.Run("TooManySessions", func(t *testing.T) {
		for range 2 {
			if r, _ := h.sessionCall("POST", "/v1/sessions", "", nil); r.status != 201 {
				t.Fatalf("mint: %d %s", r.status, r.body)
			}
		}
		r, _ := h.sessionCall("POST", "/v1/sessions", "", nil)
		if r.status != 429 || !strings.Contains(string(r.body), "too_many_sessions") {
			t.Fatalf("third open session: %d %s", r.status, r.body)
		}
		checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
	})
}

// TestGateway_SessionMintOnSpentBudgetCarriesRateLimitFields: the mint's
// gate refuses as the spent budget would, with the fields an admission's
// refusal carries, OpenAI's request fields included.
func TestGateway_SessionMintOnSpentBudgetCarriesRateLimitFields(t *testing.T) {
	t.Parallel()
	spent := sluice.Rule{Name: "daily_one", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests, Limit: 1, Period: sluice.PeriodDay}
	h := sessionHarness(t, []sluice.Rule{spent})
	if r := h.post("/v1/chat/completions", sessionChat, nil); r.status != 200 {
		t.Fatalf("spending call: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	r, _ := h.sessionCall("POST", "/v1/sessions", "", nil)
	if r.status != 429 || !strings.Contains(string(r.body), `"rule":"daily_one"`) {
		t.Fatalf("mint on a spent budget: %d %s", r.status, r.body)
	}
	checkRequestFields(t, h, r, "daily_one", 1, 24*time.Hour)
}

// TestGateway_SessionRouteUnauthenticatedRefusalsCarryThePreAuthFields:
// before the key is known, a session route's refusal carries the pre-auth
// limit's fields: a bad key's, counted; sessions off, read, not counted.
func TestGateway_SessionRouteUnauthenticatedRefusalsCarryThePreAuthFields(t *testing.T) {
	t.Parallel()
	preAuth := func(o *gateway.Options) { o.PreAuthPerMinute = 5 }
	t.Run("BadKey", func(t *testing.T) {
		h := sessionHarness(t, []sluice.Rule{dailyRequests}, preAuth)
		r, _ := h.sessionCall("POST", "/v1/sessions", "", map[string]string{"Authorization": "Bearer sk-sluice-wrong"})
		if r.status != 401 {
			t.Fatalf("bad key: %d %s", r.status, r.body)
		}
		checkLimitHeaders(t, r, gateway.PreAuthRule, 5, 4, time.Minute)
	})
	t.Run("SessionsOff", func(t *testing.T) {
		h := newHarness(t, []sluice.Rule{dailyRequests}, preAuth)
		r, _ := h.sessionCall("POST", "/v1/sessions", "", nil)
		if r.status != 404 {
			t.Fatalf("sessions off: %d %s", r.status, r.body)
		}
		checkLimitHeaders(t, r, gateway.PreAuthRule, 5, 5, time.Minute)
	})
}

// TestGateway_SessionRouteAnswersCarryRateLimitFields: a session route's
// answers that refuse nothing (a mint, a read, a close) carry the fields
// of the key's rules too, as every answer does.
func TestGateway_SessionRouteAnswersCarryRateLimitFields(t *testing.T) {
	t.Parallel()
	h := sessionHarness(t, []sluice.Rule{dailyRequests})
	if r := h.post("/v1/chat/completions", sessionChat, nil); r.status != 200 {
		t.Fatalf("first call: %d %s", r.status, r.body)
	}
	h.rec.waitUsage(t, 1)
	r, s := h.sessionCall("POST", "/v1/sessions", "", nil)
	if r.status != 201 {
		t.Fatalf("mint: %d %s", r.status, r.body)
	}
	checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
	for _, method := range []string{"GET", "DELETE"} {
		r, _ := h.sessionCall(method, "/v1/sessions/"+s.ID, "", nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", method, r.status, r.body)
		}
		checkRequestFields(t, h, r, "daily_requests", 100, 24*time.Hour)
	}
}

// TestGateway_AuthenticationRefusalsCarryRateLimitFields: a key store that
// does not answer is a refusal before the key is known, with the pre-auth
// limit's fields, counted; an identity header the key may not send is a
// refusal once it is known, with the fields of its own rules.
func TestGateway_AuthenticationRefusalsCarryRateLimitFields(t *testing.T) {
	t.Parallel()
	perKey := sluice.Rule{Name: "per_key", Kind: sluice.KindRate, Subject: "key", Metric: sluice.MetricRequests, Limit: 50, Window: time.Minute}
	h := newHarness(t, []sluice.Rule{perKey}, withServiceKeys, func(o *gateway.Options) {
		o.PreAuthPerMinute = 5
		o.Keys = keyStore{fakeKeys: o.Keys.(fakeKeys)}
	})
	r := h.post("/v1/chat/completions", identityChat, map[string]string{"Authorization": "Bearer " + downKey})
	if r.status != 503 || !strings.Contains(string(r.body), "key_store_unavailable") {
		t.Fatalf("key store down: %d %s", r.status, r.body)
	}
	checkLimitHeaders(t, r, gateway.PreAuthRule, 5, 4, time.Minute)
	r = h.post("/v1/chat/completions", identityChat, as(listedKey, map[string]string{gateway.HeaderWorkspace: "ws-z"}))
	if r.status != 403 {
		t.Fatalf("a workspace outside the key's list: %d %s", r.status, r.body)
	}
	checkLimitHeaders(t, r, "per_key", 50, 50, time.Minute)
}
