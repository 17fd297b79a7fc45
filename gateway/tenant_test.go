package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/store/memstore"
)

// tenantKeys are keys of several tenants, by secret.
var tenantKeys = fakeKeys{
	"sk-a":          {KeyID: "ka", Org: "orgA", Workspace: "w1", User: "u1"},
	"sk-b":          {KeyID: "kb", Org: "orgB", Workspace: "w1", User: "u1"},
	"sk-b-research": {KeyID: "kbr", Org: "orgB", Workspace: "research", User: "u1"},
	"sk-c":          {KeyID: "kc", Org: "orgC", Workspace: "w1", User: "u1"},
	"sk-c-free":     {KeyID: "kcf", Org: "orgC", Workspace: "w1", User: "u2", Tier: "free"},
	"sk-d-free":     {KeyID: "kdf", Org: "orgD", Workspace: "w1", User: "u1", Tier: "free"},
	// orgE's research workspace shares its name with orgB's.
	"sk-e-research": {KeyID: "ker", Org: "orgE", Workspace: "research", User: "u1"},
	"sk-cheap-only": {KeyID: "kco", Org: "orgA", Workspace: "w1", User: "u3", AllowedModels: []string{"cheap"}},
	"sk-small-only": {KeyID: "kso", Org: "orgA", Workspace: "w1", User: "u4", AllowedModels: []string{"mock-small"}},
	"sk-alias-only": {KeyID: "kao", Org: "orgB", Workspace: "w1", User: "u5", AllowedModels: []string{"small", "cheap"}},
}

// tenantModels are cheap, served per tenant with no default, and best,
// with a default.
var tenantModels = []gateway.TenantModel{
	{Name: "cheap", Routes: []gateway.TenantRoute{
		{Org: "orgA", Model: "mock-small"},
		{Org: "orgB", Model: "mock-large"},
		{Org: "orgB", Workspace: "research", Model: "small"}, // an alias names its model
		{Tier: "free", Model: "mock-small"},
		{Org: "orgD", Tier: "free", Model: "mock-large"},
	}},
	{Name: "best", Default: "mock-large", Routes: []gateway.TenantRoute{{Org: "orgA", Model: "mock-small"}}},
}

// upstreamCall is what a provider received.
type upstreamCall struct {
	header http.Header
	model  string
}

// recordingProvider is the mock provider behind a server that keeps every
// request's headers and model.
type recordingProvider struct {
	url   string
	mu    sync.Mutex
	calls []upstreamCall
}

func newRecordingProvider(t *testing.T) *recordingProvider {
	t.Helper()
	p := &recordingProvider{}
	mock := mockprovider.New(mockprovider.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(body, &m)
		p.mu.Lock()
		p.calls = append(p.calls, upstreamCall{header: r.Header.Clone(), model: m.Model})
		p.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// last returns the last call received.
func (p *recordingProvider) last(t *testing.T) upstreamCall {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) == 0 {
		t.Fatal("the provider received no call")
	}
	return p.calls[len(p.calls)-1]
}

// tenantHarness is a gateway with tenantKeys and tenantModels in front of
// a recording provider.
func tenantHarness(t *testing.T, rules []sluice.Rule) (*harness, *recordingProvider) {
	t.Helper()
	up := newRecordingProvider(t)
	h := newHarness(t, rules, func(o *gateway.Options) {
		o.Keys = tenantKeys
		o.TenantModels = tenantModels
		o.Providers = []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: up.url}}
	})
	return h, up
}

