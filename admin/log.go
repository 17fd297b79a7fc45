package admin

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"

	"github.com/sluicehq/sluice/gateway"
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

// sensitiveKeys are attribute names whose values are never logged.
var sensitiveKeys = []string{"authorization", "api_key", "apikey", "secret", "token", "password", "x-api-key"}

// Redact is a slog ReplaceAttr that blanks the values of sensitive
// attributes and masks anything shaped like a secret in the others, as a
// second line of defence: the code logs no secret on purpose.
func Redact(_ []string, a slog.Attr) slog.Attr {
	key := strings.ToLower(a.Key)
	for _, s := range sensitiveKeys {
		if key == s || strings.HasSuffix(key, "_"+s) {
			return slog.String(a.Key, "[redacted]")
		}
	}
	if a.Value.Kind() == slog.KindString || a.Value.Kind() == slog.KindAny {
		s := a.Value.String()
		if secretPattern.MatchString(s) {
			return slog.String(a.Key, secretPattern.ReplaceAllString(s, "[redacted]"))
		}
	}
	return a
}

// LogRequest writes one line for a finished client request: route, model,
// outcome, class, status, upstream attempts, decision time and usage. An
// Event carries no identity and no secret.
func LogRequest(log *slog.Logger, e gateway.Event) {
	level := slog.LevelInfo
	if e.Outcome == "store_error" || e.Outcome == "upstream_error" {
		level = slog.LevelWarn
	}
	log.LogAttrs(context.Background(), level, "request",
		slog.String("route", e.Route),
		slog.String("model", e.Model),
		slog.String("outcome", e.Outcome),
		slog.String("class", e.Class),
		slog.Int("status", e.Status),
		slog.Int("attempts", e.Attempts),
		slog.Float64("decision_ms", float64(e.Decision.Microseconds())/1000),
		slog.Int64("input_tokens", e.Usage.InputTokens),
		slog.Int64("output_tokens", e.Usage.OutputTokens),
		slog.Int64("cost_micros", e.Usage.Cost),
	)
}
