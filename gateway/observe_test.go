package gateway_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// The event of a request carries what the latency histograms need: the
// provider, its last status, the time spent on it and, for a stream, the
// time to its first event.
func TestGateway_EventTimesTheProvider(t *testing.T) {
	t.Parallel()
	h := startHarness(t, setup{mock: mockOptions(20 * time.Millisecond)})
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"[mock delay=30] hi"}]}`, nil); r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"[mock tokens=4] hi"}]}`, nil); r.status != 200 {
		t.Fatalf("stream: status %d: %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", `{"model":"mock-small","max_tokens":8,"messages":[{"role":"user","content":"[mock status=400] hi"}]}`, nil); r.status != 400 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if r := h.post("/v1/chat/completions", `{"model":"mock-small"`, nil); r.status != 400 {
		t.Fatalf("malformed: status %d: %s", r.status, r.body)
	}
	events := h.rec.waitEvents(t, 4)
	byOutcome := func(stream bool, status int) (e sluiceEvent) {
		t.Helper()
		for _, ev := range events {
			if (ev.FirstToken > 0) == stream && ev.UpstreamStatus == status {
				return sluiceEvent{ev.Provider, ev.UpstreamStatus, ev.Duration, ev.Upstream, ev.FirstToken}
			}
		}
		t.Fatalf("no event with stream=%v, upstream status %d in %+v", stream, status, events)
		return
	}
	plain := byOutcome(false, 200)
	if plain.provider != "mock" || plain.upstream < 30*time.Millisecond || plain.duration < plain.upstream {
		t.Errorf("plain call: %+v, want provider mock, upstream >= 30ms (the mock's delay), duration >= upstream", plain)
	}
	stream := byOutcome(true, 200)
	// Four chunks 20 ms apart: the first event comes well before the end.
	if stream.upstream < 60*time.Millisecond || stream.firstToken >= stream.upstream || stream.duration < stream.upstream {
		t.Errorf("stream: %+v, want the first event before the stream's end (>= 60ms), duration >= upstream", stream)
	}
	if refused := byOutcome(false, 400); refused.upstream <= 0 || refused.provider != "mock" {
		t.Errorf("provider's 400: %+v", refused)
	}
	if bad := byOutcome(false, 0); bad.upstream != 0 || bad.provider != "" || bad.duration <= 0 {
		t.Errorf("malformed request: %+v, want no provider, a duration", bad)
	}
}

type sluiceEvent struct {
	provider                       string
	status                         int
	duration, upstream, firstToken time.Duration
}

// A shadow rule over its limit and rules failing open are named in the
// event, for their per-rule counters.
func TestGateway_EventNamesShadowAndFailOpenRules(t *testing.T) {
	t.Parallel()
	shadow := sluice.Rule{Name: "trial", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Hour, Mode: sluice.ModeShadow}
	h := startHarness(t, setup{rules: []sluice.Rule{shadow}})
	for range 2 {
		if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	events := h.rec.waitEvents(t, 2)
	if len(events[0].Shadowed) != 0 || !slices.Equal(events[1].Shadowed, []string{"trial"}) {
		t.Errorf("shadowed: first %v, second %v; want none, then [trial]", events[0].Shadowed, events[1].Shadowed)
	}

	open := dailyTokens
	open.OnStoreError = sluice.StoreErrorOpen
	h = startHarness(t, setup{rules: []sluice.Rule{open}, store: downStore{memstore.New(memstore.Options{})}})
	if r := h.post("/v1/chat/completions", smallChat, nil); r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if ev := h.rec.waitEvents(t, 1)[0]; !slices.Equal(ev.FailedOpen, []string{open.Name}) {
		t.Errorf("failed open: %v, want [%s]", ev.FailedOpen, open.Name)
	}
}
