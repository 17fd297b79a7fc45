package admin

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/gateway/event"
)

// NewLogger returns the server's logger: JSON when production, text
// otherwise, with secrets redacted (see Redact).
func NewLogger(w io.Writer, production bool) *slog.Logger {
	opts := &slog.HandlerOptions{ReplaceAttr: Redact}
	if production {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// secretPattern matches what Sluice's secrets look like: API keys
// (sk-...), admin tokens (sluice-adm-..., sluice-admin-...) and bearer
// credentials.
var secretPattern = regexp.MustCompile(`(?i)(sk-[A-Za-z0-9_-]{8,}|sluice-adm(in)?-[A-Za-z0-9_-]{8,}|bearer\s+\S+)`)

// urlPassword matches the password of a URL's user information, as in
// redis://:secret@host or postgres://user:secret@host.
var urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@`)

// sensitiveKeys are attribute names whose values are never logged, alone
// or as the suffix of a name after "_".
var sensitiveKeys = []string{"authorization", "api_key", "apikey", "secret", "token", "password", "x-api-key"}

var sensitiveSuffixes = func() []string {
	out := make([]string, len(sensitiveKeys))
	for i, k := range sensitiveKeys {
		out[i] = "_" + k
	}
	return out
}()

// Redact is a slog ReplaceAttr that blanks the values of sensitive
// attributes and masks anything shaped like a secret in the others, as a
// second line of defence: the code logs no secret on purpose.
func Redact(_ []string, a slog.Attr) slog.Attr {
	key := strings.ToLower(a.Key)
	for i, s := range sensitiveKeys {
		if key == s || strings.HasSuffix(key, sensitiveSuffixes[i]) {
			return slog.String(a.Key, "[redacted]")
		}
	}
	if a.Value.Kind() == slog.KindString || a.Value.Kind() == slog.KindAny {
		s := a.Value.String()
		// Every line of a busy gateway comes here: the patterns run only
		// on a value that could match them.
		if maySecret(s) && secretPattern.MatchString(s) {
			s = secretPattern.ReplaceAllString(s, "[redacted]")
			a = slog.String(a.Key, s)
		}
		if strings.Contains(s, "://") && urlPassword.MatchString(s) {
			return slog.String(a.Key, urlPassword.ReplaceAllString(s, "${1}[redacted]@"))
		}
	}
	return a
}

// maySecret reports whether s could match secretPattern: it holds "sk-",
// "sluice-adm" or "bearer" in any ASCII case, or a byte that is not ASCII
// (which case folding could turn into one of them).
func maySecret(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] | 0x20 {
		case 's':
			if hasPrefixFold(s[i:], "sk-") || hasPrefixFold(s[i:], "sluice-adm") {
				return true
			}
		case 'b':
			if hasPrefixFold(s[i:], "bearer") {
				return true
			}
		}
		if s[i] >= 0x80 {
			return true
		}
	}
	return false
}

// hasPrefixFold is strings.HasPrefix in any ASCII case of prefix, which is
// lower case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// LogRequest writes one line for a finished client request: its ID,
// route, model, provider, who was charged (org, workspace, key ID: never
// the key), session, tags, duration and time to first token, outcome,
// class, status, the provider's status, upstream attempts, decision time,
// usage, the priority classes of rules with classes (and the classes whose
// shares were borrowed) and, for a failure, its cause (masked by Redact: the cause of a
// failure is the one value here that could carry a secret).
func LogRequest(log *slog.Logger, e event.Event) {
	level := slog.LevelInfo
	if e.Outcome == "store_error" || e.Outcome == "upstream_error" {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("request_id", e.RequestID),
		slog.String("route", e.Route),
		slog.String("model", e.Model),
		slog.String("provider", e.Provider),
		slog.String("org", e.Org),
		slog.String("workspace", e.Workspace),
		slog.String("key", e.KeyID),
		slog.String("session", e.SessionID),
		slog.String("tags", strings.Join(e.Tags, ",")),
		slog.Float64("duration_ms", float64(e.Duration.Microseconds())/1000),
		slog.Float64("ttft_ms", float64(e.FirstToken.Microseconds())/1000),
		slog.String("outcome", e.Outcome),
		slog.String("class", e.Class),
		slog.Int("status", e.Status),
		slog.Int("upstream_status", e.UpstreamStatus),
		slog.Int("attempts", e.Attempts),
		slog.Float64("decision_ms", float64(e.Decision.Microseconds())/1000),
		slog.Int64("input_tokens", e.Usage.InputTokens),
		slog.Int64("output_tokens", e.Usage.OutputTokens),
		slog.Int64("cost_micros", e.Usage.Cost),
	}
	if classes, borrowed := priorityClasses(e); classes != "" {
		attrs = append(attrs, slog.String("priority_class", classes))
		if borrowed != "" {
			attrs = append(attrs, slog.String("borrowed_from", borrowed))
		}
	}
	if len(e.IgnoredIdentity) > 0 {
		attrs = append(attrs, slog.String("ignored_headers", strings.Join(e.IgnoredIdentity, ",")))
	}
	if e.Cause != nil {
		attrs = append(attrs, Redact(nil, slog.String("cause", e.Cause.Error())))
	}
	log.LogAttrs(context.Background(), level, "request", attrs...)
}

// priorityClasses returns the request's classes on the rules with classes
// that admitted or refused it, and the classes whose shares it borrowed,
// each comma-separated (one rule's, or the distinct names of several).
func priorityClasses(e event.Event) (classes, borrowed string) {
	var names, lenders []string
	for _, cs := range e.Classes {
		if !slices.Contains(names, cs.Class) {
			names = append(names, cs.Class)
		}
		if cs.BorrowedFrom != "" && !slices.Contains(lenders, cs.BorrowedFrom) {
			lenders = append(lenders, cs.BorrowedFrom)
		}
	}
	if e.RefusedClass != nil && !slices.Contains(names, e.RefusedClass.Class) {
		names = append(names, e.RefusedClass.Class)
	}
	return strings.Join(names, ","), strings.Join(lenders, ",")
}

// LineBuffer is a writer for the request log: each Write (one line from a
// slog handler) is appended to a buffer, and the buffer is written out at
// most Interval after its first line, when it grows past 64 KiB, and by
// Flush. A busy gateway then makes one write system call every Interval
// instead of one per request. Lines are written whole and in order. Call
// Flush at shutdown, after the last request is logged (Drain has returned):
// lines still buffered when the process is killed are lost. It is safe for
// concurrent use.
type LineBuffer struct {
	w        io.Writer
	interval time.Duration
	timer    *time.Timer
	// out serializes writes to w, so that buffers go out in order.
	out sync.Mutex
	mu  sync.Mutex
	buf []byte
	// spare is the buffer last written out, reused for the next lines.
	spare []byte
	armed bool
	err   error
}

// lineBufferMax is the buffered size that triggers an immediate write.
const lineBufferMax = 64 << 10

// NewLineBuffer returns a LineBuffer writing to w; interval <= 0 means
// 50 ms.
func NewLineBuffer(w io.Writer, interval time.Duration) *LineBuffer {
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	b := &LineBuffer{w: w, interval: interval}
	b.timer = time.AfterFunc(time.Hour, func() { _ = b.Flush() })
	b.timer.Stop()
	return b
}

// Write buffers p. It reports the error of an earlier write to w, once.
func (b *LineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf = append(b.buf, p...)
	full := len(b.buf) >= lineBufferMax
	if !full && !b.armed {
		b.armed = true
		b.timer.Reset(b.interval)
	}
	err := b.err
	b.err = nil
	b.mu.Unlock()
	if full {
		_ = b.Flush()
	}
	return len(p), err
}

// Flush writes out what is buffered.
func (b *LineBuffer) Flush() error {
	b.out.Lock()
	defer b.out.Unlock()
	b.mu.Lock()
	b.armed = false
	if len(b.buf) == 0 {
		b.mu.Unlock()
		return nil
	}
	data := b.buf
	b.buf, b.spare = b.spare[:0], nil
	b.mu.Unlock()
	_, err := b.w.Write(data)
	b.mu.Lock()
	if err != nil && b.err == nil {
		b.err = err
	}
	if cap(data) <= 4*lineBufferMax {
		b.spare = data[:0]
	}
	b.mu.Unlock()
	return err
}
