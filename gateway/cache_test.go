package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/respcache"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

const cachedChat = `{"model":"mock-small","max_tokens":20,"messages":[{"role":"user","content":"the same question"}]}`

// withCache keeps mock-small's answers for ten minutes in a fresh memory
// store, with a third key in another org.
func withCache(o *gateway.Options) {
	o.Cache = respcache.NewMemory(respcache.MemoryOptions{})
	for i := range o.Models {
		if o.Models[i].Name == "mock-small" {
			o.Models[i].CacheTTL = 10 * time.Minute
		}
	}
	keys := fakeKeys{}
	for k, p := range o.Keys.(fakeKeys) {
		keys[k] = p
	}
	keys["sk-other-org"] = gateway.Principal{KeyID: "k3", Org: "o2", Workspace: "w1", User: "u1"}
	o.Keys = keys
}

func cacheHarness(t *testing.T, rules []sluice.Rule, tweak ...func(*gateway.Options)) *harness {
	t.Helper()
	return startHarness(t, setup{rules: rules, tweak: append([]func(*gateway.Options){withCache}, tweak...)})
}

func wantCache(t *testing.T, r reply, want string) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if got := r.header.Get(gateway.HeaderCache); got != want {
		t.Fatalf("%s: %q, want %q", gateway.HeaderCache, got, want)
	}
}

func TestCache_SecondIdenticalCallIsAHitChargedMinimal(t *testing.T) {
	cost := sluice.Rule{Name: "daily_cost", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricCost, Limit: 1_000_000, Period: sluice.PeriodDay}
	h := cacheHarness(t, []sluice.Rule{dailyTokens, cost})
	first := h.post("/v1/chat/completions", cachedChat, nil)
	wantCache(t, first, "miss")
	h.rec.waitUsage(t, 1)
	tokensAfterMiss, costAfterMiss := h.used("daily_tokens"), h.used("daily_cost")
	// The same request, its keys in another order and the end user named.
	second := h.post("/v1/chat/completions", `{"messages":[{"content":"the same question","role":"user"}],"user":"someone","max_tokens":20,"model":"small"}`, nil)
	wantCache(t, second, "hit")
	if !bytes.Equal(first.body, second.body) {
		t.Fatalf("the hit's body differs from the miss's:\n%s\n%s", first.body, second.body)
	}
	if n := h.mockCalls(); n != 1 {
		t.Fatalf("the provider was called %d times, want 1", n)
	}
	recs := h.rec.waitUsage(t, 2)
	if recs[0].CacheHit || !recs[1].CacheHit || recs[1].InputTokens+recs[1].OutputTokens+recs[1].Cost != 0 || recs[1].CacheSaved != recs[0].Cost || recs[0].Cost == 0 {
		t.Fatalf("records %+v: want the second a hit, with no usage, saving the first's cost", recs)
	}
	if got := h.used("daily_tokens"); got != tokensAfterMiss+1 {
		t.Fatalf("the hit charged %d tokens, want 1", got-tokensAfterMiss)
	}
	if got := h.used("daily_cost"); got != costAfterMiss+1 {
		t.Fatalf("the hit charged %d micro-dollars, want 1", got-costAfterMiss)
	}
	events := h.rec.waitEvents(t, 2)
	if events[0].Cache != "miss" || events[1].Cache != "hit" || events[1].CacheSaved != recs[0].Cost {
		t.Fatalf("events say %q, %q (saved %d)", events[0].Cache, events[1].Cache, events[1].CacheSaved)
	}
}

