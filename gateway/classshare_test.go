package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// modelCalls is a concurrency cap of 2 split between two classes, floors 1
// and 1. The test key names no class: every call is in the rule's
// default class, batch, whose share is 1 and which may borrow
// interactive's idle one.
var modelCalls = sluice.Rule{Name: "model-calls", Kind: sluice.KindConcurrency, Subject: "global", Limit: 2,
	DefaultClass: "batch", Classes: []sluice.Class{{Name: "interactive", Floor: 1}, {Name: "batch", Floor: 1}}}

// holdStream opens a streamed chat call, reads its headers and first
// event, and keeps it in flight until the test ends.
func holdStream(t *testing.T, h *harness) http.Header {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"mock-small","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"hold the slot"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
	})
	if resp.StatusCode != 200 {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
		t.Fatalf("stream: no first byte: %v", err)
	}
	return resp.Header
}

// classOf decodes the class object of a refusal's limit object.
func classOf(t *testing.T, r reply) (limit int64, class map[string]any) {
	t.Helper()
	var body struct {
		Error struct {
			Limit struct {
				Limit int64          `json:"limit"`
				Class map[string]any `json:"class"`
			} `json:"limit"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return body.Error.Limit.Limit, body.Error.Limit.Class
}

// Issue 20: a decision by a class rule explains itself. An admission's
// headers name its class and, when its own share was full, the class whose
// idle share admitted it; a refusal's limit object names the class, its
// floor, its share and the capacity, in both API shapes, waited for or
// not; the events carry the classes for the metrics and the log.
func TestGateway_ClassRuleExplainsItsDecisions(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{rules: []sluice.Rule{modelCalls}, mock: mockOptions(10 * time.Millisecond)})

	own := holdStream(t, h)
	if got, want := own.Get(gateway.HeaderClass), "batch; rule=model-calls; floor=1; share=1; capacity=2"; got != want {
		t.Errorf("first call: %s %q, want %q", gateway.HeaderClass, got, want)
	}
	if got := own.Values(gateway.HeaderClassBorrowedFrom); len(got) != 0 {
		t.Errorf("first call, admitted by its own share: %s %q", gateway.HeaderClassBorrowedFrom, got)
	}
	borrowed := holdStream(t, h)
	if got, want := borrowed.Get(gateway.HeaderClassBorrowedFrom), "interactive; rule=model-calls"; got != want {
		t.Errorf("second call, its share full: %s %q, want %q", gateway.HeaderClassBorrowedFrom, got, want)
	}
	if got := borrowed.Get(gateway.HeaderClass); !strings.HasPrefix(got, "batch; rule=model-calls;") {
		t.Errorf("second call: %s %q", gateway.HeaderClass, got)
	}

	want := map[string]any{"name": "batch", "floor": 1.0, "share": 1.0, "capacity": 2.0}
	refusals := []struct {
		name, path string
		headers    map[string]string
	}{
		{"OpenAI", "/v1/chat/completions", nil},
		{"Anthropic", "/v1/messages", nil},
		{"AfterAWait", "/v1/chat/completions", map[string]string{gateway.HeaderMaxWait: "0.1"}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			r := h.post(tc.path, smallChat, tc.headers)
			if r.status != 429 {
				t.Fatalf("status %d with both shares in use: %s", r.status, r.body)
			}
			if tc.path == "/v1/messages" {
				anthropicError(t, r)
			} else if e := openaiError(t, r); deref(e.Error.Code) != "concurrency_limit_exceeded" {
				t.Errorf("code %q", deref(e.Error.Code))
			}
			limit, class := classOf(t, r)
			if len(class) != len(want) {
				t.Errorf("limit.class %v, want %v: %s", class, want, r.body)
			}
			for k, v := range want {
				if class[k] != v {
					t.Errorf("limit.class.%s = %v, want %v: %s", k, class[k], v, r.body)
				}
			}
			if limit != 1 {
				t.Errorf("limit.limit %d, want the class's share, 1", limit)
			}
			if !strings.Contains(string(r.body), `for class \"batch\" (floor 1, share 1 of 2`) {
				t.Errorf("the message does not name the class: %s", r.body)
			}
		})
	}

	events := h.rec.waitEvents(t, len(refusals))
	for _, e := range events {
		rc := e.RefusedClass
		if rc == nil || rc.Rule != "model-calls" || rc.Class != "batch" || rc.Floor != 1 || rc.Share != 1 || rc.Capacity != 2 || len(e.Classes) != 0 {
			t.Errorf("refusal's event: refused class %+v, classes %+v", rc, e.Classes)
		}
	}
}

// An admission's event names its class on each class rule and the class it
// borrowed from; a call no class rule decided carries none.
func TestGateway_ClassesInTheEvent(t *testing.T) {
	t.Parallel()
	rate := sluice.Rule{Name: "calls", Kind: sluice.KindRate, Subject: "global", Limit: 2, Window: time.Hour,
		DefaultClass: "batch", Classes: []sluice.Class{{Name: "interactive", Floor: 1}, {Name: "batch", Floor: 1}}}
	h := newHarness(t, []sluice.Rule{rate})
	for range 2 {
		if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	events := h.rec.waitEvents(t, 2)
	wantShare := sluice.ClassShare{Rule: "calls", Class: "batch", Floor: 1, Share: 1, Capacity: 2}
	borrowedShare := wantShare
	borrowedShare.BorrowedFrom = "interactive"
	for i, want := range []sluice.ClassShare{wantShare, borrowedShare} {
		if e := events[i]; len(e.Classes) != 1 || e.Classes[0] != want || e.RefusedClass != nil {
			t.Errorf("event %d: classes %+v, refused %+v; want [%+v]", i, e.Classes, e.RefusedClass, want)
		}
	}

	plain := newHarness(t, []sluice.Rule{{Name: "rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Hour}})
	plain.post("/v1/chat/completions", smallChat, nil)
	if r := plain.post("/v1/chat/completions", smallChat, nil); r.status != 429 || strings.Contains(string(r.body), `"class"`) {
		t.Errorf("a rule without classes: %d %s", r.status, r.body)
	}
	for _, e := range plain.rec.waitEvents(t, 2) {
		if len(e.Classes) != 0 || e.RefusedClass != nil {
			t.Errorf("a rule without classes: event classes %+v, refused %+v", e.Classes, e.RefusedClass)
		}
	}
}
