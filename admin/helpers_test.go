package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

const rootToken = "root-token-for-tests"

// baseRules stand for the defaults and the config file.
var baseRules = []sluice.Rule{
	{Name: "rate_per_minute", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 20, Window: time.Minute},
	{Name: "daily_token_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1_000_000, Period: sluice.PeriodDay},
	{Name: "max_in_flight", Kind: sluice.KindConcurrency, Subject: "server", Limit: 16},
}

// env is an admin API over a catalog in a temporary directory and a
// memory-store limiter whose policy is rebuilt on every change.
type env struct {
	t       *testing.T
	cat     *catalog.Catalog
	limiter *sluice.Limiter
	metrics *Metrics
	// mem is the limit store under metrics' instrumentation, which other
	// replicas may share.
	mem     *memstore.Store
	handler *Handler
	srv     *httptest.Server
	clock   *fakeClock
	changes atomic.Int64
	// reloadErr is what the Reload hook returns.
	reloadErr atomic.Pointer[error]
}

func newEnv(t *testing.T) *env {
	t.Helper()
	mem := memstore.New(memstore.Options{})
	e := newEnvOn(t, mem)
	e.mem = mem
	return e
}

// newEnvOn is newEnv with the limiter over store (a replica's view of a
// shared store).
func newEnvOn(t *testing.T, store sluice.Store) *env {
	t.Helper()
	e := &env{t: t, clock: &fakeClock{t: time.Now()}}
	cat, err := catalog.OpenSQLite(filepath.Join(t.TempDir(), "catalog.db"), catalog.Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e.cat = cat
	e.metrics = NewMetrics(MetricsOptions{Models: map[string]string{"mock-small": "mock-small", "small": "mock-small"}, Providers: []string{"mock"}})
	l, err := sluice.New(sluice.Options{Store: e.metrics.Store(store), Rules: baseRules,
		OnOverrun: e.metrics.OnOverrun, ServerID: "test", Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.limiter = l
	h, err := New(Options{
		Catalog: cat, Limiter: l, AdminToken: rootToken, Metrics: e.metrics, Now: e.clock.Now,
		OnChange: func() {
			e.changes.Add(1)
			if err := e.refresh(); err != nil {
				t.Errorf("refresh policy: %v", err)
			}
		},
		Reload: func() error {
			if p := e.reloadErr.Load(); p != nil {
				return *p
			}
			return e.refresh()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.handler = h
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) refresh() error {
	p, _, err := LoadPolicy(context.Background(), e.cat, []config.Layer{{Source: "config", Rules: baseRules}}, nil)
	if err != nil {
		return err
	}
	return e.limiter.SetPolicy(p)
}

// fakeClock is the limiter's clock: real time until a test moves it on.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// response is a decoded answer.
type response struct {
	status int
	body   map[string]any
	raw    string
}

// errorCode returns the code of an error answer.
func (r response) errorCode() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

func (r response) errorMessage() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		s, _ := e["message"].(string)
		return s
	}
	return ""
}

// do sends a request with token (none when empty) and body (a string is
// sent as is, anything else as JSON).
func (e *env) do(method, path, token string, body any) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	checkOpenAPI(e.t, req, resp, raw)
	out := response{status: resp.StatusCode, raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			e.t.Fatalf("%s %s: bad JSON %q: %v", method, path, raw, err)
		}
	}
	return out
}

// must sends a request that must answer want.
func (e *env) must(want int, method, path, token string, body any) response {
	e.t.Helper()
	r := e.do(method, path, token, body)
	if r.status != want {
		e.t.Fatalf("%s %s = %d %s, want %d", method, path, r.status, r.raw, want)
	}
	return r
}

// createKey makes a key through the catalog and returns its ID and secret.
func (e *env) createKey(workspace, user string) (id, secret string) {
	e.t.Helper()
	secret, k, err := e.cat.CreateKey(context.Background(), catalog.Key{Workspace: workspace, User: user}, "setup")
	if err != nil {
		e.t.Fatal(err)
	}
	return k.ID, secret
}

// token makes an admin API token and returns its secret.
func (e *env) token(role string, workspaces ...string) string {
	e.t.Helper()
	r := e.must(http.StatusCreated, "POST", "/admin/v1/tokens", rootToken, map[string]any{"role": role, "workspaces": workspaces, "name": role})
	return r.body["secret"].(string)
}

// snapshot is what the catalog holds, to check that a refused request
// changed nothing.
type snapshot struct{ keys, rules, overrides, tokens, audit, deniedAudit int }

func (e *env) snapshot() snapshot {
	e.t.Helper()
	ctx := context.Background()
	keys, err1 := e.cat.ListKeys(ctx, "")
	rules, err2 := e.cat.ListRules(ctx)
	overrides, err3 := e.cat.ListOverrides(ctx)
	tokens, err4 := e.cat.ListAdminTokens(ctx)
	audit, err5 := e.cat.ListAudit(ctx, catalog.AuditQuery{Limit: 10000})
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	s := snapshot{keys: len(keys), rules: len(rules), overrides: len(overrides), tokens: len(tokens), audit: len(audit)}
	for _, a := range audit {
		if a.Denied {
			s.deniedAudit++
		}
	}
	return s
}

// admit admits one request for the identity and returns the refusal, if
// any, settling at once when admitted.
func (e *env) admit(id sluice.Identity, tokens int64) error {
	e.t.Helper()
	res, err := e.limiter.Admit(context.Background(), sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: tokens}})
	if err != nil {
		return err
	}
	return res.Settle(context.Background(), sluice.Usage{InputTokens: tokens})
}

// limit finds a rule in an effective or budgets answer.
func limitIn(t *testing.T, r response, field, rule string) map[string]any {
	t.Helper()
	list, _ := r.body[field].([]any)
	for _, item := range list {
		m := item.(map[string]any)
		if m["rule"] == rule {
			return m
		}
	}
	return nil
}
