package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/internal/mockprovider"
)

// catalogKeys adapts the catalog to the gateway, as sluice serve does.
type catalogKeys struct{ cat *catalog.Catalog }

func (k catalogKeys) Authenticate(ctx context.Context, secret string) (gateway.Principal, error) {
	key, err := k.cat.Authenticate(ctx, secret)
	if errors.Is(err, catalog.ErrUnknownKey) || errors.Is(err, catalog.ErrRevokedKey) || errors.Is(err, catalog.ErrExpiredKey) {
		return gateway.Principal{}, gateway.ErrBadKey
	}
	if err != nil {
		return gateway.Principal{}, err
	}
	return gateway.Principal{KeyID: key.ID, Org: key.Org, Workspace: key.Workspace, User: key.User}, nil
}

// TestLogs_OneJSONLinePerRequestAndNoSecret runs real requests through the
// gateway with the production logger and checks what was written.
func TestLogs_OneJSONLinePerRequestAndNoSecret(t *testing.T) {
	e := newEnv(t)
	_, secret := e.createKey("acme", "ada")
	e.must(http.StatusOK, "PUT", "/admin/v1/overrides", rootToken, map[string]any{
		"rule": "rate_per_minute", "attribute": "workspace", "value": "acme", "limit": 2})
	upstream := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	t.Cleanup(upstream.Close)
	var out syncbuf.Buffer
	log := NewLogger(&out, true)
	g, err := gateway.New(gateway.Options{
		Limiter: e.limiter, Keys: catalogKeys{e.cat}, Logger: log,
		Observer: func(ev gateway.Event) {
			e.metrics.Observe(ev)
			LogRequest(log, ev)
		},
		Models:    []gateway.Model{{Name: "mock-small", Provider: "mock", MaxOutputTokens: 256, Price: sluice.Price{Input: 150_000, Output: 600_000}}},
		Providers: []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: upstream.URL}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	call := func(key string) int {
		body := `{"model":"mock-small","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	forged := secret[:len(secret)-4] + "AAAA"
	statuses := []int{call(secret), call(secret), call(secret), call(forged), call("sk-not-even-shaped")}
	if want := []int{200, 200, 429, 401, 401}; !equalInts(statuses, want) {
		t.Fatalf("statuses = %v, want %v", statuses, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), `"msg":"request"`) < 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	logs := out.String()
	var outcomes []string
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		if line["msg"] != "request" {
			continue
		}
		if _, ok := line["decision_ms"].(float64); !ok {
			t.Errorf("no decision time: %v", line)
		}
		outcomes = append(outcomes, line["outcome"].(string))
	}
	// An admitted call is logged once it is settled, after its answer:
	// lines need not come in request order.
	slices.Sort(outcomes)
	if got := strings.Join(outcomes, ","); got != "admitted,admitted,rate_limited,unauthorized,unauthorized" {
		t.Fatalf("logged outcomes = %s\n%s", got, logs)
	}
	for _, s := range []string{secret, secret[len(secret)-20:], forged, "sk-not-even-shaped"} {
		if strings.Contains(logs, s) {
			t.Fatalf("the log holds a secret %q:\n%s", s, logs)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRedact(t *testing.T) {
	var out bytes.Buffer
	log := NewLogger(&out, true)
	log.Info("x", "authorization", "Bearer abc", "api_key", "plain", "upstream_token", "t",
		"err", errors.New("upstream said: bad key sk-sluice-abcdefgh2345-xyz123456789"),
		"note", "Authorization: Bearer sluice-admin-0123456789abcdef", "count", 3,
		"store", errors.New(`dial redis://:hunter2pw@10.0.0.5:6379/0: refused`),
		"db", "postgres://sluice:pgpass99@db:5432/x and redis://u:rpw77@h/0")
	s := out.String()
	for _, leak := range []string{"abc", "plain", `"t"`, "abcdefgh2345", "0123456789abcdef", "hunter2pw", "pgpass99", "rpw77"} {
		if strings.Contains(s, leak) {
			t.Errorf("%q leaked: %s", leak, s)
		}
	}
	if !strings.Contains(s, `"count":3`) || !strings.Contains(s, "upstream said: bad key [redacted]") ||
		!strings.Contains(s, "redis://:[redacted]@10.0.0.5:6379/0") || !strings.Contains(s, "postgres://sluice:[redacted]@db:5432/x") {
		t.Errorf("redaction went too far: %s", s)
	}
	var _ slog.Attr = Redact(nil, slog.Int("n", 1))
}

// A request whose identity headers were ignored (a turn id from a key not
// allowed turns, say) says which in its log line.
func TestLogRequest_NamesIgnoredHeaders(t *testing.T) {
	var buf bytes.Buffer
	LogRequest(slog.New(slog.NewTextHandler(&buf, nil)), event.Event{RequestID: "r1", Route: "chat", Outcome: "admitted",
		IgnoredIdentity: []string{event.HeaderTurn}})
	if !strings.Contains(buf.String(), "ignored_headers=X-Sluice-Turn") {
		t.Fatalf("log line %q does not name the ignored header", buf.String())
	}
}

// maySecret never says no where secretPattern matches: checked on the
// patterns' own shapes, in every case, and on the fuzzer's strings.
func FuzzMaySecret(f *testing.F) {
	for _, s := range []string{"sk-abcdefgh12", "SK-ABCDEFGH12", "x Bearer tok", "BEARER\tx", "sluice-admin-0123456789", "SLUICE-ADM-abcdefghij",
		"ſk-abcdefgh12", "sK-abcdefghij", "plain", "req_694a4596c4d3afb9", "bearer", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if secretPattern.MatchString(s) && !maySecret(s) {
			t.Fatalf("%q matches the secret pattern but maySecret says no", s)
		}
	})
}
