package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// providerRPM is a rule of requests per minute per model that takes its
// limit from the provider, limit until the provider has said.
func providerRPM(limit int64) sluice.Rule {
	return sluice.Rule{Name: "provider_rpm", Kind: sluice.KindRate, Subject: "model", Limit: limit, Window: time.Minute,
		LimitFrom: sluice.LimitFromProvider}
}

// providerLimitOf returns the effective provider_rpm of mock-small.
func (h *harness) providerLimitOf() sluice.Headroom {
	h.t.Helper()
	return h.effective(sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1", Model: "mock-small"}, "provider_rpm")
}

// TestGateway_ProviderLimitRuleFollowsTheHeaders: the provider allows 4
// calls a minute and says so in its headers (OpenAI's and Anthropic's); a
// rule from the provider, configured at 2, follows it, unpaced: 4 calls are
// served, the fifth is refused by the gateway, saying the limit is the
// provider's, and never reaches the provider, which refuses nothing.
func TestGateway_ProviderLimitRuleFollowsTheHeaders(t *testing.T) {
	t.Parallel()
	limited := mockprovider.Options{RateLimitRequests: 4, RateLimitWindow: time.Minute}
	for _, api := range []struct {
		name, path, body string
		decode           func(*testing.T, reply) errorReply
	}{
		{"OpenAI", "/v1/chat/completions", smallChat, openaiError},
		{"Anthropic", "/v1/messages", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, anthropicError},
	} {
		t.Run(api.name, func(t *testing.T) {
			h := startHarness(t, setup{rules: []sluice.Rule{providerRPM(2)}, mock: limited})
			if e := h.providerLimitOf(); e.Limit != 2 || e.Source == sluice.LimitFromProvider {
				t.Fatalf("before any answer: %+v", e)
			}
			for i := range 4 {
				if r := h.post(api.path, api.body, nil); r.status != 200 {
					t.Fatalf("call %d of the 4 the provider allows: %d %s", i+1, r.status, r.body)
				}
			}
			if e := h.providerLimitOf(); e.Limit != 4 || e.Source != sluice.LimitFromProvider {
				t.Fatalf("after the provider's answers: %+v", e)
			}
			r := h.post(api.path, api.body, nil)
			if r.status != 429 || r.header.Get("Retry-After") == "" {
				t.Fatalf("fifth call: %d %v %s", r.status, r.header, r.body)
			}
			e := api.decode(t, r)
			if l := e.Error.Limit; l == nil || l.Rule != "provider_rpm" || l.Source != sluice.LimitFromProvider || l.Limit != 4 ||
				!strings.Contains(e.Error.Message, "the provider's limit") {
				t.Fatalf("fifth call's body: %s", r.body)
			}
			if n, refused := h.mockCalls(), h.mock.Stats().RateLimited; n != 4 || refused != 0 {
				t.Errorf("the provider was called %d times and refused %d, want 4 and 0", n, refused)
			}
		})
	}
}

// TestGateway_ProviderHoldRefusesAtTheGateway: another client of the
// provider account spent its bucket, so the provider answers a call 429
// with a retry hint. Until the hint has passed, the rule from the provider
// refuses at the gateway, with the provider's hint, though it has room of
// its own; the provider is not called again.
func TestGateway_ProviderHoldRefusesAtTheGateway(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{providerRPM(100)},
		mock:  mockprovider.Options{RateLimitRequests: 3, RateLimitWindow: time.Minute},
		tweak: []func(*gateway.Options){func(o *gateway.Options) { o.UpstreamRetries = -1 }}})
	for i := range 3 {
		resp, err := http.Post(h.mockURL+"/v1/chat/completions", "application/json", strings.NewReader(smallChat))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("the other client's call %d: %d", i+1, resp.StatusCode)
		}
	}
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 429 {
		t.Fatalf("the call the provider refuses: %d %s", r.status, r.body)
	}
	used := h.providerLimitOf().Used
	r := h.post("/v1/chat/completions", smallChat, nil)
	ms, _ := strconv.ParseInt(r.header.Get("Retry-After-Ms"), 10, 64)
	if r.status != 429 || ms < 15_000 { // the provider's hint: one call refilled in 20 s
		t.Fatalf("the next call: %d %v %s", r.status, r.header, r.body)
	}
	if l := openaiError(t, r).Error.Limit; l == nil || l.Rule != "provider_rpm" || l.Source != sluice.LimitFromProvider {
		t.Fatalf("the next call's body: %s", r.body)
	}
	if n, refused := h.mockCalls(), h.mock.Stats().RateLimited; n != 4 || refused != 1 {
		t.Errorf("the provider was called %d times and refused %d, want 4 and 1", n, refused)
	}
	if now := h.providerLimitOf().Used; now != used {
		t.Errorf("the refused call was charged: the rule counted %d, then %d", used, now)
	}
}
