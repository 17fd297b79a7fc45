//go:build !nootlp

package main

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpBuilt says whether this build exports traces: false with -tags
// nootlp.
const otlpBuilt = true

// newOTLPExporter is the OTLP/HTTP exporter, configured by its own
// OTEL_EXPORTER_OTLP_* variables. It links gRPC (about 2.3 MB of the
// stripped binary) although it never speaks it: its configuration package
// and the OTLP collector types import it (open-telemetry/opentelemetry-go
// issue 2579). A build that never traces can leave it out with -tags
// nootlp.
func newOTLPExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	return otlptracehttp.New(ctx)
}