func TestCache_HitsChargedPerRuleSetting(t *testing.T) {
	none := dailyTokens
	none.Name, none.CacheHits = "none", sluice.CacheHitsNone
	full := dailyTokens
	full.Name, full.CacheHits = "full", sluice.CacheHitsFull
	inFlight := sluice.Rule{Name: "one_at_a_time", Kind: sluice.KindConcurrency, Subject: "workspace", Limit: 1}
	h := cacheHarness(t, []sluice.Rule{none, full, inFlight})
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	rec := h.rec.waitUsage(t, 1)[0]
	noneAfter, fullAfter := h.used("none"), h.used("full")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "hit")
	h.rec.waitUsage(t, 2)
	if got := h.used("none"); got != noneAfter {
		t.Fatalf("cache_hits none charged %d", got-noneAfter)
	}
	if got, want := h.used("full")-fullAfter, rec.InputTokens+rec.OutputTokens; got != want {
		t.Fatalf("cache_hits full charged %d, want the original %d", got, want)
	}
}

func TestCache_SpentBudgetRefusesTheHit(t *testing.T) {
	h := cacheHarness(t, []sluice.Rule{dailyTokens})
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	h.rec.waitUsage(t, 1)
	// Spend what is left of the workspace's budget.
	id := sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1"}
	left := h.effective(id, "daily_tokens").Remaining
	res, err := h.limiter.Admit(context.Background(), sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: left}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Settle(context.Background(), sluice.Usage{}); err != nil {
		t.Fatal(err)
	}
	hit := h.post("/v1/chat/completions", cachedChat, nil)
	miss := h.post("/v1/chat/completions", strings.Replace(cachedChat, "same", "other", 1), nil)
	for _, r := range []reply{hit, miss} {
		if e := openaiError(t, r); r.status != 429 || e.Error.Limit == nil || e.Error.Limit.Rule != "daily_tokens" || r.header.Get("x-should-retry") != "false" {
			t.Fatalf("status %d %s: want the spent budget's refusal", r.status, r.body)
		}
	}
	if h.mockCalls() != 1 {
		t.Fatalf("the provider was called %d times, want 1", h.mockCalls())
	}
}

func TestCache_RequestRuleCountsHits(t *testing.T) {
	rpm := sluice.Rule{Name: "two_a_minute", Kind: sluice.KindRate, Subject: "workspace+user", Limit: 2, Window: time.Minute}
	h := cacheHarness(t, []sluice.Rule{rpm})
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "hit")
	third := h.post("/v1/chat/completions", cachedChat, nil)
	if e := openaiError(t, third); third.status != 429 || e.Error.Limit == nil || e.Error.Limit.Rule != "two_a_minute" || third.header.Get("Retry-After") == "" {
		t.Fatalf("third call: status %d %s, want the rate refusal", third.status, third.body)
	}
	if h.mockCalls() != 1 {
		t.Fatalf("the provider was called %d times, want 1", h.mockCalls())
	}
}

func TestCache_SharedWithinAnOrgOnly(t *testing.T) {
	h := cacheHarness(t, nil)
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	// Another key (and workspace) of the same org shares the entry.
	wantCache(t, h.post("/v1/chat/completions", cachedChat, map[string]string{"Authorization": "Bearer sk-sluice-other"}), "hit")
	// Another org does not.
	wantCache(t, h.post("/v1/chat/completions", cachedChat, map[string]string{"Authorization": "Bearer sk-other-org"}), "miss")
	if h.mockCalls() != 2 {
		t.Fatalf("the provider was called %d times, want 2", h.mockCalls())
	}
}

func TestCache_ConcurrentIdenticalMissesCallOnce(t *testing.T) {
	h := startHarness(t, setup{mock: mockprovider.Options{Latency: 200 * time.Millisecond}, tweak: []func(*gateway.Options){withCache}})
	const n = 20
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = h.post("/v1/chat/completions", cachedChat, nil) })
	}
	wg.Wait()
	hits := 0
	for _, r := range replies {
		if r.status != 200 || !bytes.Equal(r.body, replies[0].body) {
			t.Fatalf("status %d %s", r.status, r.body)
		}
		if r.header.Get(gateway.HeaderCache) == "hit" {
			hits++
		}
	}
	if calls := h.mockCalls(); calls != 1 || hits != n-1 {
		t.Fatalf("%d identical calls at once: %d upstream calls and %d hits, want 1 and %d", n, calls, hits, n-1)
	}
}

