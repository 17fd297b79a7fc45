package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/store/memstore"
)

// scrape fetches /metrics with token and parses it with the Prometheus
// text parser.
func (e *env) scrape(token string) map[string]*dto.MetricFamily {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/plain") // the text format, not protobuf
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		e.t.Fatalf("Content-Type = %q, want the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// value returns the value of the series of family with exactly labels
// (name=value pairs), or -1 when absent.
func value(families map[string]*dto.MetricFamily, family string, labels ...string) float64 {
	f, ok := families[family]
	if !ok {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		want := map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			want[labels[i]] = labels[i+1]
		}
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetrics_ScrapedAndParsed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := sluice.Identity{Workspace: "acme", User: "ada"}
	// One call in flight, one settled above its reservation (an overrun),
	// one swept.
	open, err := e.limiter.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	over, err := e.limiter.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if err := over.Settle(ctx, sluice.Usage{InputTokens: 500}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.limiter.Admit(ctx, sluice.Request{Identity: id, Max: sluice.Usage{InputTokens: 100}, Timeout: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute) // past the swept call's deadline and slack, not the open one's
	if _, err := e.limiter.Sweep(ctx); err != nil {
		t.Fatal(err)
	}

	events := []gateway.Event{
		{Route: "chat", Model: "mock-small", Provider: "mock", Outcome: "admitted", Status: 200, UpstreamStatus: 200, Attempts: 1,
			Decision: 300 * time.Microsecond, Duration: 700 * time.Millisecond, Upstream: 650 * time.Millisecond,
			Usage: sluice.Usage{InputTokens: 12, OutputTokens: 30, CachedInputTokens: 4, Cost: 25}},
		{Route: "chat", Model: "small", Provider: "mock", Outcome: "admitted", Status: 200, UpstreamStatus: 200, Attempts: 3,
			Decision: time.Millisecond, Duration: 40 * time.Second, Upstream: 39 * time.Second, FirstToken: 1500 * time.Millisecond,
			Usage: sluice.Usage{InputTokens: 8, OutputTokens: 2, Cost: 5}},
		// Admitted with a shadow rule over its limit; admitted uncharged
		// with the store down.
		{Route: "chat", Model: "mock-small", Provider: "mock", Outcome: "admitted", Status: 200, UpstreamStatus: 200, Attempts: 1,
			Duration: time.Second, Shadowed: []string{"trial_budget"}},
		{Route: "chat", Model: "mock-small", Provider: "mock", Outcome: "admitted", Status: 200, UpstreamStatus: 200, Attempts: 1,
			Duration: time.Second, FailedOpen: []string{"rate_per_minute", "daily_token_budget"}},
		{Route: "chat", Model: "mock-small", Outcome: "rate_limited", Class: "throttled", Status: 429, Decision: 100 * time.Microsecond},
		{Route: "messages", Model: "mock-small", Outcome: "busy", Class: "throttled", Status: 429},
		{Route: "chat", Model: "mock-small", Outcome: "budget_exceeded", Class: "terminal", Status: 429},
		{Route: "chat", Model: "mock-small", Outcome: "too_large", Class: "terminal", Status: 413},
		{Route: "chat", Model: "mock-small", Outcome: "store_error", Class: "transient", Status: 503},
		{Route: "chat", Model: "mock-small", Provider: "mock", Outcome: "upstream_error", Class: "transient", Status: 502, UpstreamStatus: 503,
			Attempts: 3, Duration: 3 * time.Second, Upstream: 3 * time.Second},
		// A provider no configuration names folds into "other".
		{Route: "chat", Model: "mock-small", Provider: "elsewhere", Outcome: "upstream_error", Class: "transient", Status: 502, Duration: time.Second},
		// A client naming a model that is not configured, or none, and
		// values no release knows: they fold into "other".
		{Route: "chat", Model: "user-ada-secret-model", Outcome: "bad_request", Class: "terminal", Status: 400},
		{Route: "chat", Outcome: "unauthorized", Class: "terminal", Status: 401, Duration: time.Millisecond},
		{Route: "/v1/../etc", Model: "mock-small", Outcome: "weird", Class: "odd", Status: 400},
		// Sessions: two opened, one refused by a ceiling, one closed.
		{Route: "sessions", Model: "mock-small", Outcome: "admitted", Status: 201, Session: "opened"},
		{Route: "sessions", Model: "mock-small", Outcome: "admitted", Status: 201, Session: "opened"},
		{Route: "chat", Model: "mock-small", Outcome: "session_ceiling", Class: "terminal", Status: 429, Session: "ceiling", Ceiling: "turns",
			SessionEnded: true, SessionUsed: gateway.SessionUsage{Turns: 3, Tokens: 500, Cost: 8_000}},
		{Route: "sessions", Model: "mock-small", Outcome: "admitted", Status: 200, Session: "closed", SessionEnded: true,
			SessionUsed: gateway.SessionUsage{Turns: 7, Tokens: 900, Cost: 12_000}},
		// Identity headers a key may not assert, ignored; a name no release
		// sends folds into "other".
		{Route: "chat", Model: "mock-small", Outcome: "admitted", Status: 200,
			IgnoredIdentity: []string{gateway.HeaderWorkspace, gateway.HeaderUser, gateway.HeaderTeam}},
		{Route: "chat", Model: "mock-small", Outcome: "admitted", Status: 200, IgnoredIdentity: []string{gateway.HeaderUser, "X-Evil"}},
	}
	for _, ev := range events {
		e.metrics.Observe(ev)
	}
	// Sessions that ended with no call of their own: an admin's close, a
	// wall clock passed with no call.
	e.metrics.SessionEnded("", gateway.SessionUsage{Turns: 1, Cost: 10})
	e.metrics.SessionEnded("wall_clock", gateway.SessionUsage{Turns: 2, Cost: 20})
	f := e.scrape(rootToken)

	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"sluice_requests_total", []string{"route", "chat", "model", "mock-small", "outcome", "admitted", "class", ""}, 6},
		{"sluice_requests_total", []string{"outcome", "rate_limited", "class", "throttled"}, 1},
		{"sluice_requests_total", []string{"route", "messages", "outcome", "busy", "class", "throttled"}, 1},
		{"sluice_requests_total", []string{"outcome", "budget_exceeded", "class", "terminal"}, 1},
		{"sluice_requests_total", []string{"outcome", "too_large", "class", "terminal"}, 1},
		{"sluice_requests_total", []string{"outcome", "store_error", "class", "transient"}, 1},
		{"sluice_requests_total", []string{"outcome", "upstream_error", "class", "transient"}, 2},
		{"sluice_requests_total", []string{"model", "other", "outcome", "bad_request"}, 1},
		{"sluice_requests_total", []string{"model", "other", "outcome", "unauthorized"}, 1},
		{"sluice_requests_total", []string{"route", "other", "outcome", "other", "class", "other"}, 1},
		{"sluice_tokens_total", []string{"direction", "input", "model", "mock-small"}, 20},
		{"sluice_tokens_total", []string{"direction", "output", "model", "mock-small"}, 32},
		{"sluice_tokens_total", []string{"direction", "cached_input", "model", "mock-small"}, 4},
		{"sluice_cost_microdollars_total", []string{"model", "mock-small"}, 30},
		{"sluice_decision_seconds", []string{"route", "chat"}, 3},
		{"sluice_upstream_attempts_per_request", []string{"route", "chat"}, 5},
		{"sluice_upstream_attempts_total", []string{"route", "chat", "model", "mock-small", "outcome", "admitted", "class", ""}, 6},
		{"sluice_upstream_attempts_total", []string{"route", "chat", "model", "mock-small", "outcome", "upstream_error", "class", "transient"}, 3},
		{"sluice_request_duration_seconds", []string{"route", "chat", "model", "mock-small", "provider", "mock", "outcome", "admitted", "upstream_status", "2xx"}, 4},
		{"sluice_request_duration_seconds", []string{"provider", "mock", "outcome", "upstream_error", "upstream_status", "5xx"}, 1},
		{"sluice_request_duration_seconds", []string{"provider", "other", "outcome", "upstream_error", "upstream_status", "none"}, 1},
		{"sluice_request_duration_seconds", []string{"model", "other", "provider", "none", "outcome", "unauthorized", "upstream_status", "none"}, 1},
		{"sluice_upstream_duration_seconds", []string{"outcome", "admitted", "upstream_status", "2xx"}, 2},
		{"sluice_upstream_duration_seconds", []string{"outcome", "upstream_error", "upstream_status", "5xx"}, 1},
		{"sluice_time_to_first_token_seconds", []string{"route", "chat", "model", "mock-small", "provider", "mock"}, 1},
		{"sluice_shadow_refusals_total", []string{"rule", "trial_budget"}, 1},
		{"sluice_fail_open_admissions_total", []string{"rule", "rate_per_minute"}, 1},
		{"sluice_fail_open_admissions_total", []string{"rule", "daily_token_budget"}, 1},
		{"sluice_in_flight", nil, 1},
		{"sluice_reservation_overruns_total", nil, 1},
		{"sluice_sweeps_total", nil, 1},
		{"sluice_swept_reservations_total", nil, 1},
		{"sluice_swept_budget_charges_total", []string{"result", "charged"}, 1},
		{"sluice_store_seconds", []string{"operation", "admit"}, 3},
		{"sluice_store_seconds", []string{"operation", "settle"}, 1},
		{"sluice_store_seconds", []string{"operation", "sweep"}, 1},
		{"sluice_sessions_total", []string{"event", "opened"}, 2},
		{"sluice_sessions_total", []string{"event", "ceiling_reached", "ceiling", "turns"}, 1},
		{"sluice_sessions_total", []string{"event", "closed"}, 1},
		{"sluice_sessions_total", []string{"event", "closed_by_admin"}, 1},
		{"sluice_sessions_total", []string{"event", "ceiling_reached", "ceiling", "wall_clock"}, 1},
		// Every session that ended, however: a ceiling, its client, an
		// admin, its wall clock.
		{"sluice_session_cost_microdollars", nil, 4},
		{"sluice_session_turns", nil, 4},
		{"sluice_requests_total", []string{"route", "chat", "outcome", "session_ceiling", "class", "terminal"}, 1},
		{"sluice_identity_headers_ignored_total", []string{"header", "X-Sluice-Workspace"}, 1},
		{"sluice_identity_headers_ignored_total", []string{"header", "X-Sluice-User"}, 2},
		{"sluice_identity_headers_ignored_total", []string{"header", "X-Sluice-Team"}, 1},
		{"sluice_identity_headers_ignored_total", []string{"header", "other"}, 1},
	} {
		if got := value(f, tc.family, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.family, tc.labels, got, tc.want)
		}
	}
	// Labels are bounded: no identity ever becomes one, and only the
	// configured models (or "other", "none") appear.
	for name, fam := range f {
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "user", "key", "workspace", "org", "team", "subject":
					t.Errorf("%s has an identity label %q", name, l.GetName())
				case "model":
					if v := l.GetValue(); v != "mock-small" && v != "other" {
						t.Errorf("%s has model label %q", name, v)
					}
				}
			}
		}
	}
	if err := open.Settle(ctx, sluice.Usage{InputTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if got := value(e.scrape(rootToken), "sluice_in_flight"); got != 0 {
		t.Fatalf("in flight after settle = %v", got)
	}
}

// A gateway's decisions by a rule with priority classes are counted by
// rule and class: admissions by the class's own share and by a borrowed
// one, and refusals. The key names no class: every call here is in the
// rule's default class, batch.
func TestMetrics_ClassAdmissionsAndRefusals(t *testing.T) {
	m := NewMetrics(MetricsOptions{Models: map[string]string{"mock-small": "mock-small"}, Providers: []string{"mock"}})
	rules := []sluice.Rule{{Name: "calls", Kind: sluice.KindRate, Subject: "global", Limit: 2, Window: time.Hour,
		DefaultClass: "batch", Classes: []sluice.Class{{Name: "interactive", Floor: 1}, {Name: "batch", Floor: 1}}}}
	url := startGateway(t, m, memstore.New(memstore.Options{}), rules, false)
	body := `{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	chat(t, url, body, 200) // batch's own share
	chat(t, url, body, 200) // interactive's idle share, borrowed
	chat(t, url, body, 429) // both full
	want := []struct {
		family string
		labels []string
		n      float64
	}{
		{"sluice_class_admissions_total", []string{"rule", "calls", "class", "batch", "share", "own"}, 1},
		{"sluice_class_admissions_total", []string{"rule", "calls", "class", "batch", "share", "borrowed"}, 1},
		{"sluice_class_refusals_total", []string{"rule", "calls", "class", "batch"}, 1},
	}
	var families map[string]*dto.MetricFamily
	deadline := time.Now().Add(5 * time.Second)
	for {
		families = scrapeHandler(t, m.Handler())
		// Each call's event comes once its answer is out.
		if value(families, "sluice_requests_total", "outcome", "admitted") >= 2 &&
			value(families, "sluice_requests_total", "outcome", "rate_limited") >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, w := range want {
		if got := value(families, w.family, w.labels...); got != w.n {
			t.Errorf("%s%v = %v, want %v", w.family, w.labels, got, w.n)
		}
	}
	if n := len(families["sluice_class_admissions_total"].GetMetric()); n != 2 {
		t.Errorf("%d series of sluice_class_admissions_total, want 2", n)
	}
}

func TestMetrics_ResponseCache(t *testing.T) {
	m := NewMetrics(MetricsOptions{Models: map[string]string{"mock-small": "mock-small"}, Providers: []string{"mock"}})
	m.Observe(event.Event{Route: "chat", Model: "mock-small", Outcome: "admitted", Cache: "miss"})
	m.Observe(event.Event{Route: "chat", Model: "mock-small", Outcome: "admitted", Cache: "hit", CacheSaved: 420})
	m.Observe(event.Event{Route: "chat", Model: "mock-small", Outcome: "admitted", Cache: "hit", CacheSaved: 420})
	m.Observe(event.Event{Route: "chat", Model: "mock-small", Outcome: "admitted", Cache: "bypass"})
	m.Observe(event.Event{Route: "chat", Model: "mock-small", Outcome: "admitted"}) // no cache: not counted
	families := scrapeHandler(t, m.Handler())
	for _, w := range []struct {
		family string
		labels []string
		n      float64
	}{
		{"sluice_cache_requests_total", []string{"model", "mock-small", "result", "hit"}, 2},
		{"sluice_cache_requests_total", []string{"model", "mock-small", "result", "miss"}, 1},
		{"sluice_cache_requests_total", []string{"model", "mock-small", "result", "bypass"}, 1},
		{"sluice_cache_saved_microdollars_total", []string{"model", "mock-small"}, 840},
	} {
		if got := value(families, w.family, w.labels...); got != w.n {
			t.Errorf("%s%v = %v, want %v", w.family, w.labels, got, w.n)
		}
	}
}
