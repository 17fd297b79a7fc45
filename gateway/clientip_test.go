package gateway_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// TestGateway_TrustedProxies checks the ip subject behind a trusted proxy:
// X-Forwarded-For is read right to left and the first address that is not
// a trusted proxy is the client; what a client writes before the trusted
// hops is not believed.
func TestGateway_TrustedProxies(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{{Name: "per_ip", Kind: sluice.KindBudget, Subject: "ip", Limit: 100, Period: sluice.PeriodDay}}
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}
	h := newHarness(t, rules, func(o *gateway.Options) { o.TrustedProxies = trusted })
	body := `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	for _, xff := range []string{
		"203.0.113.7",                     // one trusted hop: the peer
		"198.51.100.1, 203.0.113.7",       // the client's own entry is not believed
		"203.0.113.7, 10.1.2.3",           // two trusted hops
		"203.0.113.7 , 10.1.2.3,10.4.5.6", // spaces and three hops
		"::ffff:203.0.113.7, 10.1.2.3",    // a mapped IPv6 address is the IPv4 one
		"garbage, 203.0.113.7, 10.1.2.3",  // stops before reaching the garbage
		"",                                // no header: the peer (127.0.0.1)
		"not-an-ip",                       // a broken chain counts on the last trusted hop
		"10.1.2.3, 10.4.5.6",              // only proxies: the farthest of them
	} {
		headers := map[string]string{}
		if xff != "" {
			headers["X-Forwarded-For"] = xff
		}
		if r := h.post("/v1/chat/completions", body, headers); r.status != 200 {
			t.Fatalf("X-Forwarded-For %q: %d %s", xff, r.status, r.body)
		}
	}
	for ip, want := range map[string]int64{"203.0.113.7": 6, "198.51.100.1": 0, "127.0.0.1": 2, "10.1.2.3": 1, "10.4.5.6": 0} {
		if got := h.usedBy(sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1", IP: ip}, "per_ip"); got != want {
			t.Errorf("ip %s charged %d requests, want %d", ip, got, want)
		}
	}
}

// TestGateway_UntrustedPeerForwardedForIgnored checks that without trusted
// proxies X-Forwarded-For changes nothing.
func TestGateway_UntrustedPeerForwardedForIgnored(t *testing.T) {
	t.Parallel()
	rules := []sluice.Rule{{Name: "per_ip", Kind: sluice.KindBudget, Subject: "ip", Limit: 100, Period: sluice.PeriodDay}}
	h := newHarness(t, rules, func(o *gateway.Options) { o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	body := `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	if r := h.post("/v1/chat/completions", body, map[string]string{"X-Forwarded-For": "203.0.113.7"}); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if got := h.usedBy(sluice.Identity{Org: "o1", Workspace: "w1", User: "u1", Key: "k1", IP: "127.0.0.1"}, "per_ip"); got != 1 {
		t.Errorf("peer charged %d, want 1", got)
	}
}

// TestGateway_PreAuthLimit checks the per-address limit checked before the
// key: requests with a bad key count too, the refusal is a rate limit with
// a Retry-After in the route's error shape, and another client address
// behind a trusted proxy has its own count.
func TestGateway_PreAuthLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(o *gateway.Options) {
		o.PreAuthPerMinute = 3
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	body := `{"model":"mock-small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	from := func(ip string, headers map[string]string) map[string]string {
		out := map[string]string{"X-Forwarded-For": ip}
		for k, v := range headers {
			out[k] = v
		}
		return out
	}
	if r := h.post("/v1/chat/completions", body, from("203.0.113.7", map[string]string{"Authorization": "Bearer sk-sluice-wrong"})); r.status != 401 {
		t.Fatalf("bad key: %d %s", r.status, r.body)
	}
	for i := range 2 {
		if r := h.post("/v1/chat/completions", body, from("203.0.113.7", nil)); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	r := h.post("/v1/messages", body, from("203.0.113.7", nil))
	if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), gateway.PreAuthRule) ||
		!strings.Contains(string(r.body), `"type":"error"`) {
		t.Fatalf("fourth request from one address: %d %v %s", r.status, r.header, r.body)
	}
	if r := h.post("/v1/chat/completions", body, from("198.51.100.1", nil)); r.status != 200 {
		t.Fatalf("another address: %d %s", r.status, r.body)
	}
	if n := h.mockCalls(); n != 3 {
		t.Errorf("the mock served %d calls, want 3", n)
	}
}
