// Package events turns what the gateway and the limiter see into Sluice's
// events: a budget's first warning in a period, an overrun, a shadow
// rule's would-be refusal, a dependency down or back. Each is logged, the
// budget ones written to the audit log, and any sent to the configured
// webhooks; none waits on the request's path (audit entries and webhooks
// go through bounded queues).
package events

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/internal/webhook"
)

// The event types, as the audit log's actions and the webhooks' types
// name them.
const (
	BudgetWarning    = "budget.warning"
	BudgetOverrun    = "budget.overrun"
	ShadowRefusal    = "rule.shadow_refusal"
	DependencyDown   = "dependency.down"
	DependencyUp     = "dependency.up"
	auditActor       = "sluice"
	defaultQueueSize = 1024
)

// Types lists every event type, for the configuration's check.
var Types = []string{BudgetWarning, BudgetOverrun, ShadowRefusal, DependencyDown, DependencyUp}

// Auditor writes audit entries (the catalog).
type Auditor interface {
	Audit(ctx context.Context, e catalog.AuditEntry) error
}

// Options configures Events. All are optional.
type Options struct {
	Log *slog.Logger
	// Audit receives the budget events' audit entries.
	Audit Auditor
	// Webhooks receives every event (it sends each only to the endpoints
	// that asked for its type).
	Webhooks *webhook.Dispatcher
	// OnWarning, if set, is told of each budget warning event (a
	// metric); it must not block.
	OnWarning func(rule string)
	// QueueSize bounds the audit entries waiting to be written (1024):
	// past it an entry is dropped and logged.
	QueueSize int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Redact masks secrets in a dependency's error before it is sent to
	// a webhook (nil: sent as it is).
	Redact func(string) string
}

// Events is the events of one gateway process. It is safe for concurrent
// use; Run writes the audit entries.
type Events struct {
	opts   Options
	log    *slog.Logger
	audits chan catalog.AuditEntry

	mu sync.Mutex
	// warned holds the warnings already reported, until their period
	// ends (the value).
	warned     map[warningKey]time.Time
	prunedSize int
}

// warningKey is one warning level of one budget's subject in one period.
type warningKey struct {
	rule, subject, level string
	period               time.Time
}

