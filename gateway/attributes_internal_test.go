package gateway

import (
	"errors"
	"strings"
	"testing"
)

func TestValidAttribute(t *testing.T) {
	cases := []struct {
		v    string
		max  int
		want bool
	}{
		{"", 8, true},
		{"alice", 8, true},
		{"zoë", 8, true},
		{"123456789", 8, false},
		{"bad\xff", 8, false},
		{"a\x00b", 8, false},
		{"a\tb", 8, false},
		{"a\u0085b", 8, false},
	}
	for _, c := range cases {
		if got := validAttribute(c.v, c.max); got != c.want {
			t.Errorf("validAttribute(%q, %d) = %v, want %v", c.v, c.max, got, c.want)
		}
	}
}

func TestCheckTags_RefusesBadBytes(t *testing.T) {
	cases := []struct {
		header string
		ok     bool
	}{
		{"", true},
		{" alpha , beta,, ", true},
		{"alpha," + strings.Repeat("t", 65), true}, // too long: dropped by parseTags, not refused
		{"équipe,東京", true},
		{"alpha,bad\xff", false},
		{"alpha\x00", false},
		{"al\x1fpha", false},
	}
	for _, c := range cases {
		err := checkTags([]byte(c.header))
		if c.ok {
			if err != nil {
				t.Errorf("checkTags(%q) = %v, want nil", c.header, err)
			}
			continue
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != 400 || ae.param != HeaderTags || !strings.Contains(ae.message, "valid UTF-8") {
			t.Errorf("checkTags(%q) = %v, want a 400 naming %s", c.header, err, HeaderTags)
		}
	}
}

// FuzzCheckTags: whatever checkTags lets through, parseTags turns into tags
// a database stores as text.
func FuzzCheckTags(f *testing.F) {
	f.Add([]byte("alpha,beta"))
	f.Add([]byte("bad\xff"))
	f.Fuzz(func(t *testing.T, v []byte) {
		if checkTags(v) != nil {
			return
		}
		for _, tag := range parseTags(v) {
			if !validAttribute(tag, 64) {
				t.Fatalf("tag %q of %q passed checkTags", tag, v)
			}
		}
	})
}
