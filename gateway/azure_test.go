package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// azureShim plays Azure OpenAI in front of the mock: it records what it is
// sent, answers 404 to a path Azure would not serve, and passes the call on
// to the mock under OpenAI's path.
type azureShim struct {
	mu       sync.Mutex
	requests []*http.Request
	mock     http.Handler
}

func (a *azureShim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.requests = append(a.requests, r.Clone(r.Context()))
	a.mu.Unlock()
	var rest string
	switch {
	case strings.HasPrefix(r.URL.Path, "/openai/deployments/") && r.URL.Query().Get("api-version") != "":
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/openai/deployments/"), "/", 2)
		rest = "/" + parts[1]
	case strings.HasPrefix(r.URL.Path, "/openai/v1/"):
		rest = strings.TrimPrefix(r.URL.Path, "/openai/v1")
	default:
		http.Error(w, `{"error":{"code":"404","message":"Resource not found"}}`, 404)
		return
	}
	r.URL.Path = "/v1" + rest
	// Azure serves the deployment, whatever model the body names; the
	// mock serves its own models.
	var fields map[string]any
	_ = json.Unmarshal(body, &fields)
	fields["model"] = "mock-small"
	body, _ = json.Marshal(fields)
	r.ContentLength = int64(len(body))
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	a.mock.ServeHTTP(w, r)
}

func (a *azureShim) last() *http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests[len(a.requests)-1]
}

// An Azure provider sends its key as api-key, to the deployment named by
// the model's upstream name with the api-version, or to the v1 API; usage
// is counted as OpenAI's.
func TestGateway_AzureProvider(t *testing.T) {
	t.Parallel()
	shim := &azureShim{mock: mockprovider.New(mockprovider.Options{})}
	srv := httptest.NewServer(shim)
	t.Cleanup(srv.Close)
	tokens := sluice.Rule{Name: "tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay}
	h := newHarness(t, []sluice.Rule{tokens}, func(o *gateway.Options) {
		o.Providers = append(o.Providers,
			gateway.Provider{Name: "azure-deployments", Kind: gateway.KindAzure, BaseURL: srv.URL, APIKey: "azure-key-1", APIVersion: "2024-10-21"},
			gateway.Provider{Name: "azure-v1", Kind: gateway.KindAzure, BaseURL: srv.URL + "/openai/v1", APIKey: "azure-key-2"})
		o.Models = append(o.Models,
			gateway.Model{Name: "az-gpt", Provider: "azure-deployments", UpstreamName: "my gpt deployment", MaxOutputTokens: 1000},
			gateway.Model{Name: "az-v1", Provider: "azure-v1", UpstreamName: "gpt-4o-mini", MaxOutputTokens: 1000})
	})
	calls := 0
	for _, c := range []struct {
		model, path, rawQuery, key string
		stream                     bool
	}{
		{"az-gpt", "/openai/deployments/my%20gpt%20deployment/chat/completions", "api-version=2024-10-21", "azure-key-1", false},
		{"az-gpt", "/openai/deployments/my%20gpt%20deployment/chat/completions", "api-version=2024-10-21", "azure-key-1", true},
		{"az-v1", "/openai/v1/chat/completions", "", "azure-key-2", false},
	} {
		body := `{"model":"` + c.model + `","max_tokens":20,"messages":[{"role":"user","content":"hi [mock tokens=7]"}]`
		if c.stream {
			body += `,"stream":true`
		}
		body += `}`
		before := h.used("tokens")
		r := h.post("/v1/chat/completions", body, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", c.model, r.status, r.body)
		}
		// Settled (a stream after its last byte): the budget holds the
		// usage, not the reservation.
		calls++
		h.rec.waitUsage(t, calls)
		req := shim.last()
		if got := req.URL.EscapedPath(); got != c.path || req.URL.RawQuery != c.rawQuery {
			t.Errorf("%s: sent to %s?%s, want %s?%s", c.model, got, req.URL.RawQuery, c.path, c.rawQuery)
		}
		if req.Header.Get("api-key") != c.key || req.Header.Get("Authorization") != "" {
			t.Errorf("%s: api-key %q, Authorization %q", c.model, req.Header.Get("api-key"), req.Header.Get("Authorization"))
		}
		if spent := h.used("tokens") - before; spent < 7 {
			t.Errorf("%s (stream %v): %d tokens charged, want the call's", c.model, c.stream, spent)
		}
	}
}
