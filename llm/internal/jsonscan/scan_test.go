package jsonscan

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestValid_AgreesWithEncodingJSON(t *testing.T) {
	cases := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1.5e10`, `-1E-2`, `true`, `false`, `null`,
		`{"a":1,"b":[1,2,{"c":"d"}],"e":null}`, ` { "a" : "\u00e9\n\"" } `,
		`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`, `"\u12"`,
		"\"a\x01\"", `{"a":1}x`, `tru`, `nul`, `[`, `{`, `"abc`, `{"a":1 "b":2}`, `[1 2]`,
		`"12345678\"12345678"`, `"1234567\\"`, "\"\xff\xfe\"", `{"":""}`, ``, ` `,
	}
	for _, c := range cases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid = %v", c, got, want)
		}
	}
}

func TestValid_DepthLimit(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if !Valid([]byte(deep)) {
		t.Errorf("depth %d rejected", MaxDepth)
	}
	deeper := "[" + deep + "]"
	if Valid([]byte(deeper)) {
		t.Errorf("depth %d accepted", MaxDepth+1)
	}
}

func TestInt_Forms(t *testing.T) {
	cases := []struct {
		in    string
		v     int64
		isInt bool
	}{
		{"0", 0, true},
		{"-12", -12, true},
		{"2147483647", math.MaxInt32, true},
		{"99999999999999999999999", math.MaxInt64, true},
		{"-99999999999999999999999", math.MinInt64, true},
		{"1.0", 0, false},
		{"1e3", 0, false},
	}
	for _, c := range cases {
		v, end, isInt, err := Int([]byte(c.in), 0)
		if err != nil || end != len(c.in) || isInt != c.isInt || (isInt && v != c.v) {
			t.Errorf("Int(%q) = %d, %d, %v, %v", c.in, v, end, isInt, err)
		}
	}
}

func TestUnescape_MatchesEncodingJSON(t *testing.T) {
	cases := []string{`plain`, `a\"b\\c\/d`, `\b\f\n\r\t`, `\u00e9\u4e2d`, `\ud83d\ude00`, `\ud83d`, `\ude00x`, `\ud83d\u0041`}
	for _, c := range cases {
		var want string
		if err := json.Unmarshal([]byte(`"`+c+`"`), &want); err != nil {
			t.Fatal(err)
		}
		if got := string(Unescape(nil, []byte(c))); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", c, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u0041"]}`, `[`, `"\ud800"`, `{"a":tru}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if Valid(b) && !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		// Only input long enough to nest past MaxDepth may be valid JSON that Valid rejects.
		if !Valid(b) && json.Valid(b) && len(b) < 2*MaxDepth {
			t.Fatalf("rejected valid JSON %q", b)
		}
	})
}
