//go:build nootlp

package main

import (
	"context"
	"errors"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpBuilt says whether this build exports traces: false with -tags
// nootlp.
const otlpBuilt = false

// newOTLPExporter refuses: this build has no exporter, so asking for
// traces is a configuration error, not a silent no-op.
func newOTLPExporter(context.Context) (sdktrace.SpanExporter, error) {
	return nil, errors.New("this sluice was built with -tags nootlp, without the OTLP exporter: " +
		"unset OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_TRACES_EXPORTER, or use a build without the tag")
}