func chatBody(model string) string {
	return `{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
}

func bearerHeader(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key}
}

// TestTenantModel_ServedPerTenant checks that one logical name serves each
// tenant its own model, most specific route first, and that a tenant with
// no route and no default does not see the name.
func TestTenantModel_ServedPerTenant(t *testing.T) {
	t.Parallel()
	h, up := tenantHarness(t, nil)
	for _, tc := range []struct {
		key, model string
		// served is the model that serves (X-Sluice-Model and the name
		// upstream); empty for a 404.
		served string
	}{
		{"sk-a", "cheap", "mock-small"},
		{"sk-b", "cheap", "mock-large"},
		{"sk-b-research", "cheap", "mock-small"}, // the workspace beats its org
		{"sk-e-research", "cheap", ""},           // another org's workspace of the same name
		{"sk-c-free", "cheap", "mock-small"},     // by tier
		{"sk-d-free", "cheap", "mock-large"},     // org+tier beats the tier
		{"sk-c", "cheap", ""},                    // no route, no default: unknown to orgC
		{"sk-c", "best", "mock-large"},           // the default
		{"sk-a", "best", "mock-small"},           // a route beats the default
		{"sk-a", "mock-large", "mock-large"},     // model names still work
		{"sk-b", "small", "mock-small"},          // and aliases
		{"sk-b", "no-such-model", ""},
	} {
		t.Run(tc.key+"/"+tc.model, func(t *testing.T) {
			r := h.post("/v1/chat/completions", chatBody(tc.model), bearerHeader(tc.key))
			if tc.served == "" {
				if e := openaiError(t, r); r.status != http.StatusNotFound || e.Error.Code == nil || *e.Error.Code != "model_not_found" {
					t.Fatalf("status %d, body %s; want 404 model_not_found", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if got := r.header.Get("X-Sluice-Model"); got != tc.served {
				t.Errorf("X-Sluice-Model = %q, want %q", got, tc.served)
			}
			if got := up.last(t).model; got != tc.served {
				t.Errorf("the provider was asked for %q, want %q", got, tc.served)
			}
		})
	}
	// The ledger records the served model, never the logical name.
	for _, u := range h.rec.waitUsage(t, 9) {
		if u.Model != "mock-small" && u.Model != "mock-large" {
			t.Errorf("usage recorded for model %q", u.Model)
		}
	}
}

// TestTenantModel_RuleOnServedModelCounts checks that a rule on a model
// counts the calls it serves under a tenant model's name, and only those.
func TestTenantModel_RuleOnServedModelCounts(t *testing.T) {
	t.Parallel()
	rule := sluice.Rule{Name: "large_calls", Kind: sluice.KindRate, Subject: "global", Limit: 2, Window: time.Hour,
		Match: sluice.Match{Models: []string{"mock-large"}}}
	h, _ := tenantHarness(t, []sluice.Rule{rule})
	for i, tc := range []struct {
		key, model string
		want       int
	}{
		{"sk-b", "cheap", 200}, // mock-large: 1 of 2
		{"sk-a", "cheap", 200}, // mock-small: not counted
		{"sk-c", "best", 200},  // mock-large by default: 2 of 2
		{"sk-a", "cheap", 200},
		{"sk-b", "mock-large", 429}, // by name: the logical calls counted
		{"sk-b", "cheap", 429},
	} {
		r := h.post("/v1/chat/completions", chatBody(tc.model), bearerHeader(tc.key))
		if r.status != tc.want {
			t.Fatalf("call %d (%s asks for %s): status %d, want %d: %s", i, tc.key, tc.model, r.status, tc.want, r.body)
		}
		if tc.want == 429 {
			if e := openaiError(t, r); e.Error.Limit == nil || e.Error.Limit.Rule != "large_calls" {
				t.Errorf("call %d refused by %s, want large_calls", i, r.body)
			}
		}
	}
}

// TestTenantModel_AllowedModels checks that a key's allowed models name
// the names it may ask for: a tenant model's name grants the model it
// serves under that name only, and an alias grants its model.
func TestTenantModel_AllowedModels(t *testing.T) {
	t.Parallel()
	h, _ := tenantHarness(t, nil)
	for _, tc := range []struct {
		key, model string
		want       int
	}{
		{"sk-cheap-only", "cheap", 200},
		{"sk-cheap-only", "mock-small", 403}, // what cheap serves, asked for by name
		{"sk-cheap-only", "best", 403},
		{"sk-small-only", "mock-small", 200},
		{"sk-small-only", "small", 200},
		{"sk-small-only", "cheap", 403}, // serves mock-small, but cheap is not allowed
		{"sk-alias-only", "mock-small", 200},
		{"sk-alias-only", "mock-large", 403},
		{"sk-alias-only", "cheap", 200}, // serves orgB mock-large, by the name allowed
	} {
		r := h.post("/v1/chat/completions", chatBody(tc.model), bearerHeader(tc.key))
		if r.status != tc.want {
			t.Errorf("%s asks for %s: status %d, want %d: %s", tc.key, tc.model, r.status, tc.want, r.body)
		}
	}
}

// get sends GET path with headers and returns the answer.
func (h *harness) get(path string, headers map[string]string) reply {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestListModels_PerKey checks that GET /v1/models needs a key and lists
// exactly what that key may call, by the names it may use.
func TestListModels_PerKey(t *testing.T) {
	t.Parallel()
	h, _ := tenantHarness(t, nil)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    []string // ids; nil for a 401
		owners  []string
	}{
		{name: "no key"},
		{name: "bad key", headers: bearerHeader("sk-nope")},
		{name: "every model and both tenant models", headers: bearerHeader("sk-a"),
			want: []string{"mock-small", "mock-large", "cheap", "best"}, owners: []string{"mock", "mock", "mock", "mock"}},
		{name: "cheap serves no model to orgC", headers: bearerHeader("sk-c"), want: []string{"mock-small", "mock-large", "best"}},
		{name: "x-api-key", headers: map[string]string{"x-api-key": "sk-c-free"}, want: []string{"mock-small", "mock-large", "cheap", "best"}},
		{name: "allowed tenant model only", headers: bearerHeader("sk-cheap-only"), want: []string{"cheap"}},
		{name: "allowed model only", headers: bearerHeader("sk-small-only"), want: []string{"mock-small"}},
		{name: "allowed by alias, listed by name", headers: bearerHeader("sk-alias-only"), want: []string{"mock-small", "cheap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.get("/v1/models", tc.headers)
			if tc.want == nil {
				if e := openaiError(t, r); r.status != http.StatusUnauthorized || *e.Error.Code != "invalid_api_key" {
					t.Fatalf("status %d, body %s; want 401 invalid_api_key", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var list struct {
				Object string `json:"object"`
				Data   []struct {
					ID      string `json:"id"`
					Object  string `json:"object"`
					Created *int64 `json:"created"`
					OwnedBy string `json:"owned_by"`
				} `json:"data"`
			}
			if err := json.Unmarshal(r.body, &list); err != nil || list.Object != "list" {
				t.Fatalf("body %s is not a model list: %v", r.body, err)
			}
			var ids, owners []string
			for _, m := range list.Data {
				if m.Object != "model" || m.Created == nil {
					t.Errorf("entry %+v is not a model object", m)
				}
				ids, owners = append(ids, m.ID), append(owners, m.OwnedBy)
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("ids = %q, want %q", ids, tc.want)
			}
			if tc.owners != nil && !slices.Equal(owners, tc.owners) {
				t.Errorf("owned_by = %q, want %q", owners, tc.owners)
			}
		})
	}
	// An Anthropic client is refused in its own shape.
	r := h.get("/v1/models", map[string]string{"anthropic-version": "2023-06-01"})
	if e := anthropicError(t, r); r.status != http.StatusUnauthorized || e.Error.Type != "authentication_error" {
		t.Errorf("Anthropic client without a key: status %d, body %s", r.status, r.body)
	}
	// A key with nothing to call gets an empty list, not null.
	h2 := newHarness(t, nil, func(o *gateway.Options) {
		o.Keys = fakeKeys{"sk-dead": {KeyID: "kd", Org: "o", AllowedModels: []string{"gone"}}}
	})
	if r := h2.get("/v1/models", bearerHeader("sk-dead")); r.status != 200 || string(r.body) != `{"object":"list","data":[]}` {
		t.Errorf("key allowed no served model: status %d, body %s", r.status, r.body)
	}
}

// TestTenantModel_ConfigErrors checks that New refuses tenant models that
// name no model or clash with one.
func TestTenantModel_ConfigErrors(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tenant gateway.TenantModel
		want   string
	}{
		{"name is a model", gateway.TenantModel{Name: "small", Routes: []gateway.TenantRoute{{Org: "a", Model: "mock-large"}}},
			`tenant model "small" is also the name or an alias of a model`},
		{"unknown model", gateway.TenantModel{Name: "cheap", Routes: []gateway.TenantRoute{{Org: "a", Model: "huge"}}},
			`tenant model "cheap": unknown model "huge"`},
		{"unknown default", gateway.TenantModel{Name: "cheap", Default: "huge"}, `unknown default model "huge"`},
		{"workspace without org", gateway.TenantModel{Name: "cheap", Routes: []gateway.TenantRoute{{Workspace: "w", Model: "mock-large"}}},
			`names workspace "w" without its org`},
		{"matches everyone", gateway.TenantModel{Name: "cheap", Routes: []gateway.TenantRoute{{Model: "mock-large"}}},
			`names no org, workspace or tier`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.New(gateway.Options{Limiter: l, Keys: fakeKeys{}, Models: testModels,
				Providers:    []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: "http://127.0.0.1:1"}},
				TenantModels: []gateway.TenantModel{tc.tenant}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestProviderHeaders_OrganizationAndProject checks that the client's
// OpenAI-Organization and OpenAI-Project never reach a provider, and that
// an OpenAI provider's configured ones are sent.
func TestProviderHeaders_OrganizationAndProject(t *testing.T) {
	t.Parallel()
	up := newRecordingProvider(t)
	h := newHarness(t, nil, func(o *gateway.Options) {
		o.Providers = []gateway.Provider{
			{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: up.url + "/v1", Organization: "org-operator", Project: "proj_operator"},
			{Name: "compat", Kind: gateway.KindOpenAICompatible, BaseURL: up.url + "/v1"},
			{Name: "mock", Kind: gateway.KindMock, BaseURL: up.url, Organization: "ignored"},
		}
		o.Models = []gateway.Model{
			{Name: "gpt-op", Provider: "openai", UpstreamName: "mock-small", MaxOutputTokens: 100},
			{Name: "compat-m", Provider: "compat", UpstreamName: "mock-small", MaxOutputTokens: 100},
			{Name: "mock-m", Provider: "mock", UpstreamName: "mock-small", MaxOutputTokens: 100},
		}
	})
	client := map[string]string{"OpenAI-Organization": "org-client", "OpenAI-Project": "proj_client", "OpenAI-Beta": "assistants=v2"}
	for _, tc := range []struct {
		model, org, project string
	}{
		{"gpt-op", "org-operator", "proj_operator"},
		{"compat-m", "", ""},
		{"mock-m", "", ""}, // only OpenAI kinds send them
	} {
		t.Run(tc.model, func(t *testing.T) {
			r := h.post("/v1/chat/completions", chatBody(tc.model), client)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			got := up.last(t).header
			if got.Get("OpenAI-Organization") != tc.org || got.Get("OpenAI-Project") != tc.project {
				t.Errorf("provider got OpenAI-Organization %q, OpenAI-Project %q; want %q, %q",
					got.Get("OpenAI-Organization"), got.Get("OpenAI-Project"), tc.org, tc.project)
			}
			if got.Get("OpenAI-Beta") != "assistants=v2" {
				t.Errorf("OpenAI-Beta = %q: behaviour headers still pass through", got.Get("OpenAI-Beta"))
			}
		})
	}
}
