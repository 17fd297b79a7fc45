package names

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, err string
	}{
		{"batch", ""},
		{"interactive-2", ""},
		{"tier.pro_v1", ""},
		{"zoë", ""},
		{strings.Repeat("a", MaxBytes), ""},
		{"", "is empty"},
		{strings.Repeat("a", MaxBytes+1), "at most 256"},
		{"a b", "spaces, slashes or control"},
		{"a/b", "spaces, slashes or control"},
		{"a\tb", "spaces, slashes or control"},
		{"a\u00a0b", "spaces, slashes or control"},
		{"a\x1fb", "spaces, slashes or control"},
		{"a\xffb", "not valid UTF-8"},
	} {
		err := Check(tc.name)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Check(%q) = %v, want an error containing %q", tc.name, err, tc.err)
		}
	}
}
