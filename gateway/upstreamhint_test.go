package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// A provider's 429 is retried after its own hint, not on the gateway's
// backoff; a hint longer than the gateway waits is passed on to the client
// at once, not retried early and then again by the client. The gateway runs
// on a fake clock: the provider reads when each attempt came on it.
func TestGateway_UpstreamRetriesHonourTheProvidersHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hint         string
		wantAttempts int
		wantWaits    []time.Duration
	}{
		{"1", 3, []time.Duration{time.Second, time.Second}},
		{"30", 1, nil},
	} {
		t.Run("Retry-After "+tc.hint, func(t *testing.T) {
			t.Parallel()
			clock := clocktest.New(time.Now())
			var mu sync.Mutex
			var at []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				at = append(at, clock.Now())
				mu.Unlock()
				w.Header().Set("Retry-After", tc.hint)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(429)
				fmt.Fprint(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
			}))
			t.Cleanup(srv.Close)
			h := startHarness(t, setup{clock: clock, tweak: []func(*gateway.Options){func(o *gateway.Options) {
				o.RetryBase, o.RetryMax = 10*time.Millisecond, 2*time.Second
				o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-up"})
				o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-busy", Provider: "oa", MaxOutputTokens: 100})
			}}})
			r := h.post("/v1/chat/completions", `{"model":"gpt-busy","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
			mu.Lock()
			defer mu.Unlock()
			if r.status != 429 || r.header.Get("Retry-After") != tc.hint {
				t.Fatalf("%d, Retry-After %q: want the provider's 429 and its hint passed on", r.status, r.header.Get("Retry-After"))
			}
			if len(at) != tc.wantAttempts {
				t.Fatalf("%d attempts, want %d", len(at), tc.wantAttempts)
			}
			// Each retry came no sooner than the hint after the attempt
			// before it, and the gateway waited the hint, no more.
			for i := 1; i < len(at); i++ {
				if gap := at[i].Sub(at[i-1]); gap < time.Second {
					t.Errorf("attempt %d came %v after the one before: retried before the provider's hint", i+1, gap)
				}
			}
			if waits := clock.Waits(); !slices.Equal(waits, tc.wantWaits) {
				t.Errorf("the gateway waited %v, want %v", waits, tc.wantWaits)
			}
		})
	}
}

// A provider refusing the gateway's own key is 502 provider_auth_error
// naming the provider, never the client's 401 invalid_api_key; the
// reservation is released.
func TestGateway_ProviderAuthErrorIsNotTheClients(t *testing.T) {
	t.Parallel()
	for _, status := range []int{401, 403} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`)
		}))
		t.Cleanup(srv.Close)
		h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
			o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-revoked"})
			o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-badkey", Provider: "oa", MaxOutputTokens: 100})
		}}})
		r := h.post("/v1/chat/completions", `{"model":"gpt-badkey","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if r.status != 502 || !strings.Contains(string(r.body), "provider_auth_error") || !strings.Contains(string(r.body), "oa") ||
			strings.Contains(string(r.body), "invalid_api_key") {
			t.Fatalf("provider %d: %d %s, want 502 provider_auth_error naming provider oa", status, r.status, r.body)
		}
		if used := h.used("daily_tokens"); used != 0 {
			t.Fatalf("budget charged %d for a call the provider refused, want 0", used)
		}
	}
}

// An OpenAI-compatible provider set to output_cap_field max_tokens gets the
// cap in max_tokens whatever field the client used, so a server that reads
// only the older name cannot leave the call unbounded.
func TestGateway_OutputCapFieldForOlderServers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(srv.Close)
	h := startHarness(t, setup{tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "local", Kind: gateway.KindOpenAICompatible, BaseURL: srv.URL + "/v1",
			OutputCapField: "max_tokens"})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "llama", Provider: "local", MaxOutputTokens: 500})
	}}})
	for _, caps := range []string{`"max_completion_tokens":40`, `"max_tokens":40`, `"max_tokens":40,"max_completion_tokens":40`, ``} {
		body := `{"model":"llama",` + caps
		if caps != "" {
			body += ","
		}
		body += `"messages":[{"role":"user","content":"hi"}]}`
		if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
			t.Fatalf("%s: %d %s", caps, r.status, r.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, want := range []float64{40, 40, 40, 500} {
		if got, _ := bodies[i]["max_tokens"].(float64); got != want {
			t.Errorf("call %d sent max_tokens %v, want %v (body %v)", i, bodies[i]["max_tokens"], want, bodies[i])
		}
	}
}

// A provider's redirect is never passed on (a client following it would
// send the prompt and its key elsewhere): 502 upstream_error, nothing
// charged. An error answer that is not JSON reaches the client in the
// API's error shape, with the provider's status and retry hint.
func TestGateway_ProviderRedirectAndNonJSONErrors(t *testing.T) {
	var status atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch s := int(status.Load()); s {
		case 302:
			w.Header().Set("Location", "https://elsewhere.example/v1/chat/completions")
			w.WriteHeader(302)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(s)
			fmt.Fprint(w, "<html><body>Bad Gateway</body></html>")
		}
	}))
	t.Cleanup(srv.Close)
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-up"})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-odd", Provider: "oa", MaxOutputTokens: 100})
	}}})
	const chat = `{"model":"gpt-odd","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`

	status.Store(302)
	r := h.post("/v1/chat/completions", chat, nil)
	if r.status != 502 || r.header.Get("Location") != "" || codeOf(openaiError(t, r)) != "upstream_error" {
		t.Fatalf("redirect: %d Location %q %s, want 502 upstream_error and no Location", r.status, r.header.Get("Location"), r.body)
	}

	for _, s := range []int{503, 400} {
		status.Store(int64(s))
		r = h.post("/v1/chat/completions", chat, nil)
		if r.status != s || codeOf(openaiError(t, r)) != "upstream_error" || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Fatalf("non-JSON %d: %d %q %s, want the provider's status in the API's error shape", s, r.status, r.header.Get("Content-Type"), r.body)
		}
		if s == 503 && r.header.Get("Retry-After") != "30" {
			t.Errorf("non-JSON 503: Retry-After %q, want the provider's 30", r.header.Get("Retry-After"))
		}
	}
	if used := h.used("daily_tokens"); used != 0 {
		t.Fatalf("budget charged %d for calls the provider never served", used)
	}
}

