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
// OTEL_EXPORTER_OTLP_* variables. It links gRPC (about 1.6 MB of the
// release's binary) although it never speaks it: its configuration package
// and the OTLP collector types import it (open-telemetry/opentelemetry-go
// issue 2579); -tags grpcnotrace, which the release builds with, keeps
// gRPC's golang.org/x/net/trace out. A build that never traces can leave
// the exporter out with -tags nootlp.
func newOTLPExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	return otlptracehttp.New(ctx)
}
