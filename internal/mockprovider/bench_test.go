package mockprovider

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// discard is a ResponseWriter that throws the answer away, so the benchmarks measure the mock.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

func benchServe(b *testing.B, path, body string) {
	s := New(Options{})
	w := &discard{h: http.Header{}}
	r := httptest.NewRequest(http.MethodPost, path, nil)
	rd := strings.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		r.Body = io.NopCloser(rd)
		s.ServeHTTP(w, r)
	}
}

const benchChat = `{"model":"mock-small","max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a short poem about rate limits."}]}`

func BenchmarkServer_Chat256(b *testing.B) { benchServe(b, "/v1/chat/completions", benchChat) }

func BenchmarkServer_ChatStream256(b *testing.B) {
	benchServe(b, "/v1/chat/completions", strings.Replace(benchChat, `"max_tokens"`, `"stream":true,"stream_options":{"include_usage":true},"max_tokens"`, 1))
}

func BenchmarkServer_ResponsesStream256(b *testing.B) {
	benchServe(b, "/v1/responses", `{"model":"mock-small","stream":true,"max_output_tokens":256,"input":"Write a short poem about rate limits."}`)
}

func BenchmarkServer_MessagesStream256(b *testing.B) {
	benchServe(b, "/v1/messages", `{"model":"mock-small","stream":true,"max_tokens":256,"messages":[{"role":"user","content":"Write a short poem about rate limits."}]}`)
}
