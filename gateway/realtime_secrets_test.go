package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
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
