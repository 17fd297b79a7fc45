package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway/event"
)

// The request line carries every field an operator on call asks for, and
// a failure's cause with anything shaped like a secret masked.
func TestLogRequest_Fields(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	LogRequest(log, event.Event{RequestID: "r1", Route: "chat", Model: "m", Provider: "openai", Org: "o", Workspace: "w", KeyID: "k1",
		SessionID: "ses_1", Tags: []string{"a", "b"}, Duration: 1500 * time.Millisecond, FirstToken: 250 * time.Millisecond,
		Outcome: "upstream_error", Class: "transient", Status: 502, UpstreamStatus: 503, Attempts: 3,
		Usage: sluice.Usage{InputTokens: 10}, Cause: errors.New("upstream_error: dial redis://:hunter2@10.0.0.5:6379 with Bearer sk-abcdefghijkl")})
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"request_id": "r1", "workspace": "w", "key": "k1", "session": "ses_1", "tags": "a,b", "provider": "openai",
		"duration_ms": 1500.0, "ttft_ms": 250.0, "outcome": "upstream_error", "status": 502.0, "upstream_status": 503.0, "level": "WARN"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	cause, _ := m["cause"].(string)
	if !strings.Contains(cause, "upstream_error: dial") || strings.Contains(cause, "hunter2") || strings.Contains(cause, "sk-abcdefghijkl") {
		t.Errorf("cause %q, want it kept with its secrets masked", cause)
	}
	buf.Reset()
	LogRequest(log, event.Event{RequestID: "r2", Outcome: "admitted"})
	if strings.Contains(buf.String(), "cause") {
		t.Errorf("an admitted call's line has a cause: %s", buf.String())
	}
}

// The line names the request's priority class when a class rule decided
// it, the classes whose shares it borrowed, and nothing of classes when no
// class rule applied.
func TestLogRequest_PriorityClass(t *testing.T) {
	share := func(rule, class, from string) sluice.ClassShare {
		return sluice.ClassShare{Rule: rule, Class: class, Floor: 1, Share: 1, Capacity: 2, BorrowedFrom: from}
	}
	refused := share("model-calls", "batch", "")
	for _, tc := range []struct {
		name            string
		e               event.Event
		class, borrowed any
	}{
		{"Own", event.Event{Outcome: "admitted", Classes: []sluice.ClassShare{share("model-calls", "batch", "")}}, "batch", nil},
		{"Borrowed", event.Event{Outcome: "admitted", Classes: []sluice.ClassShare{share("model-calls", "batch", "interactive"),
			share("tpm", "batch", "")}}, "batch", "interactive"},
		{"Refused", event.Event{Outcome: "busy", Class: "throttled", RefusedClass: &refused}, "batch", nil},
		{"NoClassRule", event.Event{Outcome: "admitted"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			LogRequest(slog.New(slog.NewJSONHandler(&buf, nil)), tc.e)
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			if m["priority_class"] != tc.class || m["borrowed_from"] != tc.borrowed {
				t.Errorf("priority_class %v, borrowed_from %v; want %v, %v: %s", m["priority_class"], m["borrowed_from"], tc.class, tc.borrowed, buf.String())
			}
		})
	}
}
