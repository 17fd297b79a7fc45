package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/sluicehq/sluice/store/memstore"
)

// adminServer is the admin listener of the description's servers: the
// test servers' answers are matched as if they came from it.
const adminServer = "127.0.0.1:8081"

// openAPIDoc loads admin/openapi.json, validated as OpenAPI 3.1, with a
// router over it.
var openAPIDoc = sync.OnceValues(func() (*openAPIRouter, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPI)
	if err != nil {
		return nil, fmt.Errorf("load admin/openapi.json: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("admin/openapi.json is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("admin/openapi.json is not a valid OpenAPI document: %w", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route admin/openapi.json: %w", err)
	}
	return &openAPIRouter{doc: doc, router: router}, nil
})

type openAPIRouter struct {
	doc    *openapi3.T
	router routers.Router
}

func loadOpenAPI(t testing.TB) *openAPIRouter {
	t.Helper()
	r, err := openAPIDoc()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkOpenAPI validates an answer of the admin handler against the
// description: status, headers and body of the operation it routes to.
// A path the description does not have may only be answered 404 or 405
// (the mux's own refusals) with the error shape.
func checkOpenAPI(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	d := loadOpenAPI(t)
	r := req.Clone(req.Context())
	r.URL.Host, r.Host = adminServer, adminServer
	route, params, err := d.router.FindRoute(r)
	if err != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s answered %d but is not in admin/openapi.json: %v", req.Method, req.URL.Path, resp.StatusCode, err)
			return
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Errorf("%s %s: %d answer is not JSON: %v", req.Method, req.URL.Path, resp.StatusCode, err)
				return
			}
			if err := d.doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("%s %s: %d answer is not the Error shape of admin/openapi.json: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, body)
			}
		}
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: the %d answer does not match admin/openapi.json: %v\nbody: %.2000s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
}

// servedRoute is one pattern of the admin mux as the description names
// its path: "GET /ui/{$}" is GET /ui/, "{name...}" is {name}.
type servedRoute struct {
	pattern, method, path string
	// subtree is a pattern ending in "/": it serves every path under it.
	subtree bool
}

var wildcard = regexp.MustCompile(`\{([A-Za-z0-9_]+)(\.\.\.)?\}`)

func parsePattern(p string) servedRoute {
	method, path, ok := strings.Cut(p, " ")
	if !ok {
		method, path = "", p
	}
	s := servedRoute{pattern: p, method: method}
	switch {
	case strings.HasSuffix(path, "{$}"):
		path = strings.TrimSuffix(path, "{$}")
	case strings.HasSuffix(path, "/"):
		s.subtree = true
	}
	s.path = wildcard.ReplaceAllString(path, "{$1}")
	return s
}

// notFoundRoute is the admin mux's fallback: every path under /admin/v1/
// no route serves is answered 404 not_found; it is the "default" Error
// answer of every operation, not an operation of its own.
const notFoundRoute = "/admin/v1/"

// TestOpenAPI_DescribesEveryRoute walks every pattern the admin mux
// serves, with every optional route on, and fails on one the description
// lacks; and checks that every admin path the description names is served.
func TestOpenAPI_DescribesEveryRoute(t *testing.T) {
	e := newEnv(t)
	d := loadOpenAPI(t)
	if len(e.handler.patterns.patterns) < 30 {
		t.Fatalf("the admin mux lists %d patterns; the route list is not being recorded", len(e.handler.patterns.patterns))
	}
	for _, p := range e.handler.patterns.patterns {
		s := parsePattern(p)
		if s.pattern == notFoundRoute {
			continue
		}
		if s.subtree {
			found := false
			for path := range d.doc.Paths.Map() {
				if strings.HasPrefix(path, s.path) && path != s.path {
					found = found || d.doc.Paths.Value(path).GetOperation(s.method) != nil
				}
			}
			if !found {
				t.Errorf("route %q (every path under %s) is served by the admin mux but missing from admin/openapi.json: add a path under %s with a %s operation",
					p, s.path, s.path, s.method)
			}
			continue
		}
		item := d.doc.Paths.Find(s.path)
		if item == nil {
			t.Errorf("route %q is served by the admin mux but missing from admin/openapi.json: add the path %q with a %s operation", p, s.path, s.method)
			continue
		}
		if item.GetOperation(s.method) == nil {
			t.Errorf("route %q is served by the admin mux but missing from admin/openapi.json: the path %q has no %s operation", p, s.path, s.method)
		}
	}
	// The other way: each operation on the admin listener is routed by
	// the mux to a pattern of its own, not the not-found fallback.
	for path, item := range d.doc.Paths.Map() {
		if len(item.Servers) > 0 && path != "/healthz" {
			continue // the gateway's
		}
		for method := range item.Operations() {
			concrete := wildcard.ReplaceAllString(path, "x")
			_, pattern := e.handler.mux.Handler(httptest.NewRequest(method, concrete, nil))
			if pattern == "" || pattern == notFoundRoute {
				t.Errorf("admin/openapi.json describes %s %s, which the admin mux does not serve", method, path)
			}
		}
	}
}

