package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Tracing is off unless the OpenTelemetry variables ask for it, as the
// specification reads them; what sluice cannot do is refused by name.
func TestTracingFromEnv_Switches(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{name: "nothing set", env: nil},
		{name: "an endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "a traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "otlp named", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "an exporter sluice lacks", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin"`},
		{name: "grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "http/protobuf only"},
		{name: "a propagator sluice lacks", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_PROPAGATORS": "b3"}, err: `OTEL_PROPAGATORS="b3"`},
	}
	for _, tc := range cases {
		if tc.on && !otlpBuilt {
			tc.on, tc.err = false, "-tags nootlp" // asking for traces is an error there, not silence
		}
		t.Run(tc.name, func(t *testing.T) {
			tr, err := tracingFromEnv(context.Background(), func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.shutdown(context.Background())
			if on := tr.provider != nil; on != tc.on {
				t.Fatalf("tracing on = %v, want %v", on, tc.on)
			}
		})
	}
}

// With an OTLP endpoint set, spans reach it over HTTP as protobuf, with
// the service name sluice unless OTEL_SERVICE_NAME says otherwise, and
// shutdown flushes them.
func TestTracingFromEnv_ExportsOverOTLPHTTP(t *testing.T) {
	if !otlpBuilt {
		t.Skip("built with -tags nootlp: no exporter")
	}
	var mu sync.Mutex
	var got []*coltracepb.ExportTraceServiceRequest
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "sluice-east")
	tr, err := tracingFromEnv(context.Background(), os.Getenv)
	if err != nil || tr.provider == nil {
		t.Fatalf("tracing %+v, %v", tr, err)
	}
	_, span := tr.provider.Tracer("test").Start(context.Background(), "a span")
	span.End()
	if err := tr.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || len(got[0].ResourceSpans) != 1 {
		t.Fatalf("collector got %d exports", len(got))
	}
	rs := got[0].ResourceSpans[0]
	service := ""
	for _, a := range rs.Resource.Attributes {
		if a.Key == "service.name" {
			service = a.Value.GetStringValue()
		}
	}
	if service != "sluice-east" || rs.ScopeSpans[0].Spans[0].Name != "a span" {
		t.Errorf("service %q, span %q", service, rs.ScopeSpans[0].Spans[0].Name)
	}
}
