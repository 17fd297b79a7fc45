package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llm"
)

func TestParseResponses_Accepts(t *testing.T) {
	items := `[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"high"}]},{"type":"function_call_output","call_id":"c","output":"42"}]`
	cases := []struct {
		name string
		body string
		want llm.Bound
		text []string
	}{
		{"StringInput", `{"model":"m","input":"hello","max_output_tokens":300,"stream":true}`,
			llm.Bound{Model: "m", N: 1, Stream: true, MaxOutputTokens: 300, HasMaxOutput: true, PromptBytes: 7}, []string{"hello"}},
		{"Instructions", `{"model":"m","instructions":"be nice","input":"hello"}`,
			llm.Bound{Model: "m", N: 1, PromptBytes: 16}, []string{"be nice", "hello"}},
		{"Items", `{"model":"m","input":` + items + `,"tools":[{"type":"web_search"}]}`,
			llm.Bound{Model: "m", N: 1, PromptBytes: int64(len(items) - len(`"data:image/png;base64,AAAA"`)), Images: 1, ImageTokens: llm.OpenAIImageTokens,
				Tools: 1, ToolTokens: (21+2)/3 + llm.ToolOverheadTokens}, []string{"hi", "42"}},
		{"NullCap", `{"model":"m","input":"x","max_output_tokens":null,"instructions":null}`,
			llm.Bound{Model: "m", N: 1, PromptBytes: 3}, []string{"x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var text []string
			got, err := ParseResponsesText([]byte(c.body), func(s []byte) { text = append(text, string(s)) })
			if err != nil {
				t.Fatal(err)
			}
			if c.want.MinOutputTokens == 0 {
				c.want.MinOutputTokens = MinResponsesOutputTokens
			}
			c.want.InputTokens = llm.TokensForBytes(c.want.PromptBytes) + c.want.ImageTokens + c.want.ToolTokens
			got.Object, got.Cap, got.AltCap, got.StreamOptions, got.IncludeUsageValue = 0, llm.Span{}, llm.Span{}, llm.Span{}, llm.Span{}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if strings.Join(text, "|") != strings.Join(c.text, "|") {
				t.Errorf("text %q, want %q", text, c.text)
			}
		})
	}
}

func TestParseResponses_Rejects(t *testing.T) {
	cases := []struct{ name, body, param string }{
		{"NotObject", `"x"`, ""},
		{"Invalid", `{"model":"m","input":"x"`, ""},
		{"ModelMissing", `{"input":"x"}`, "model"},
		{"InputMissing", `{"model":"m"}`, "input"},
		{"InputEmptyArray", `{"model":"m","input":[]}`, "input"},
		{"InputEmptyString", `{"model":"m","input":""}`, "input"},
		{"InputNumber", `{"model":"m","input":5}`, "input"},
		{"InstructionsNotString", `{"model":"m","input":"x","instructions":[]}`, "instructions"},
		{"MaxOutputTokensNegative", `{"model":"m","input":"x","max_output_tokens":-5}`, "max_output_tokens"},
		{"MaxOutputTokensZero", `{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens"},
		{"MaxOutputTokensTooLarge", `{"model":"m","input":"x","max_output_tokens":4294967296}`, "max_output_tokens"},
		{"MaxOutputTokensBool", `{"model":"m","input":"x","max_output_tokens":true}`, "max_output_tokens"},
		{"MaxOutputTokensDuplicate", `{"model":"m","input":"x","max_output_tokens":20,"max_output_tokens":2000}`, "max_output_tokens"},
		{"StreamString", `{"model":"m","input":"x","stream":"true"}`, "stream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseResponses([]byte(c.body))
			var re *llm.RequestError
			if !errors.As(err, &re) || re.Param != c.param {
				t.Fatalf("err = %#v, want param %q", err, c.param)
			}
		})
	}
}

func TestSetResponsesOutputCap_ReplacesOrInserts(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","input":"x"}`,
		`{"model":"m","max_output_tokens": 99999 ,"input":"x"}`,
		`{"model":"m","input":"x","max_output_tokens":null}`,
	} {
		b, err := ParseResponses([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		out := SetResponsesOutputCap([]byte(body), b, 1234)
		got := sameExcept(t, []byte(body), out, "max_output_tokens")
		if string(got["max_output_tokens"]) != "1234" {
			t.Errorf("%s -> %s", body, out)
		}
	}
}

func BenchmarkParseResponses_1MiB(b *testing.B) {
	body := []byte(`{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_text","text":"` +
		strings.Repeat("lorem ipsum dolor sit amet ", 1<<20/27) + `"}]}],"max_output_tokens":1000}`)
	benchParse(b, body, ParseResponses)
}

func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hello","max_output_tokens":300,"stream":true}`,
		`{"model":"m","instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"u"}]},{"type":"function_call_output","output":[{"type":"input_text","text":"o"}]}],"tools":[{}]}`,
		`{"model":"m","input":[1],"max_output_tokens":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseResponsesText(body, func([]byte) {})
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
		out := SetResponsesOutputCap(body, b, 77)
		if again, err := ParseResponses(out); err != nil || again.MaxOutputTokens != 77 {
			t.Fatalf("edited body %q: %+v, %v", out, again, err)
		}
	})
}