// TestOpenAPI_Served checks GET /admin/v1/openapi.json: the embedded file,
// without a token.
func TestOpenAPI_Served(t *testing.T) {
	e := newEnv(t)
	r := e.must(http.StatusOK, "GET", "/admin/v1/openapi.json", "", nil)
	if r.raw != string(openAPI) || r.body["openapi"] != "3.1.0" {
		t.Fatalf("served description differs from admin/openapi.json (%d bytes, openapi %v)", len(r.raw), r.body["openapi"])
	}
}

// TestOpenAPI_CatchesAWrongAnswer checks that the validation the admin
// tests go through refuses an answer off the description, so a passing
// suite means something.
func TestOpenAPI_CatchesAWrongAnswer(t *testing.T) {
	req := httptest.NewRequest("GET", "http://"+adminServer+"/admin/v1/keys/abc", nil)
	for _, tc := range []struct {
		status int
		body   string
	}{
		{200, `{"key":{"id":"abc","org":"default","workspace":"w"}}`},                     // user missing
		{200, `{"key":{"id":"abc","org":"default","workspace":"w","user":"u","x":1}}`},    // unknown field
		{404, `{"error":{"code":"unknown_key"}}`},                                         // message missing
		{200, `{"key":{"id":"abc","org":"default","workspace":"w","user":"u","tier":3}}`}, // wrong type
	} {
		ft := &fakeT{}
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Type": {"application/json"}}}
		checkOpenAPI(ft, req, resp, []byte(tc.body))
		if !ft.failed {
			t.Errorf("%d %s passed the validation", tc.status, tc.body)
		}
	}
	ft := &fakeT{}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
	checkOpenAPI(ft, req, resp, []byte(`{"key":{"id":"abc","org":"default","workspace":"w","user":"u","tier":"pro"}}`))
	if ft.failed {
		t.Errorf("a right answer failed: %s", ft.msg)
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}
func (f *fakeT) Fatal(args ...any) { f.failed, f.msg = true, fmt.Sprint(args...) }

// TestOpenAPI_RefusalShapesMatchTheEncoders checks the gateway's refusals
// as described against the code that writes them: the library's refusal
// (status, headers, limit object) in the OpenAI and Anthropic error bodies.
func TestOpenAPI_RefusalShapesMatchTheEncoders(t *testing.T) {
	d := loadOpenAPI(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	refusals := []error{
		&sluice.RateLimitError{Refusal: sluice.Refusal{Rule: "rpm", Subject: "workspace+user", Kind: sluice.KindRate, Metric: sluice.MetricRequests,
			Limit: 20, Used: 20, Window: time.Minute, RetryAfter: 1500 * time.Millisecond, ResetAt: now.Add(time.Minute)}},
		&sluice.BudgetError{Refusal: sluice.Refusal{Rule: "daily", Subject: "workspace", Kind: sluice.KindBudget, Metric: sluice.MetricTokens,
			Limit: 1000, Used: 990, Remaining: 10, Requested: 500, Period: sluice.PeriodDay, ResetAt: now.Add(12 * time.Hour)}},
		&sluice.BusyError{Refusal: sluice.Refusal{Rule: "max_in_flight", Subject: "server", Kind: sluice.KindConcurrency, Metric: sluice.MetricConcurrency,
			Limit: 16, Used: 16, RetryAfter: 5 * time.Second}},
		&sluice.StoreError{Op: "admit", Err: context.DeadlineExceeded},
		&sluice.TooLargeError{Rule: "daily", Subject: "workspace", Metric: sluice.MetricTokens, Estimate: 5000, Limit: 1000},
	}
	described := map[string]bool{}
	for name := range d.doc.Components.Headers {
		described[strings.ToLower(name)] = true
	}
	path := d.doc.Paths.Find("/v1/chat/completions").Post
	for _, err := range refusals {
		hr, ok := sluicehttp.RefusalOf(err)
		if !ok {
			t.Fatalf("%T is not a refusal", err)
		}
		if path.Responses.Status(hr.Status) == nil {
			t.Errorf("%s: status %d is not described for /v1/chat/completions", hr.Code, hr.Status)
		}
		h := http.Header{}
		hr.SetHeaders(h, now)
		for name := range h {
			if !described[strings.ToLower(name)] {
				t.Errorf("%s: header %s is sent but not described", hr.Code, name)
			}
		}
		var limit any // as the gateway passes it: no limit object, not a null one
		if hr.Limit != nil {
			limit = hr.Limit
		}
		for schema, body := range map[string][]byte{
			"OpenAIError":    openai.ErrorBody(hr.Message, "rate_limit_error", hr.Code, "", limit),
			"AnthropicError": anthropic.ErrorBody("rate_limit_error", hr.Message, limit),
		} {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if err := d.doc.Components.Schemas[schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("%s in the %s shape does not match admin/openapi.json: %v\n%s", hr.Code, schema, err, body)
			}
		}
	}
}

// A gateway's answers under a rule with priority classes match the
// description: the class headers of an admission are described, and the
// limit object of a class's refusal, with its class, is the RefusalLimit
// of both error shapes.
func TestOpenAPI_ClassRefusalAndHeadersDescribed(t *testing.T) {
	d := loadOpenAPI(t)
	described := map[string]bool{}
	for name := range d.doc.Components.Headers {
		described[strings.ToLower(name)] = true
	}
	rules := []sluice.Rule{{Name: "calls", Kind: sluice.KindRate, Subject: "global", Limit: 2, Window: time.Hour,
		DefaultClass: "batch", Classes: []sluice.Class{{Name: "interactive", Floor: 1}, {Name: "batch", Floor: 1}}}}
	url := startGateway(t, NewMetrics(MetricsOptions{}), memstore.New(memstore.Options{}), rules, false)
	post := func(path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(`{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sk-dash")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	post("/v1/chat/completions")
	borrowed, _ := post("/v1/chat/completions")
	for _, name := range []string{gateway.HeaderClass, gateway.HeaderClassBorrowedFrom} {
		if borrowed.Header.Get(name) == "" || !described[strings.ToLower(name)] {
			t.Errorf("%s %q on a borrowed admission, described: %v", name, borrowed.Header.Get(name), described[strings.ToLower(name)])
		}
	}
	for path, schema := range map[string]string{"/v1/chat/completions": "OpenAIError", "/v1/messages": "AnthropicError"} {
		resp, body := post(path)
		var v struct {
			Error struct {
				Limit struct {
					Class map[string]any `json:"class"`
				} `json:"limit"`
			} `json:"error"`
		}
		var raw any
		if resp.StatusCode != 429 || json.Unmarshal(body, &v) != nil || json.Unmarshal(body, &raw) != nil || v.Error.Limit.Class["name"] != "batch" {
			t.Fatalf("%s: %d %s, want a refusal naming the class", path, resp.StatusCode, body)
		}
		if err := d.doc.Components.Schemas[schema].Value.VisitJSON(raw, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s: the class refusal does not match admin/openapi.json's %s: %v\n%s", path, schema, err, body)
		}
	}
}

// TestOpenAPI_EveryOperationHasAnID: client generators name their
// methods by operationId; each operation has one, unique.
func TestOpenAPI_EveryOperationHasAnID(t *testing.T) {
	d := loadOpenAPI(t)
	seen := map[string]string{}
	for path, item := range d.doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			switch other, dup := seen[op.OperationID]; {
			case op.OperationID == "":
				t.Errorf("%s has no operationId", where)
			case dup:
				t.Errorf("%s and %s share the operationId %q", where, other, op.OperationID)
			}
			seen[op.OperationID] = where
		}
	}
}
