package gateway

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrincipal_MayAssertWorkspace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		patterns []string
		ws       string
		want     bool
	}{
		{nil, "anything", true},
		{[]string{"ws-a"}, "ws-a", true},
		{[]string{"ws-a"}, "ws-a2", false},
		{[]string{"ws-a"}, "ws-", false},
		{[]string{"team-*"}, "team-red", true},
		{[]string{"team-*"}, "team-", true},
		{[]string{"team-*"}, "team", false},
		{[]string{"team-*"}, "my-team-red", false},
		{[]string{"*"}, "anything", true},
		{[]string{"ws-a", "team-*"}, "team-x", true},
		{[]string{"ws-a", "team-*"}, "ws-b", false},
	} {
		p := Principal{Assert: []string{AssertWorkspace}, AssertWorkspaces: tc.patterns}
		if got := p.mayAssertWorkspace(tc.ws); got != tc.want {
			t.Errorf("patterns %q, workspace %q: %v, want %v", tc.patterns, tc.ws, got, tc.want)
		}
	}
}

func TestParseAssertedValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, want, err string
	}{
		{"alice", "alice", ""},
		{"  alice \t", "alice", ""},
		{"zoë", "zoë", ""},
		{"", "", "is empty"},
		{" \t ", "", "is empty"},
		{strings.Repeat("a", MaxAssertedValue), strings.Repeat("a", MaxAssertedValue), ""},
		{strings.Repeat("a", MaxAssertedValue+1), "", "longer than"},
		{"a\x00b", "", "control characters"},
		{"a\tb", "", "control characters"},
		{"a\u0085b", "", "control characters"},
		{"a\xffb", "", "not valid UTF-8"},
	} {
		got, err := parseAssertedValue([]byte(tc.raw))
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("parseAssertedValue(%q) = %q, %v; want %q, error %q", tc.raw, got, err, tc.want, tc.err)
		}
	}
}

// FuzzParseAssertedValue checks that a value accepted from an identity
// header is non-empty, bounded, trimmed, valid UTF-8 and free of control
// characters, and a part of what was sent.
func FuzzParseAssertedValue(f *testing.F) {
	for _, s := range []string{"alice", " ws-a ", "", "a\x00", "\xff", strings.Repeat("é", 200), "a\u2028b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := parseAssertedValue(raw)
		if err != nil {
			return
		}
		switch {
		case v == "" || len(v) > MaxAssertedValue:
			t.Fatalf("accepted %q: empty or over %d bytes", v, MaxAssertedValue)
		case !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl):
			t.Fatalf("accepted %q: not UTF-8 or with control characters", v)
		case strings.TrimSpace(v) != v || !strings.Contains(string(raw), v):
			t.Fatalf("accepted %q from %q: not the trimmed value", v, raw)
		}
	})
}
