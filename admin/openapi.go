package admin

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of the admin API, the console's
// pages and the gateway's own routes and refusals. It is kept by hand;
// TestOpenAPI_DescribesEveryRoute fails when a route the admin mux serves
// is missing from it, and the admin API tests validate their answers
// against it.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers GET /admin/v1/openapi.json without a token: the
// description is the same for every deployment (it is the file in the
// repository) and tells nothing of this one, and client generators fetch
// it without credentials.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// patternMux is the admin mux, recording the patterns registered on it so
// that the routes served can be listed.
type patternMux struct {
	mux      *http.ServeMux
	patterns []string
}

// Handle registers handler for pattern.
func (m *patternMux) Handle(pattern string, handler http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.mux.Handle(pattern, handler)
}

// HandleFunc registers fn for pattern.
func (m *patternMux) HandleFunc(pattern string, fn func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(fn))
}
