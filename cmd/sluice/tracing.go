package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// tracing is the gateway's tracer provider, or nothing when tracing is off.
type tracing struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	// shutdown flushes the spans still batched and stops the exporter.
	shutdown func(context.Context) error
}

// tracingFromEnv reads the OpenTelemetry environment variables. Tracing is
// off unless OTEL_TRACES_EXPORTER is otlp, or it is unset and an OTLP
// endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off. The exporter speaks OTLP over
// HTTP (http/protobuf) and reads its own variables (endpoint, headers,
// timeout, compression, certificates); the SDK reads the sampler
// (OTEL_TRACES_SAMPLER, default parentbased_always_on), the batch
// processor's OTEL_BSP_* and the resource (OTEL_SERVICE_NAME, default
// sluice; OTEL_RESOURCE_ATTRIBUTES). OTEL_PROPAGATORS may name
// tracecontext, baggage or none.
func tracingFromEnv(ctx context.Context, getenv func(string) string) (tracing, error) {
	off := tracing{shutdown: func(context.Context) error { return nil }}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return off, nil
	}
	on := false
	switch exporters := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporters {
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		for _, e := range strings.Split(exporters, ",") {
			switch strings.TrimSpace(e) {
			case "otlp":
				on = true
			case "none":
			default:
				return off, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: sluice exports traces with otlp only (or none)", exporters)
			}
		}
	}
	if !on {
		return off, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return off, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: sluice exports OTLP over http/protobuf only", protocol)
	}
	prop, err := propagatorsFromEnv(getenv("OTEL_PROPAGATORS"))
	if err != nil {
		return off, err
	}
	exp, err := newOTLPExporter(ctx)
	if err != nil {
		return off, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// The environment's service name and attributes win over the default.
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName("sluice")), resource.Environment())
	if err != nil {
		return off, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tracing{provider: tp, propagator: prop, shutdown: tp.Shutdown}, nil
}

// propagatorsFromEnv is OTEL_PROPAGATORS: tracecontext,baggage by default.
func propagatorsFromEnv(v string) (propagation.TextMapPropagator, error) {
	if strings.TrimSpace(v) == "" {
		v = "tracecontext,baggage"
	}
	var props []propagation.TextMapPropagator
	for _, name := range strings.Split(v, ",") {
		switch strings.TrimSpace(name) {
		case "tracecontext":
			props = append(props, propagation.TraceContext{})
		case "baggage":
			props = append(props, propagation.Baggage{})
		case "none":
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS=%q: sluice knows tracecontext, baggage and none", v)
		}
	}
	return propagation.NewCompositeTextMapPropagator(props...), nil
}
