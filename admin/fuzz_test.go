package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecode feeds untrusted bodies to the strict decoder of each request
// type: it must answer an error with a 4xx status, or a value, and never
// panic.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a","kind":"rate","subject":"user","limit":1,"window":"1m"}`,
		`{"rule":"r","attribute":"workspace","value":"w","limit":null}`,
		`{"workspace":"w","user":"u","expires_at":"2030-01-01T00:00:00Z"}`,
		`{"role":"viewer","workspaces":["a"]}`,
		`{"limit":"5"}`, `[]`, `{} {}`, `{"window":60}`, `{"limit":1e400}`, "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []any{&ruleRequest{}, &overrideRequest{}, &keyRequest{}, &tokenRequest{}} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			if err := decode(w, r, v); err != nil {
				if s := errorOf(err).Status; s < 400 || s >= 500 {
					t.Fatalf("decode(%q) = status %d: %v", body, s, err)
				}
			}
		}
	})
}
