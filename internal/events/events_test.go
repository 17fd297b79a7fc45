package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/webhook"
)

type auditLog struct {
	mu      sync.Mutex
	entries []catalog.AuditEntry
}

func (a *auditLog) Audit(_ context.Context, e catalog.AuditEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
	return nil
}

func (a *auditLog) wait(t *testing.T, n int) []catalog.AuditEntry {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		got := append([]catalog.AuditEntry(nil), a.entries...)
		a.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d audit entries, want %d", len(got), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// logLines returns the JSON log lines of s whose "event" is typ.
func logLines(t *testing.T, s *syncbuf.Buffer, typ string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["event"] == typ {
			out = append(out, m)
		}
	}
	return out
}

func newEvents(t *testing.T) (*events.Events, *auditLog, *syncbuf.Buffer, *[]string) {
	t.Helper()
	audit, logs := &auditLog{}, &syncbuf.Buffer{}
	var warned []string
	var mu sync.Mutex
	e := events.New(events.Options{Log: slog.New(slog.NewJSONHandler(logs, nil)), Audit: audit,
		OnWarning: func(rule string) { mu.Lock(); warned = append(warned, rule); mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.Run(ctx)
	return e, audit, logs, &warned
}

// A budget's warning is reported once per (rule, subject, level) and
// period: the first admission to find it crossed writes the audit entry,
// the log line and the metric; the next admissions of that period do not;
// the next period's first does.
func TestEvents_BudgetWarningOncePerPeriod(t *testing.T) {
	e, audit, logs, warned := newEvents(t)
	day1 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	w := sluice.Warning{Rule: "daily", Subject: "acme\x1ews1", Threshold: 0.8, Used: 850, Limit: 1000, ResetAt: day1}
	for range 3 {
		e.Observe(event.Event{RequestID: "r1", BudgetWarnings: []sluice.Warning{w}})
	}
	other := w
	other.Subject = "acme\x1ews2"
	e.Observe(event.Event{RequestID: "r2", BudgetWarnings: []sluice.Warning{other}})
	soft := w
	soft.Soft = true
	e.Observe(event.Event{RequestID: "r3", BudgetWarnings: []sluice.Warning{soft}}) // the soft limit is new; 0.8 is not
	next := w
	next.ResetAt = day1.Add(24 * time.Hour)
	e.Observe(event.Event{RequestID: "r4", BudgetWarnings: []sluice.Warning{next}})

	entries := audit.wait(t, 4)
	time.Sleep(20 * time.Millisecond)
	if n := len(audit.wait(t, 4)); n != 4 {
		t.Fatalf("%d audit entries, want 4", n)
	}
	first := entries[0]
	if first.Action != events.BudgetWarning || first.Actor != "sluice" || first.Target != "daily acme/ws1" {
		t.Errorf("audit entry %+v", first)
	}
	body, ok := first.After.(events.Warning)
	if !ok || body.Level != "warn_at" || body.Threshold != 0.8 || body.Used != 850 || body.Limit != 1000 || !body.ResetAt.Equal(day1) || body.RequestID != "r1" {
		t.Errorf("audit body %#v", first.After)
	}
	if b := entries[2].After.(events.Warning); b.Level != "soft_limit" || b.Threshold != 0 || b.RequestID != "r3" {
		t.Errorf("third entry %+v, want the soft limit", b)
	}
	lines := logLines(t, logs, events.BudgetWarning)
	if len(lines) != 4 || lines[0]["rule"] != "daily" || lines[0]["subject"] != "acme/ws1" || lines[0]["request_id"] != "r1" {
		t.Errorf("log lines %v", lines)
	}
	if len(*warned) != 4 {
		t.Errorf("metric told %d times, want 4", len(*warned))
	}
}

// An overrun is logged and audited with its rule, subject, reserved and
// actual amounts.
func TestEvents_OverrunAudited(t *testing.T) {
	e, audit, logs, _ := newEvents(t)
	e.Overrun(sluice.Overrun{Rule: "daily", Subject: "acme\x1ews1", Reserved: 100, Actual: 250})
	a := audit.wait(t, 1)[0]
	if a.Action != events.BudgetOverrun || a.After != (events.Overrun{Rule: "daily", Subject: "acme/ws1", Reserved: 100, Actual: 250}) {
		t.Errorf("audit entry %+v", a)
	}
	l := logLines(t, logs, events.BudgetOverrun)
	if len(l) != 1 || l[0]["reserved"] != 100.0 || l[0]["actual"] != 250.0 || l[0]["rule"] != "daily" {
		t.Errorf("log lines %v", l)
	}
}

// A shadow rule's would-be refusal is logged, per rule, with the request.
func TestEvents_ShadowRefusalLogged(t *testing.T) {
	e, _, logs, _ := newEvents(t)
	e.Observe(event.Event{RequestID: "r9", Workspace: "ws1", KeyID: "k1", Model: "m", Shadowed: []string{"try_rpm", "try_budget"}})
	l := logLines(t, logs, events.ShadowRefusal)
	if len(l) != 2 || l[0]["rule"] != "try_rpm" || l[1]["rule"] != "try_budget" || l[0]["request_id"] != "r9" || l[0]["key"] != "k1" {
		t.Errorf("log lines %v", l)
	}
}

// Events go to the webhooks that asked for their type: a provider
// down and back, a warning; not the overrun no endpoint takes.
func TestEvents_SentToWebhooks(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		got = append(got, ev.Type+" "+string(ev.Data))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	d, err := webhook.New(webhook.Options{Endpoints: []webhook.Endpoint{{URL: srv.URL, Secret: "k",
		Events: []string{events.DependencyDown, events.DependencyUp, events.BudgetWarning}}}, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go d.Run(ctx)
	e := events.New(events.Options{Webhooks: d, Redact: func(s string) string { return strings.ReplaceAll(s, "hunter2", "[redacted]") }})
	e.Dependency(gateway.DependencyChange{Dependency: "provider", Provider: "openai", Err: errors.New("3 attempts failed: hunter2")})
	e.Overrun(sluice.Overrun{Rule: "daily", Subject: "s", Reserved: 1, Actual: 2})
	e.Dependency(gateway.DependencyChange{Dependency: "provider", Provider: "openai", Up: true})
	want := []string{
		`dependency.down {"dependency":"provider","provider":"openai","error":"3 attempts failed: [redacted]"}`,
		`dependency.up {"dependency":"provider","provider":"openai"}`,
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
