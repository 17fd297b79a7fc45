package admin

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestAPI_KeyCreateRefusesUnknownTierOrModel checks that a key naming a
// tier or model the configuration does not know is refused 400 with the
// check's message, and that nothing is created or audited as created.
func TestAPI_KeyCreateRefusesUnknownTierOrModel(t *testing.T) {
	e := newEnv(t)
	h, err := New(Options{Catalog: e.cat, Limiter: e.limiter, AdminToken: rootToken,
		CheckKey: func(tier string, models []string) error {
			if tier != "" && tier != "pro" {
				return errors.New(`unknown tier "` + tier + `" (configured: pro)`)
			}
			for _, m := range models {
				if !slices.Contains([]string{"mock-small", "small", "cheap"}, m) {
					return errors.New(`unknown model "` + m + `"`)
				}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	for _, tc := range []struct {
		name    string
		body    map[string]any
		status  int
		message string
	}{
		{"no tier, no models", map[string]any{"workspace": "w", "user": "a"}, http.StatusCreated, ""},
		{"known tier and models", map[string]any{"workspace": "w", "user": "b", "tier": "pro", "allowed_models": []string{"small", "cheap"}},
			http.StatusCreated, ""},
		{"tier typo", map[string]any{"workspace": "w", "user": "c", "tier": "Pro"}, http.StatusBadRequest,
			`unknown tier "Pro" (configured: pro)`},
		{"model typo", map[string]any{"workspace": "w", "user": "d", "allowed_models": []string{"mock-smal"}}, http.StatusBadRequest,
			`unknown model "mock-smal"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			r := e.must(tc.status, "POST", "/admin/v1/keys", rootToken, tc.body)
			if tc.status == http.StatusCreated {
				return
			}
			if r.errorCode() != "invalid_key" || !strings.Contains(r.errorMessage(), tc.message) {
				t.Errorf("answer %s; want code invalid_key and %q", r.raw, tc.message)
			}
			if after := e.snapshot(); after.keys != before.keys || after.audit != before.audit {
				t.Errorf("a refused key changed the catalog: %+v, then %+v", before, after)
			}
		})
	}
}
