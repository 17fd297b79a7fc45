package webhook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/webhook"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// receiver is an httptest receiver that verifies each body's signature
// and answers the statuses it is given, in order, then 204.
type receiver struct {
	t        *testing.T
	verifier *standardwebhooks.Webhook
	mu       sync.Mutex
	statuses []int
	got      []received
	bad      atomic.Int64
}

type received struct {
	id    string
	event webhook.Event
	raw   json.RawMessage
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := r.verifier.Verify(body, req.Header); err != nil {
		r.bad.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev struct {
		webhook.Event
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		r.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, received{id: req.Header.Get("webhook-id"), event: ev.Event, raw: ev.Data})
	status := http.StatusNoContent
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	w.WriteHeader(status)
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func newReceiver(t *testing.T, secret string, statuses ...int) (*receiver, string) {
	t.Helper()
	v, err := standardwebhooks.NewWebhookRaw([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, verifier: v, statuses: statuses}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A delivery is signed (the receiver verifies it with a Standard Webhooks
// library), sent only to the endpoints of its type, and retried under the
// same id after a 500.
func TestDispatcher_SignsAndRetries(t *testing.T) {
	rcv, url := newReceiver(t, "s3cret-for-hooks", http.StatusInternalServerError)
	other, otherURL := newReceiver(t, "another-secret")
	var failures atomic.Int64
	d, err := webhook.New(webhook.Options{
		Endpoints: []webhook.Endpoint{{URL: url, Events: []string{"budget.warning"}, Secret: "s3cret-for-hooks"},
			{URL: otherURL, Events: []string{"budget.overrun"}, Secret: "another-secret"}},
		RetryBase: time.Millisecond, OnFailure: func(string) { failures.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	go d.Run(t.Context())
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	d.Send(webhook.Event{Type: "budget.warning", At: at, Data: map[string]any{"rule": "daily"}})
	waitFor(t, "the retry", func() bool { return len(rcv.received()) == 2 })
	got := rcv.received()
	if got[0].id == "" || got[0].id != got[1].id {
		t.Errorf("ids %q and %q, want the retry under the first's", got[0].id, got[1].id)
	}
	if got[1].event.Type != "budget.warning" || !got[1].event.At.Equal(at) || string(got[1].raw) != `{"rule":"daily"}` {
		t.Errorf("received %+v %s", got[1].event, got[1].raw)
	}
	if rcv.bad.Load() != 0 || len(other.received()) != 0 || failures.Load() != 0 {
		t.Errorf("%d bad signatures, %d at the other endpoint, %d failures", rcv.bad.Load(), len(other.received()), failures.Load())
	}
}

// A receiver that fails every attempt: the delivery is given up after
// MaxAttempts and counted.
func TestDispatcher_GivesUpAndCounts(t *testing.T) {
	rcv, url := newReceiver(t, "k", 500, 502, 503)
	var reasons []string
	var mu sync.Mutex
	d, err := webhook.New(webhook.Options{Endpoints: []webhook.Endpoint{{URL: url, Events: []string{"x"}, Secret: "k"}},
		MaxAttempts: 3, RetryBase: time.Millisecond,
		OnFailure: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	go d.Run(t.Context())
	d.Send(webhook.Event{Type: "x", At: time.Now()})
	waitFor(t, "the failure", func() bool { mu.Lock(); defer mu.Unlock(); return len(reasons) == 1 })
	if n := len(rcv.received()); n != 3 || reasons[0] != "attempts" {
		t.Errorf("%d attempts, failure %v; want 3 and attempts", n, reasons)
	}
}

// A full queue drops the event at once (Send never waits) and counts it.
func TestDispatcher_QueueOverflowCounted(t *testing.T) {
	var failures atomic.Int64
	d, err := webhook.New(webhook.Options{Endpoints: []webhook.Endpoint{{URL: "http://127.0.0.1:1", Events: []string{"x"}, Secret: "k"}},
		QueueSize: 2, OnFailure: func(r string) {
			if r == "queue_full" {
				failures.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Not running: nothing leaves the queue.
	start := time.Now()
	for range 5 {
		d.Send(webhook.Event{Type: "x", At: time.Now()})
	}
	if failures.Load() != 3 || time.Since(start) > time.Second {
		t.Errorf("%d dropped in %v, want 3 at once", failures.Load(), time.Since(start))
	}
	d.Send(webhook.Event{Type: "not-subscribed"})
	if failures.Load() != 3 {
		t.Errorf("an event no endpoint takes was counted")
	}
}

// Secrets in the Standard Webhooks form are decoded; a bad one is an
// error, as is none.
func TestNew_Secrets(t *testing.T) {
	if _, err := webhook.New(webhook.Options{Endpoints: []webhook.Endpoint{{URL: "http://x", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}}); err != nil {
		t.Errorf("whsec_ secret: %v", err)
	}
	if _, err := webhook.New(webhook.Options{Endpoints: []webhook.Endpoint{{URL: "http://x", Secret: "whsec_!!!"}}}); err == nil {
		t.Error("a whsec_ secret that is not base64 was accepted")
	}
	if _, err := webhook.New(webhook.Options{Endpoints: []webhook.Endpoint{{URL: "http://x"}}}); err == nil {
		t.Error("an endpoint without a secret was accepted")
	}
}