func TestCache_StreamsReplayed(t *testing.T) {
	for _, tc := range []struct{ name, path, body, usage string }{
		{"chat", "/v1/chat/completions", `{"model":"mock-small","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "[DONE]"},
		{"messages", "/v1/messages", `{"model":"mock-small","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "message_delta"},
		{"responses", "/v1/responses", `{"model":"mock-small","stream":true,"max_output_tokens":16,"input":"hi"}`, `"usage":{`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := cacheHarness(t, []sluice.Rule{dailyTokens})
			live := h.post(tc.path, tc.body, nil)
			wantCache(t, live, "miss")
			h.rec.waitUsage(t, 1)
			replayed := h.post(tc.path, tc.body, nil)
			wantCache(t, replayed, "hit")
			if !bytes.Equal(live.body, replayed.body) || !strings.HasPrefix(replayed.header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("replayed stream (%s) differs:\n%s\n---\n%s", replayed.header.Get("Content-Type"), live.body, replayed.body)
			}
			if !bytes.Contains(replayed.body, []byte(tc.usage)) {
				t.Fatalf("the replay lacks its last event %q:\n%s", tc.usage, replayed.body)
			}
			if h.mockCalls() != 1 {
				t.Fatalf("the provider was called %d times, want 1", h.mockCalls())
			}
		})
	}
}

func TestCache_StreamUsageShownOnlyToWhoAsks(t *testing.T) {
	h := cacheHarness(t, nil)
	plain := `{"model":"mock-small","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	withUsage := `{"model":"mock-small","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	wantCache(t, h.post("/v1/chat/completions", plain, nil), "miss")
	asked := h.post("/v1/chat/completions", withUsage, nil)
	wantCache(t, asked, "hit")
	if !bytes.Contains(asked.body, []byte(`"usage":{`)) {
		t.Fatalf("a client that asked for usage got none:\n%s", asked.body)
	}
	notAsked := h.post("/v1/chat/completions", plain, nil)
	wantCache(t, notAsked, "hit")
	if bytes.Contains(notAsked.body, []byte(`"usage":{`)) {
		t.Fatalf("a client that did not ask for usage got it:\n%s", notAsked.body)
	}
}

func TestCache_CacheControlBypasses(t *testing.T) {
	h := cacheHarness(t, nil)
	// no-store: answered, not kept.
	wantCache(t, h.post("/v1/chat/completions", cachedChat, map[string]string{"Cache-Control": "no-store"}), "miss")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	// no-cache: not read (the provider is called), but kept.
	wantCache(t, h.post("/v1/chat/completions", cachedChat, map[string]string{"Cache-Control": "no-cache"}), "bypass")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "hit")
	if h.mockCalls() != 3 {
		t.Fatalf("the provider was called %d times, want 3", h.mockCalls())
	}
}

func TestCache_EntriesExpire(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	h := startHarness(t, setup{clock: clock, tweak: []func(*gateway.Options){withCache}})
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	clock.Advance(10*time.Minute - time.Second)
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "hit")
	clock.Advance(time.Second)
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	if h.mockCalls() != 2 {
		t.Fatalf("the provider was called %d times, want 2", h.mockCalls())
	}
}

func TestCache_SizeCap(t *testing.T) {
	h := cacheHarness(t, nil, func(o *gateway.Options) { o.CacheMaxEntryBytes = 64 })
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	if h.mockCalls() != 2 {
		t.Fatalf("an answer over the size cap was kept: %d provider calls", h.mockCalls())
	}
}

