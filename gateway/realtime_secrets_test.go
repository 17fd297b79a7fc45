package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// clientSecret is the answer of POST /v1/realtime/client_secrets.
type clientSecret struct {
	Value     string `json:"value"`
	ExpiresAt int64  `json:"expires_at"`
	Session   struct {
		Model string `json:"model"`
	} `json:"session"`
	SluiceSession struct {
		ID string `json:"id"`
	} `json:"sluice_session"`
}

func (h *harness) mintSecret(t *testing.T, body string, headers map[string]string) (reply, clientSecret) {
	t.Helper()
	r := h.post("/v1/realtime/client_secrets", body, headers)
	var cs clientSecret
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &cs); err != nil {
			t.Fatalf("%s: %v", r.body, err)
		}
	}
	return r, cs
}

func TestRealtime_ClientSecretIsTheSessionsGate(t *testing.T) {
	clock := clocktest.New(time.Now())
	h := sessionHarness(t, nil, func(o *gateway.Options) { o.Clock = clock })
	r, cs := h.mintSecret(t, `{"expires_after":{"anchor":"created_at","seconds":60},"session":{"type":"realtime","model":"gpt-realtime"}}`,
		map[string]string{"Idempotency-Key": "interview-7"})
	if r.status != 200 || !strings.HasPrefix(cs.Value, "ek_sluice_") || cs.Session.Model != "mock-small" || cs.SluiceSession.ID == "" {
		t.Fatalf("mint: %d %s", r.status, r.body)
	}
	if _, again := h.mintSecret(t, `{}`, map[string]string{"Idempotency-Key": "interview-7"}); again.SluiceSession.ID != cs.SluiceSession.ID {
		t.Fatalf("the same Idempotency-Key minted session %s, then %s", cs.SluiceSession.ID, again.SluiceSession.ID)
	}
	// A browser connects with the secret alone, as a subprotocol.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/realtime?model=mock-small",
		&websocket.DialOptions{Subprotocols: []string{"realtime", "openai-insecure-api-key." + cs.Value}})
	if err != nil {
		t.Fatalf("connect with the secret: %v %v", err, resp)
	}
	c := &liveClient{t: t, conn: conn}
	t.Cleanup(func() { conn.CloseNow() })
	c.next("session.created")
	c.send(`{"type":"response.create","response":{"max_output_tokens":3}}`)
	c.next("response.done")
	_, s := h.sessionCall("GET", "/v1/sessions/"+cs.SluiceSession.ID, "", nil)
	if s.Used.Turns != 1 || s.Used.Tokens == 0 {
		t.Fatalf("the secret's session used %+v, want the response charged to it", s.Used)
	}

	for _, tc := range []struct {
		name, secret string
		status       int
	}{
		{"forged", cs.Value[:len(cs.Value)-2] + "xx", 401},
		{"another session's header", cs.Value, 400},
	} {
		hdr := map[string]string{"Authorization": "Bearer " + tc.secret}
		if tc.status == 400 {
			_, other := h.sessionCall("POST", "/v1/sessions", "", nil)
			hdr[gateway.HeaderSession] = other.ID
		}
		if _, resp, err := h.dialLive(t, "mock-small", hdr); err == nil || resp == nil || resp.StatusCode != tc.status {
			t.Errorf("%s: %v %v, want %d", tc.name, err, resp, tc.status)
		}
	}
	clock.Advance(61 * time.Second)
	if _, resp, err := h.dialLive(t, "mock-small", map[string]string{"Authorization": "Bearer " + cs.Value}); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("an expired secret: %v %v, want 401", err, resp)
	}
	if r, _ := h.mintSecret(t, `{"expires_after":{"seconds":5}}`, nil); r.status != 400 {
		t.Fatalf("a 5 s secret: %d %s, want 400", r.status, r.body)
	}
	if r, _ := h.mintSecret(t, `{}`, map[string]string{"Authorization": "Bearer nope"}); r.status != http.StatusUnauthorized {
		t.Fatalf("a mint with a bad key: %d", r.status)
	}
}

// revocableKeys is a key store whose keys can be revoked while the
// gateway runs.
type revocableKeys struct {
	mu      sync.Mutex
	keys    map[string]gateway.Principal
	revoked map[string]bool
}

func (k *revocableKeys) Authenticate(_ context.Context, secret string) (gateway.Principal, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.keys[secret]
	if !ok || k.revoked[secret] {
		return gateway.Principal{}, gateway.ErrBadKey
	}
	return p, nil
}

func (k *revocableKeys) revoke(secret string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.revoked[secret] = true
}

// A client secret tells its holder nothing: not the key it was minted
// with, nor its id, org, workspace, user or session; and a secret sealed
// under another gateway's key is refused.
func TestRealtime_ClientSecretIsOpaque(t *testing.T) {
	h := sessionHarness(t, nil, func(o *gateway.Options) { o.LiveSecretKey = []byte("the replicas' shared secret key") })
	r, cs := h.mintSecret(t, `{}`, nil)
	if r.status != 200 {
		t.Fatalf("mint: %d %s", r.status, r.body)
	}
	sealed, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(cs.Value, "ek_sluice_"))
	if err != nil {
		t.Fatalf("the secret %q is not base64url after its prefix: %v", cs.Value, err)
	}
	for _, clear := range []string{testKey, `"k1"`, `"o1"`, `"w1"`, `"u1"`, cs.SluiceSession.ID, "session", "who"} {
		if bytes.Contains(sealed, []byte(clear)) || strings.Contains(cs.Value, base64.RawURLEncoding.EncodeToString([]byte(clear))) {
			t.Errorf("the secret shows %q", clear)
		}
	}
	if _, resp, err := h.dialLive(t, "mock-small", map[string]string{"Authorization": "Bearer " + cs.Value}); err != nil {
		t.Fatalf("connect with the secret: %v %v", err, resp)
	}
	other := sessionHarness(t, nil, func(o *gateway.Options) { o.LiveSecretKey = []byte("another deployment's key") })
	if _, resp, err := other.dialLive(t, "mock-small", map[string]string{"Authorization": "Bearer " + cs.Value}); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("another deployment took the secret: %v %v, want 401", err, resp)
	}
}

// A key revoked after a mint ends its secrets at once: the connection is
// refused, though the secret has not expired.
func TestRealtime_ClientSecretOfARevokedKeyIsRefused(t *testing.T) {
	keys := &revocableKeys{keys: map[string]gateway.Principal{testKey: {KeyID: "k1", Org: "o1", Workspace: "w1", User: "u1"}}, revoked: map[string]bool{}}
	h := sessionHarness(t, nil, func(o *gateway.Options) { o.Keys = keys })
	_, before := h.mintSecret(t, `{}`, nil)
	_, still := h.mintSecret(t, `{}`, nil)
	if _, resp, err := h.dialLive(t, "mock-small", map[string]string{"Authorization": "Bearer " + before.Value}); err != nil {
		t.Fatalf("connect with the secret of a valid key: %v %v", err, resp)
	}
	keys.revoke(testKey)
	_, resp, err := h.dialLive(t, "mock-small", map[string]string{"Authorization": "Bearer " + still.Value})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("a secret of a revoked key: %v %v, want 401", err, resp)
	}
	if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), "no longer valid") {
		t.Fatalf("refusal %s, want it to say the key is no longer valid", body)
	}
}
