package gateway_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// lockedBuffer is a log sink safe to read while the gateway writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A provider whose attempts fail three times in a row is down: logged
// once with its cause and reported; its next good answer brings it back,
// logged and reported once too.
func TestGateway_ProviderDownAndBack(t *testing.T) {
	t.Parallel()
	mock := mockprovider.New(mockprovider.Options{})
	var failing atomic.Bool
	failing.Store(true)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	var logs lockedBuffer
	var mu sync.Mutex
	var changes []gateway.DependencyChange
	h := newHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		// No circuit opens within the test's failures (circuit_test.go
		// tests circuits): this is the provider's health alone.
		o.Providers = []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: up.URL, CircuitFailures: 100}}
		o.UpstreamRetries = 1 // two attempts per call
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		o.OnDependency = func(c gateway.DependencyChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() }
	})
	body := `{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for range 3 { // six failed attempts: down once
		if r := h.post("/v1/chat/completions", body, nil); r.status != 503 {
			t.Fatalf("status %d, want the provider's 503 passed on", r.status)
		}
	}
	failing.Store(false)
	for range 2 {
		if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}
	h.rec.waitEvents(t, 5)
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0].Up || changes[0].Provider != "mock" || changes[0].Dependency != "provider" ||
		changes[0].Err == nil || !strings.Contains(changes[0].Err.Error(), "503") || !changes[1].Up {
		t.Fatalf("changes %+v, want mock down (with its 503) then back", changes)
	}
	out := logs.String()
	if strings.Count(out, "provider down") != 1 || strings.Count(out, "provider back") != 1 {
		t.Errorf("log:\n%s\nwant one down line and one back line", out)
	}
}

// The event of an admitted call names the budget warnings its admission
// reached and the shadow rules that would have refused it; the log line
// and the events are built from those.
func TestGateway_EventCarriesWarningsAndShadowed(t *testing.T) {
	t.Parallel()
	warned := sluice.Rule{Name: "warned", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricRequests,
		Limit: 10, Period: sluice.PeriodDay, WarnAt: []float64{0.1}}
	shadow := sluice.Rule{Name: "try_strict", Kind: sluice.KindRate, Subject: "workspace", Metric: sluice.MetricRequests,
		Limit: 1, Window: time.Hour, Mode: sluice.ModeShadow}
	h := newHarness(t, []sluice.Rule{warned, shadow})
	body := `{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for range 2 {
		if r := h.post("/v1/chat/completions", body, map[string]string{"X-Sluice-Tags": "team-a, batch"}); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	evs := h.rec.waitEvents(t, 2)
	first, second := evs[0], evs[1]
	if len(first.BudgetWarnings) != 1 || first.BudgetWarnings[0].Rule != "warned" || first.BudgetWarnings[0].Threshold != 0.1 ||
		first.BudgetWarnings[0].ResetAt.IsZero() {
		t.Errorf("first event's warnings %+v", first.BudgetWarnings)
	}
	if len(first.Shadowed) != 0 || len(second.Shadowed) != 1 || second.Shadowed[0] != "try_strict" {
		t.Errorf("shadow refusals %v then %v, want none then try_strict", first.Shadowed, second.Shadowed)
	}
	if strings.Join(first.Tags, ",") != "team-a,batch" {
		t.Errorf("tags %v", first.Tags)
	}
}