func TestCache_EveryRoute(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"mock-small","max_output_tokens":16,"input":"hi"}`},
		{"/v1/messages", `{"model":"mock-small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/embeddings", `{"model":"mock-small","input":"hi"}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			h := cacheHarness(t, nil)
			first := h.post(tc.path, tc.body, nil)
			wantCache(t, first, "miss")
			second := h.post(tc.path, tc.body, nil)
			wantCache(t, second, "hit")
			if !bytes.Equal(first.body, second.body) || h.mockCalls() != 1 {
				t.Fatalf("%d provider calls; bodies\n%s\n%s", h.mockCalls(), first.body, second.body)
			}
		})
	}
}

func TestCache_ModelWithoutTTLKeepsNothing(t *testing.T) {
	h := cacheHarness(t, nil)
	body := strings.Replace(cachedChat, "mock-small", "mock-large", 1)
	for range 2 {
		if r := h.post("/v1/chat/completions", body, nil); r.status != 200 || r.header.Get(gateway.HeaderCache) != "" {
			t.Fatalf("status %d, %s %q", r.status, gateway.HeaderCache, r.header.Get(gateway.HeaderCache))
		}
	}
	if h.mockCalls() != 2 {
		t.Fatalf("the provider was called %d times, want 2", h.mockCalls())
	}
}

// sharedRedisCache is a Redis cache of the test's own, for replicas to
// share.
func sharedRedisCache(t *testing.T) func(*gateway.Options) {
	opt, err := rueidis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	shared := respcache.NewRedis(client, respcache.RedisOptions{Prefix: "sluice-test:" + rand.Text() + ":"})
	return func(o *gateway.Options) { o.Cache = shared }
}

func TestCache_ReplicasShareRedis(t *testing.T) {
	inRedis := sharedRedisCache(t)
	// Two replicas, each with its own provider: the second is never called.
	a := cacheHarness(t, nil, inRedis)
	b := cacheHarness(t, nil, inRedis)
	first := a.post("/v1/chat/completions", cachedChat, nil)
	wantCache(t, first, "miss")
	second := b.post("/v1/chat/completions", cachedChat, nil)
	wantCache(t, second, "hit")
	if !bytes.Equal(first.body, second.body) || a.mockCalls() != 1 || b.mockCalls() != 0 {
		t.Fatalf("provider calls %d and %d, want 1 and 0", a.mockCalls(), b.mockCalls())
	}
}

// BenchmarkGateway_ChatCacheHit is BenchmarkGateway_Chat with mock-small's
// answers kept in memory: after the first call, every call is a hit,
// admitted and settled by the same rules, with no provider call.
func BenchmarkGateway_ChatCacheHit(b *testing.B) {
	h := benchChat(b, withCache)
	if h.mockCalls() != 1 {
		b.Fatalf("the provider was called %d times, want 1", h.mockCalls())
	}
}

func TestCache_ClampedAnswerNotKept(t *testing.T) {
	h := cacheHarness(t, []sluice.Rule{clampRule(3000, 10)})
	body := `{"model":"mock-small","max_tokens":4000,"messages":[{"role":"user","content":"Tell me. [mock tokens=5]"}]}`
	for range 2 {
		r := h.post("/v1/chat/completions", body, nil)
		wantCache(t, r, "miss")
		if r.header.Get("X-Sluice-Output-Cap") == "" {
			t.Fatalf("the call was not clamped: %s", r.body)
		}
	}
	if h.mockCalls() != 2 {
		t.Fatalf("a clamped answer was kept: %d provider calls", h.mockCalls())
	}
}

// Identical misses at once on two replicas sharing Redis make one upstream
// call: the replica that takes the key's lock in Redis calls the provider.
func TestCache_ConcurrentMissesOnTwoReplicas(t *testing.T) {
	inRedis := sharedRedisCache(t)
	slow := mockprovider.Options{Latency: 200 * time.Millisecond}
	replicas := []*harness{
		startHarness(t, setup{mock: slow, tweak: []func(*gateway.Options){withCache, inRedis}}),
		startHarness(t, setup{mock: slow, tweak: []func(*gateway.Options){withCache, inRedis}}),
	}
	const n = 20
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { status[i] = replicas[i%2].post("/v1/chat/completions", cachedChat, nil).status })
	}
	wg.Wait()
	for i, s := range status {
		if s != 200 {
			t.Fatalf("call %d: status %d", i, s)
		}
	}
	if a, b := replicas[0].mockCalls(), replicas[1].mockCalls(); a+b != 1 {
		t.Fatalf("%d identical calls over two replicas: %d and %d upstream calls, want one in all", n, a, b)
	}
}

func TestCache_PurgeAnOrgsEntries(t *testing.T) {
	h := cacheHarness(t, nil)
	other := map[string]string{"Authorization": "Bearer sk-other-org"}
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, other), "miss")
	n, err := h.gw.PurgeCache(context.Background(), "o1", "")
	if err != nil || n != 1 {
		t.Fatalf("purged %d (%v), want o1's one entry", n, err)
	}
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, other), "hit")
	if n, err := h.gw.PurgeCache(context.Background(), "", "mock-small"); err != nil || n != 2 {
		t.Fatalf("purged %d (%v) of mock-small's entries, want 2", n, err)
	}
	if _, err := h.gw.PurgeCache(context.Background(), "", ""); err == nil {
		t.Fatal("a purge of every entry of every org was not refused")
	}
}

func TestCache_KeyNotAllowedTheModelIsRefusedNotServed(t *testing.T) {
	h := cacheHarness(t, nil, func(o *gateway.Options) {
		for i := range o.Models {
			o.Models[i].CacheTTL = 10 * time.Minute
		}
	})
	large := strings.Replace(cachedChat, "mock-small", "mock-large", 1)
	wantCache(t, h.post("/v1/chat/completions", large, nil), "miss")
	// sk-sluice-other, of the same org, may call mock-small only.
	r := h.post("/v1/chat/completions", large, map[string]string{"Authorization": "Bearer sk-sluice-other"})
	if r.status != 403 || r.header.Get(gateway.HeaderCache) == "hit" {
		t.Fatalf("status %d, %s %q: %s", r.status, gateway.HeaderCache, r.header.Get(gateway.HeaderCache), r.body)
	}
}

// A restart of the embedded default (its counters in SQLite, the cache in
// the process's memory) starts cold, never wrong: the first identical call
// after it is a miss the provider answers, charged as a miss, and the next
// is a hit again.
func TestCache_RestartIsColdNeverWrong(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	run := func(wantFirst string) int64 {
		store, err := sqlitestore.Open(sqlitestore.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		h := startHarness(t, setup{store: store, rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){withCache}})
		first := h.post("/v1/chat/completions", cachedChat, nil)
		wantCache(t, first, wantFirst)
		wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "hit")
		h.rec.waitEvents(t, 2)
		if n := h.mockCalls(); n != 1 {
			t.Fatalf("the provider was called %d times, want once (the cold miss)", n)
		}
		return h.used("daily_tokens")
	}
	before := run("miss")
	// The restarted process: same counters, empty cache.
	after := run("miss")
	if after <= before {
		t.Fatalf("daily_tokens %d after the restart's miss, want more than %d: the miss is charged", after, before)
	}
}

// A key set to keep out of the response cache neither reads nor writes it:
// its identical calls each go to the provider, marked bypass, and leave
// nothing another key of the org could hit.
func TestCache_KeySettingBypasses(t *testing.T) {
	t.Parallel()
	h := cacheHarness(t, []sluice.Rule{dailyTokens}, func(o *gateway.Options) {
		keys := o.Keys.(fakeKeys)
		keys["sk-no-cache"] = gateway.Principal{KeyID: "k4", Org: "o1", Workspace: "w1", User: "u1", NoCache: true}
	})
	noCache := map[string]string{"Authorization": "Bearer sk-no-cache"}
	wantCache(t, h.post("/v1/chat/completions", cachedChat, noCache), "bypass")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, noCache), "bypass")
	wantCache(t, h.post("/v1/chat/completions", cachedChat, nil), "miss")
	if n := h.mockCalls(); n != 3 {
		t.Fatalf("the provider was called %d times, want 3: nothing kept for or read by the key", n)
	}
}
