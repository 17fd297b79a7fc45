package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAPI_KeyClassAndMaxWait checks that POST and PATCH /admin/v1/keys set
// a key's class and max wait, which the key's record then carries, and
// that "0s", null and "" give them back to the tier.
func TestAPI_KeyClassAndMaxWait(t *testing.T) {
	e := newEnv(t)
	created := e.must(http.StatusCreated, "POST", "/admin/v1/keys", rootToken, map[string]any{
		"workspace": "w", "user": "a", "class": "batch", "max_wait": "200ms"})
	k := created.body["key"].(map[string]any)
	if k["class"] != "batch" || k["max_wait"] != "200ms" {
		t.Fatalf("created key = %v", k)
	}
	id, secret := k["id"].(string), created.body["secret"].(string)
	got, err := e.cat.Authenticate(context.Background(), secret)
	if err != nil || got.Class != "batch" || time.Duration(got.MaxWait) != 200*time.Millisecond {
		t.Fatalf("the key's record: %+v, %v", got, err)
	}
	k = e.must(http.StatusOK, "GET", "/admin/v1/keys/"+id, rootToken, nil).body["key"].(map[string]any)
	if k["class"] != "batch" || k["max_wait"] != "200ms" {
		t.Fatalf("GET key = %v", k)
	}

	k = e.must(http.StatusOK, "PATCH", "/admin/v1/keys/"+id, rootToken, map[string]any{"class": "interactive", "max_wait": "1m30s"}).body["key"].(map[string]any)
	if k["class"] != "interactive" || k["max_wait"] != "1m30s" {
		t.Fatalf("patched key = %v", k)
	}
	// A field not given stays.
	k = e.must(http.StatusOK, "PATCH", "/admin/v1/keys/"+id, rootToken, map[string]any{"max_wait": "5s"}).body["key"].(map[string]any)
	if k["class"] != "interactive" || k["max_wait"] != "5s" {
		t.Fatalf("key after a PATCH of max_wait alone = %v", k)
	}
	// Back to the tier's: both fields leave the record.
	for _, body := range []string{`{"class": "", "max_wait": null}`, `{"max_wait": "0s"}`} {
		k = e.must(http.StatusOK, "PATCH", "/admin/v1/keys/"+id, rootToken, body).body["key"].(map[string]any)
		if _, ok := k["class"]; ok {
			t.Fatalf("PATCH %s = %v, want no class", body, k)
		}
		if _, ok := k["max_wait"]; ok {
			t.Fatalf("PATCH %s = %v, want no max_wait", body, k)
		}
	}
	got, err = e.cat.Authenticate(context.Background(), secret)
	if err != nil || got.Class != "" || got.MaxWait != 0 {
		t.Fatalf("the key's record after the PATCHes: %+v, %v", got, err)
	}
}

// TestAPI_KeyClassAndMaxWaitRefused checks that a bad class or max wait is
// 400 with a message naming the field, on POST and PATCH, and changes
// nothing.
func TestAPI_KeyClassAndMaxWaitRefused(t *testing.T) {
	e := newEnv(t)
	id, _ := e.createKey("w", "a")
	for _, tc := range []struct {
		name    string
		field   map[string]any
		code    string
		message string
	}{
		{"class with a space", map[string]any{"class": "low priority"}, "invalid", `class "low priority" must not contain spaces, slashes or control characters`},
		{"class with a slash", map[string]any{"class": "a/b"}, "invalid", "must not contain spaces, slashes"},
		{"class not a string", map[string]any{"class": 3}, "invalid_field", `field "class"`},
		{"max_wait a number", map[string]any{"max_wait": 2}, "invalid_field", `field "max_wait": want a duration string such as "2s" or "500ms"`},
		{"max_wait no unit", map[string]any{"max_wait": "2"}, "invalid_field", `field "max_wait"`},
		{"max_wait negative", map[string]any{"max_wait": "-1s"}, "invalid", "max_wait must be from 0"},
		{"max_wait over an hour", map[string]any{"max_wait": "2h"}, "invalid", "to 1h0m0s, got 2h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			create := map[string]any{"workspace": "w", "user": "b"}
			for k, v := range tc.field {
				create[k] = v
			}
			for _, r := range []response{
				e.must(http.StatusBadRequest, "POST", "/admin/v1/keys", rootToken, create),
				e.must(http.StatusBadRequest, "PATCH", "/admin/v1/keys/"+id, rootToken, tc.field),
			} {
				if r.errorCode() != tc.code || !strings.Contains(r.errorMessage(), tc.message) {
					t.Errorf("answer %s; want code %s and %q", r.raw, tc.code, tc.message)
				}
			}
			if after := e.snapshot(); after != before {
				t.Errorf("a refused request changed the catalog: %+v, then %+v", before, after)
			}
		})
	}
}
