package gateway

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/llm"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the gateway's spans.
const tracerName = "github.com/sluicehq/sluice/gateway"

// Span names and attributes of Sluice's own (the GenAI and HTTP ones are
// OpenTelemetry's semantic conventions).
const (
	spanAuthenticate = "sluice.authenticate"
	spanAdmit        = "sluice.admit"
	spanSettle       = "sluice.settle"
	// eventFirstToken marks, on the upstream span, the provider's first
	// event of a stream (or its whole answer otherwise).
	eventFirstToken = "gen_ai.first_token"

	attrRequestID = attribute.Key("sluice.request_id")
	attrOutcome   = attribute.Key("sluice.outcome")
	attrOrg       = attribute.Key("sluice.org")
	attrWorkspace = attribute.Key("sluice.workspace")
	attrKeyID     = attribute.Key("sluice.key_id")
	attrSession   = attribute.Key("sluice.session")
	attrAttempts  = attribute.Key("sluice.upstream.attempts")
	attrCost      = attribute.Key("sluice.cost_micros")
	attrClamped   = attribute.Key("sluice.output_cap_clamped")
	// attrSystem is gen_ai.system, the name gen_ai.provider.name replaced,
	// still read by many tracing backends.
	attrSystem = attribute.Key("gen_ai.system")
)

// callTrace is the spans of one call when tracing is on; a nil *callTrace
// is tracing off, and every method does nothing. Its spans are touched by
// one goroutine at a time, in the call's order.
type callTrace struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	ctx      context.Context // the request span's
	root     trace.Span
	upstream trace.Span
	settle   trace.Span
}

// startTrace starts the request's span, continuing the client's trace
// context (traceparent, tracestate) when it sent one. Nil when tracing is
// off.
func (g *Gateway) startTrace(ctx *fasthttp.RequestCtx, rt *route, requestID string) *callTrace {
	if g.tracer == nil {
		return nil
	}
	parent := g.propagator.Extract(context.Background(), requestCarrier{&ctx.Request.Header})
	op := semconv.GenAIOperationNameChat
	if rt.name == "embeddings" {
		op = semconv.GenAIOperationNameEmbeddings
	}
	tctx, span := g.tracer.Start(parent, "POST "+rt.path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.HTTPRequestMethodPost, semconv.URLPath(rt.path), semconv.HTTPRoute(rt.path),
			attrRequestID.String(requestID), op))
	return &callTrace{tracer: g.tracer, prop: g.propagator, ctx: tctx, root: span}
}

// noEnd ends no span.
var noEnd = func(error) {}

// span starts a child of the request's span; the function returned ends
// it, marked failed by a non-nil error.
func (t *callTrace) span(name string) func(error) {
	if t == nil {
		return noEnd
	}
	_, s := t.tracer.Start(t.ctx, name)
	return func(err error) { endSpan(s, err) }
}

// admitSpan starts the span of an admission for model.
func (t *callTrace) admitSpan(model string) func(error) {
	if t == nil {
		return noEnd
	}
	_, s := t.tracer.Start(t.ctx, spanAdmit, trace.WithAttributes(semconv.GenAIRequestModel(model)))
	return func(err error) { endSpan(s, err) }
}

// startUpstream starts the span of the call to deployment d and writes
// its trace context on the upstream request, in place of the client's.
func (t *callTrace) startUpstream(req *fasthttp.Request, rt *route, d *deployment, asked string, clamped bool) {
	if t == nil {
		return
	}
	op := semconv.GenAIOperationNameChat
	if rt.name == "embeddings" {
		op = semconv.GenAIOperationNameEmbeddings
	}
	provider := genAIProvider(d.provider)
	ctx, s := t.tracer.Start(t.ctx, op.Value.AsString()+" "+d.upstream, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(op, semconv.GenAIProviderNameKey.String(provider), attrSystem.String(provider),
			semconv.GenAIRequestModel(asked), semconv.ServerAddress(d.provider.host), attrClamped.Bool(clamped)))
	t.upstream = s
	t.prop.Inject(ctx, requestCarrier{&req.Header})
}

// firstToken marks the provider's first event on the upstream span.
func (t *callTrace) firstToken() {
	if t == nil || t.upstream == nil {
		return
	}
	t.upstream.AddEvent(eventFirstToken)
}

// endUpstream ends the upstream span with what the provider answered:
// its status (0 for none), the model that served, the attempts made and
// the usage it reported.
func (t *callTrace) endUpstream(status int, served string, attempts int, u llm.Usage, reported bool, err error) {
	if t == nil || t.upstream == nil {
		return
	}
	s := t.upstream
	t.upstream = nil
	s.SetAttributes(semconv.GenAIResponseModel(served), attrAttempts.Int(attempts))
	if status != 0 {
		s.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 400 && err == nil {
			err = errors.New(fasthttp.StatusMessage(status))
		}
	}
	if reported {
		s.SetAttributes(semconv.GenAIUsageInputTokens(int(u.InputTokens)), semconv.GenAIUsageOutputTokens(int(u.OutputTokens)))
	}
	endSpan(s, err)
}

// startSettle starts the settlement's span; endSettle ends it.
func (t *callTrace) startSettle() {
	if t == nil {
		return
	}
	_, t.settle = t.tracer.Start(t.ctx, spanSettle)
}

func (t *callTrace) endSettle(err error) {
	if t == nil || t.settle == nil {
		return
	}
	endSpan(t.settle, err)
	t.settle = nil
}

// end ends the request's span with what the event says of the call.
func (t *callTrace) end(ev *Event) {
	if t == nil {
		return
	}
	s := t.root
	s.SetAttributes(semconv.HTTPResponseStatusCode(ev.Status), attrOutcome.String(ev.Outcome),
		semconv.GenAIRequestModel(ev.Model))
	if ev.Workspace != "" {
		s.SetAttributes(attrOrg.String(ev.Org), attrWorkspace.String(ev.Workspace), attrKeyID.String(ev.KeyID))
	}
	if ev.SessionID != "" {
		s.SetAttributes(attrSession.String(ev.SessionID))
	}
	if ev.Provider != "" {
		s.SetAttributes(semconv.GenAIResponseModel(ev.Model), semconv.GenAIUsageInputTokens(int(ev.Usage.InputTokens)),
			semconv.GenAIUsageOutputTokens(int(ev.Usage.OutputTokens)), attrCost.Int64(ev.Usage.Cost))
	}
	if ev.Status >= 500 || ev.Cause != nil {
		msg := ev.Outcome
		if ev.Cause != nil {
			msg = ev.Cause.Error()
		}
		s.SetStatus(codes.Error, msg)
	}
	s.End()
}

func endSpan(s trace.Span, err error) {
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// genAIProvider is a provider's gen_ai.provider.name: openai, anthropic,
// or for another server its kind.
func genAIProvider(p *provider) string {
	switch p.Kind {
	case KindOpenAI:
		return semconv.GenAIProviderNameOpenAI.Value.AsString()
	case KindAnthropic:
		return semconv.GenAIProviderNameAnthropic.Value.AsString()
	}
	return p.Kind
}

// requestCarrier reads and writes trace context in fasthttp request
// headers.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (c requestCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c requestCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c requestCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