func codeOf(e errorReply) string {
	if e.Error.Code == nil {
		return ""
	}
	return *e.Error.Code
}

// A provider's whole answer is read only up to what the call could
// produce (1 MiB beside 2 KiB a token of output): a longer one is 502, not
// buffered and not retried, and the reservation is charged, since the
// provider answered.
func TestGateway_ProviderAnswerCappedByWhatTheCallCanProduce(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		pad := strings.Repeat("x", 3<<20)
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":8,"total_tokens":11}}`, pad)
	}))
	t.Cleanup(srv.Close)
	h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
		o.Providers = append(slices.Clone(o.Providers), gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-up"})
		o.Models = append(slices.Clone(o.Models), gateway.Model{Name: "gpt-verbose", Provider: "oa", MaxOutputTokens: 100})
	}}})
	r := h.post("/v1/chat/completions", `{"model":"gpt-verbose","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 502 || codeOf(openaiError(t, r)) != "upstream_error" {
		t.Fatalf("%d %.200s, want 502 upstream_error", r.status, r.body)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("provider called %d times, want 1 (an answer too long is not retried)", n)
	}
	if recs := h.rec.waitUsage(t, 1); !recs[0].Estimated || h.used("daily_tokens") != recs[0].Reserved.InputTokens+recs[0].Reserved.OutputTokens {
		t.Errorf("record %+v, budget %d: want the reservation charged", recs[0], h.used("daily_tokens"))
	}
}