// New returns Events.
func New(opts Options) *Events {
	if opts.QueueSize <= 0 {
		opts.QueueSize = defaultQueueSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	e := &Events{opts: opts, log: opts.Log, audits: make(chan catalog.AuditEntry, opts.QueueSize), warned: map[warningKey]time.Time{}}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e
}

// Run writes queued audit entries, and delivers the webhooks', until ctx
// ends.
func (e *Events) Run(ctx context.Context) {
	if e.opts.Webhooks != nil {
		go e.opts.Webhooks.Run(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-e.audits:
			if e.opts.Audit == nil {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := e.opts.Audit.Audit(actx, a); err != nil {
				e.log.Error("event's audit entry not written", "action", a.Action, "target", a.Target, "err", err)
			}
			cancel()
		}
	}
}

// Warning is the body of a budget.warning event.
type Warning struct {
	Rule    string `json:"rule"`
	Subject string `json:"subject"`
	// Level is "warn_at" (a threshold, Threshold its fraction) or
	// "soft_limit".
	Level     string    `json:"level"`
	Threshold float64   `json:"threshold,omitempty"`
	Used      int64     `json:"used"`
	Limit     int64     `json:"limit"`
	ResetAt   time.Time `json:"reset_at"`
	RequestID string    `json:"request_id,omitempty"`
}

// Overrun is the body of a budget.overrun event.
type Overrun struct {
	Rule     string `json:"rule"`
	Subject  string `json:"subject"`
	Reserved int64  `json:"reserved"`
	Actual   int64  `json:"actual"`
}

// Shadow is the body of a rule.shadow_refusal event.
type Shadow struct {
	Rule      string `json:"rule"`
	RequestID string `json:"request_id"`
	Org       string `json:"org,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	Model     string `json:"model,omitempty"`
}

// Dependency is the body of a dependency.down or dependency.up event.
type Dependency struct {
	Dependency string `json:"dependency"`
	Provider   string `json:"provider,omitempty"`
	// Model is the provider's model, for a deployment's circuit.
	Model string `json:"model,omitempty"`
	// Error is why it went down.
	Error string `json:"error,omitempty"`
}

// Observe reports what a finished request's admission found: the first
// crossing in their period of the budget warnings it reached, and the
// shadow rules that would have refused it. It is the gateway Observer's
// second half and does not block.
func (e *Events) Observe(ev event.Event) {
	for _, w := range ev.BudgetWarnings {
		if w.Threshold > 0 {
			e.warn(w, fmt.Sprintf("warn_at:%g", w.Threshold), ev.RequestID)
		}
		if w.Soft {
			e.warn(w, "soft_limit", ev.RequestID)
		}
	}
	for _, rule := range ev.Shadowed {
		s := Shadow{Rule: rule, RequestID: ev.RequestID, Org: ev.Org, Workspace: ev.Workspace, KeyID: ev.KeyID, Model: ev.Model}
		e.log.Info("shadow rule would have refused", "event", ShadowRefusal, "rule", rule, "request_id", ev.RequestID,
			"org", ev.Org, "workspace", ev.Workspace, "key", ev.KeyID, "model", ev.Model)
		e.send(ShadowRefusal, s)
	}
}

// warn reports w at level unless this process reported it in the same
// period already.
func (e *Events) warn(w sluice.Warning, level, requestID string) {
	key := warningKey{rule: w.Rule, subject: w.Subject, level: level, period: w.ResetAt}
	now := e.opts.Now()
	e.mu.Lock()
	if _, seen := e.warned[key]; seen {
		e.mu.Unlock()
		return
	}
	e.warned[key] = w.ResetAt
	if len(e.warned) >= 2*max(e.prunedSize, 512) {
		// Warnings of ended periods are forgotten: a budget's next
		// period warns again.
		for k, end := range e.warned {
			if !end.After(now) {
				delete(e.warned, k)
			}
		}
		e.prunedSize = len(e.warned)
	}
	e.mu.Unlock()

	body := Warning{Rule: w.Rule, Subject: displaySubject(w.Subject), Level: strings.SplitN(level, ":", 2)[0], Threshold: w.Threshold,
		Used: w.Used, Limit: w.Limit, ResetAt: w.ResetAt, RequestID: requestID}
	if level == "soft_limit" {
		body.Threshold = 0
	}
	e.log.Warn("budget warning", "event", BudgetWarning, "rule", body.Rule, "subject", body.Subject, "level", body.Level,
		"threshold", body.Threshold, "used", body.Used, "limit", body.Limit, "reset_at", body.ResetAt, "request_id", requestID)
	if e.opts.OnWarning != nil {
		e.opts.OnWarning(w.Rule)
	}
	e.audit(catalog.AuditEntry{Actor: auditActor, Action: BudgetWarning, Target: body.Rule + " " + body.Subject, After: body})
	e.send(BudgetWarning, body)
}

// Overrun reports a settlement that charged more than was reserved; it is
// the limiter's OnOverrun's second half and does not block.
func (e *Events) Overrun(o sluice.Overrun) {
	body := Overrun{Rule: o.Rule, Subject: displaySubject(o.Subject), Reserved: o.Reserved, Actual: o.Actual}
	e.log.Warn("budget overrun: settled above the reservation", "event", BudgetOverrun, "rule", body.Rule, "subject", body.Subject,
		"reserved", body.Reserved, "actual", body.Actual)
	e.audit(catalog.AuditEntry{Actor: auditActor, Action: BudgetOverrun, Target: body.Rule + " " + body.Subject, After: body})
	e.send(BudgetOverrun, body)
}

// Dependency reports a dependency going down or coming back (the gateway
// logs it itself); it is the gateway's OnDependency.
func (e *Events) Dependency(ch gateway.DependencyChange) {
	body := Dependency{Dependency: ch.Dependency, Provider: ch.Provider, Model: ch.Model}
	typ := DependencyUp
	if !ch.Up {
		typ = DependencyDown
		if ch.Err != nil {
			body.Error = ch.Err.Error()
			if e.opts.Redact != nil {
				body.Error = e.opts.Redact(body.Error)
			}
		}
	}
	e.send(typ, body)
}

func (e *Events) audit(a catalog.AuditEntry) {
	if e.opts.Audit == nil {
		return
	}
	a.At = e.opts.Now()
	select {
	case e.audits <- a:
	default:
		e.log.Error("event audit queue full: entry dropped", "action", a.Action, "target", a.Target)
	}
}

func (e *Events) send(typ string, data any) {
	e.opts.Webhooks.Send(webhook.Event{Type: typ, At: e.opts.Now().UTC(), Data: data})
}

// displaySubject writes a counter's subject for people, as the admin API
// does: the parts of a composite joined by "+", a value after its org
// (or a session after its key) by "/".
func displaySubject(s string) string {
	return strings.NewReplacer("\x1f", "+", "\x1e", "/").Replace(s)
}
