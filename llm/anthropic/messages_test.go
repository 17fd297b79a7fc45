package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llm"
)

func TestParseMessages_Accepts(t *testing.T) {
	msgs := `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"type":"image","source":"not an image"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"res"},{"type":"image","source":{"type":"url","url":"u"}}]}]}]`
	payloads := len(`{"type":"base64","media_type":"image/png","data":"AAAA"}`) + len(`{"type":"url","url":"u"}`)
	cases := []struct {
		name string
		body string
		want llm.Bound
		text []string
	}{
		{"Minimal", `{"model":"claude","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}]}`,
			llm.Bound{Model: "claude", N: 1, MaxOutputTokens: 1024, HasMaxOutput: true, PromptBytes: 35}, []string{"Hello"}},
		{"Thinking", `{"model":"claude","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Hello"}]}`,
			llm.Bound{Model: "claude", N: 1, MaxOutputTokens: 4096, HasMaxOutput: true, MinOutputTokens: 1025, PromptBytes: 35}, []string{"Hello"}},
		{"NoMaxTokens", `{"model":"claude","system":"sys","stream":true,"messages":[{"role":"user","content":"Hello"}]}`,
			llm.Bound{Model: "claude", N: 1, Stream: true, PromptBytes: 35 + 5}, []string{"sys", "Hello"}},
		{"SystemBlocks", `{"model":"claude","max_tokens":5,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"Hello"}]}`,
			llm.Bound{Model: "claude", N: 1, MaxOutputTokens: 5, HasMaxOutput: true, PromptBytes: 35 + int64(len(`[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]`))}, []string{"a", "Hello"}},
		{"ImagesAndTools", `{"model":"claude","max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"messages":` + msgs + `}`,
			llm.Bound{Model: "claude", N: 1, MaxOutputTokens: 5, HasMaxOutput: true, PromptBytes: int64(len(msgs) - payloads),
				Images: 2, ImageTokens: 2 * llm.AnthropicImageTokens, Tools: 1,
				ToolTokens: llm.TokensForBytes(int64(len(`{"name":"f","input_schema":{}}`))) + llm.ToolOverheadTokens + llm.AnthropicToolSystemTokens}, []string{"look", "res"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var text []string
			got, err := ParseMessagesText([]byte(c.body), func(s []byte) { text = append(text, string(s)) })
			if err != nil {
				t.Fatal(err)
			}
			if c.want.MinOutputTokens == 0 {
				c.want.MinOutputTokens = 1
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

func TestParseMessages_Rejects(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct{ name, body, param string }{
		{"NotObject", `null`, ""},
		{"Invalid", `{"model":"c",` + msgs + `,"max_tokens":1`, ""},
		{"ModelMissing", `{"max_tokens":1,` + msgs + `}`, "model"},
		{"ModelNotString", `{"model":["c"],"max_tokens":1,` + msgs + `}`, "model"},
		{"MessagesMissing", `{"model":"c","max_tokens":1}`, "messages"},
		{"MessagesEmpty", `{"model":"c","max_tokens":1,"messages":[]}`, "messages"},
		{"MessagesNotArray", `{"model":"c","max_tokens":1,"messages":"hi"}`, "messages"},
		{"MaxTokensNegative", `{"model":"c","max_tokens":-1,` + msgs + `}`, "max_tokens"},
		{"MaxTokensZero", `{"model":"c","max_tokens":0,` + msgs + `}`, "max_tokens"},
		{"MaxTokensTooLarge", `{"model":"c","max_tokens":2147483648,` + msgs + `}`, "max_tokens"},
		{"MaxTokensString", `{"model":"c","max_tokens":"1",` + msgs + `}`, "max_tokens"},
		{"MaxTokensDuplicate", `{"model":"c","max_tokens":1,` + msgs + `,"max_tokens":64000}`, "max_tokens"},
		{"MaxTokensCaseVariant", `{"model":"c","Max_Tokens":64000,` + msgs + `}`, "max_tokens"},
		{"SystemNumber", `{"model":"c","max_tokens":1,"system":1,` + msgs + `}`, "system"},
		{"StreamNotBool", `{"model":"c","max_tokens":1,"stream":"yes",` + msgs + `}`, "stream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMessages([]byte(c.body))
			var re *llm.RequestError
			if !errors.As(err, &re) || re.Param != c.param {
				t.Fatalf("err = %#v, want param %q", err, c.param)
			}
		})
	}
}

func TestSetMaxTokens_ReplacesOrInserts(t *testing.T) {
	for _, body := range []string{
		`{"model":"c","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"c","max_tokens":64000,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"c","messages":[{"role":"user","content":"hi"}],"max_tokens":null}`,
	} {
		b, err := ParseMessages([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		out := SetMaxTokens([]byte(body), b, 321)
		if !json.Valid(out) {
			t.Fatalf("invalid: %s", out)
		}
		var before, after map[string]json.RawMessage
		json.Unmarshal([]byte(body), &before)
		json.Unmarshal(out, &after)
		for k, v := range before {
			if k != "max_tokens" && !bytes.Equal(v, after[k]) {
				t.Errorf("%s changed", k)
			}
		}
		if string(after["max_tokens"]) != "321" || len(after) != len(before)+boolInt(before["max_tokens"] == nil) {
			t.Errorf("%s -> %s", body, out)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func BenchmarkParseMessages_1MiB(b *testing.B) {
	body := []byte(`{"model":"claude","max_tokens":1024,"system":"You are helpful.","messages":[{"role":"user","content":[{"type":"text","text":"` +
		strings.Repeat("lorem ipsum dolor sit amet ", 1<<20/27) + `"}]}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMessages(body); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`{"model":"claude","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}]}`,
		`{"model":"c","max_tokens":5,"system":[{"type":"text","text":"a"}],"tools":[{}],"messages":[{"role":"user","content":[{"type":"image","source":{"data":"x"}},{"type":"tool_result","content":[{"type":"text","text":"r"}]}]}]}`,
		`{"model":"c","max_tokens":null,"messages":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseMessagesText(body, func([]byte) {})
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
		out := SetMaxTokens(body, b, 77)
		if again, err := ParseMessages(out); err != nil || again.MaxOutputTokens != 77 {
			t.Fatalf("edited body %q: %+v, %v", out, again, err)
		}
	})
}
