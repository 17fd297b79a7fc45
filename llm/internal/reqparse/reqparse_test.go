package reqparse

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

func TestKeys_MatchRejectsDuplicatesAndLookalikes(t *testing.T) {
	cases := []struct {
		name, body string
		param      string // "" means accepted
	}{
		{"Distinct", `{"a":1,"bb":2,"other":3}`, ""},
		{"Duplicate", `{"a":1,"a":2}`, "a"},
		{"EscapedDuplicate", `{"bb":1,"\u0062b":2}`, "bb"},
		{"CaseVariant", `{"BB":1}`, "bb"},
		{"LongSVariant", `{"x":1,"other":1,"ſ":1}`, "s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(c.body)
			k := Keys{Names: []string{"a", "bb", "s"}}
			_, err := jsonscan.Object(b, 0, 1, func(m jsonscan.Member) (int, error) {
				_, err := k.Match(b, m)
				return -1, err
			})
			var re *llm.RequestError
			switch {
			case c.param == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.param != "" && (!errors.As(err, &re) || re.Param != c.param):
				t.Fatalf("err %v, want param %q", err, c.param)
			}
		})
	}
}

func TestSplice_AppliesSortedEdits(t *testing.T) {
	body := []byte(`{"a":1,"b":2}`)
	got := Splice(body, Insert(body, 0, []byte(`"z":0`)), Edit{Start: 5, End: 6, Text: []byte("100")})
	if string(got) != `{"z":0,"a":100,"b":2}` || string(body) != `{"a":1,"b":2}` {
		t.Errorf("got %s, body %s", got, body)
	}
	empty := []byte(`{ }`)
	if got := Splice(empty, Insert(empty, 0, []byte(`"z":0`))); string(got) != `{"z":0 }` {
		t.Errorf("empty object: %s", got)
	}
}
