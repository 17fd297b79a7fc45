package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llm"
)

func TestParseEmbeddings_Accepts(t *testing.T) {
	cases := []struct {
		name                         string
		body                         string
		promptBytes, tokenIDs, input int64
		text                         []string
	}{
		{"String", `{"model":"e","input":"hello world"}`, 11, 0, 4, []string{"hello world"}},
		{"Strings", `{"model":"e","input":["ab","c\u00e9"],"dimensions":8}`, 2 + 7, 0, 3, []string{"ab", "cé"}},
		{"TokenArray", `{"model":"e","input":[1,2,3]}`, 0, 3, 3, nil},
		{"TokenArrays", `{"model":"e","input":[[1,2],[3]],"encoding_format":"base64"}`, 0, 3, 3, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var text []string
			b, err := ParseEmbeddingsText([]byte(c.body), func(s []byte) { text = append(text, string(s)) })
			if err != nil {
				t.Fatal(err)
			}
			if b.PromptBytes != c.promptBytes || b.TokenIDs != c.tokenIDs || b.InputTokens != c.input || !b.NoOutput || b.Model != "e" {
				t.Errorf("got %+v", b)
			}
			if strings.Join(text, "|") != strings.Join(c.text, "|") {
				t.Errorf("text %q, want %q", text, c.text)
			}
		})
	}
}

func TestParseEmbeddings_Rejects(t *testing.T) {
	cases := []struct{ name, body, param string }{
		{"InputMissing", `{"model":"e"}`, "input"},
		{"InputEmptyString", `{"model":"e","input":""}`, "input"},
		{"InputEmptyArray", `{"model":"e","input":[]}`, "input"},
		{"InputEmptyTokenArray", `{"model":"e","input":[[]]}`, "input"},
		{"InputObject", `{"model":"e","input":{}}`, "input"},
		{"InputBoolElement", `{"model":"e","input":[true]}`, "input"},
		{"InputNegativeToken", `{"model":"e","input":[-1]}`, "input"},
		{"InputFractionToken", `{"model":"e","input":[[1.5]]}`, "input"},
		{"ModelNotString", `{"model":null,"input":"x"}`, "model"},
		{"Invalid", `{"model":"e","input":"x",}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseEmbeddings([]byte(c.body))
			var re *llm.RequestError
			if !errors.As(err, &re) || re.Param != c.param {
				t.Fatalf("err = %#v, want param %q", err, c.param)
			}
		})
	}
}

func FuzzParseEmbeddings(f *testing.F) {
	for _, s := range []string{`{"model":"e","input":"hello"}`, `{"model":"e","input":[[1,2],[3]]}`, `{"model":"e","input":["a",1,[2]]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseEmbeddingsText(body, func([]byte) {})
		if err != nil {
			var re *llm.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a *llm.RequestError", err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if b.InputTokens < 0 || !b.NoOutput {
			t.Fatalf("bad bound %+v", b)
		}
	})
}
