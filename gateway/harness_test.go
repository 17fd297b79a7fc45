package gateway_test

import (
	"context"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/store/memstore"
)

// testKey is the API key every harness accepts, for workspace w1, user u1.
const testKey = "sk-sluice-test-key"

type fakeKeys map[string]gateway.Principal

func (k fakeKeys) Authenticate(_ context.Context, secret string) (gateway.Principal, error) {
	p, ok := k[secret]
	if !ok {
		return gateway.Principal{}, gateway.ErrBadKey
	}
	return p, nil
}

// recorder keeps the usage records and events of a gateway.
type recorder struct {
	mu      sync.Mutex
	records []gateway.UsageRecord
	events  []gateway.Event
}

func (r *recorder) RecordUsage(u gateway.UsageRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, u)
}

func (r *recorder) observe(e gateway.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) usage() []gateway.UsageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gateway.UsageRecord(nil), r.records...)
}

// waitUsage waits until n usage records arrived (streams settle after the
// handler returns).
func (r *recorder) waitUsage(t *testing.T, n int) []gateway.UsageRecord {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if u := r.usage(); len(u) >= n {
			return u
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("got %d usage records, want %d", len(r.usage()), n)
	return nil
}

type harness struct {
	t       *testing.T
	mock    *mockprovider.Server
	limiter *sluice.Limiter
	store   sluice.Store
	rec     *recorder
	url     string
	gw      *gateway.Gateway
}

var testModels = []gateway.Model{
	{Name: "mock-small", Provider: "mock", Price: sluice.Price{Input: 150_000, Output: 600_000}, MaxOutputTokens: 4096, ContextWindow: 128_000, Aliases: []string{"small"}},
	{Name: "mock-large", Provider: "mock", Price: sluice.Price{Input: 3_000_000, CachedInput: 300_000, Output: 15_000_000}, MaxOutputTokens: 8192, ContextWindow: 200_000},
}

// newHarness starts the mock provider and a gateway in front of it with
// rules, on loopback ports.
func newHarness(t *testing.T, rules []sluice.Rule, tweak ...func(*gateway.Options)) *harness {
	t.Helper()
	h := &harness{t: t, mock: mockprovider.New(mockprovider.Options{}), rec: &recorder{}}
	upstream := httptest.NewServer(h.mock)
	t.Cleanup(upstream.Close)
	h.store = memstore.New(memstore.Options{})
	l, err := sluice.New(sluice.Options{Store: h.store, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	h.limiter = l
	opts := gateway.Options{
		Limiter: l,
		Keys: fakeKeys{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1"},
			"sk-sluice-other": {KeyID: "k2", Org: "o1", Workspace: "w2", User: "u2", AllowedModels: []string{"mock-small"}}},
		Usage:     h.rec,
		Observer:  h.rec.observe,
		Models:    testModels,
		Providers: []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: upstream.URL}},
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
	for _, f := range tweak {
		f(&opts)
	}
	g, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.gw = g
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	h.url = "http://" + ln.Addr().String()
	return h
}

// used returns what rule has counted for the harness's key.
func (h *harness) used(rule string) int64 {
	h.t.Helper()
	eff, err := h.limiter.Effective(context.Background(), sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1"})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range eff {
		if e.Rule == rule {
			return e.Used
		}
	}
	h.t.Fatalf("no rule %q", rule)
	return 0
}
