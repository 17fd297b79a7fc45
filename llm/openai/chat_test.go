package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llm"
)

// hiBytes is the length of [{"role":"user","content":"hi"}].
const hiBytes = 32

func TestParseChat_Accepts(t *testing.T) {
	img := `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 3000) + `","detail":"high"}}`
	cases := []struct {
		name string
		body string
		want llm.Bound
	}{
		{"Minimal", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 1, PromptBytes: hiBytes}},
		{"MaxCompletionTokens", `{"model":"m","max_completion_tokens":100,"messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 1, MaxOutputTokens: 100, HasMaxOutput: true, PromptBytes: hiBytes}},
		{"MaxTokensOnly", `{"model":"m","max_tokens":7,"messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 1, MaxOutputTokens: 7, HasMaxOutput: true, PromptBytes: hiBytes}},
		{"BothCapsTakesLarger", `{"model":"m","max_tokens":70,"max_completion_tokens":7,"messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 1, MaxOutputTokens: 70, HasMaxOutput: true, PromptBytes: hiBytes}},
		{"NullCap", `{"model":"m","max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 1, PromptBytes: hiBytes}},
		{"StreamIncludeUsage", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":3,"messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 3, Stream: true, IncludeUsage: true, PromptBytes: hiBytes}},
		{"EscapedModel", `{"model":"gpt\u002d4","messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "gpt-4", N: 1, PromptBytes: hiBytes}},
		{"Image", `{"model":"m","messages":[{"role":"user","content":[` + img + `]}]}`,
			llm.Bound{Model: "m", N: 1, Images: 1, ImageTokens: llm.OpenAIImageTokens, PromptBytes: int64(len(`[{"role":"user","content":[{"type":"image_url","image_url":}]}]`))}},
		{"Tools", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`,
			llm.Bound{Model: "m", N: 1, Tools: 1, ToolTokens: (43+2)/3 + llm.ToolOverheadTokens, PromptBytes: hiBytes}},
		{"NullsAreAbsent", `{"model":"m","n":null,"stream":null,"stream_options":null,"tools":null,"messages":[{"role":"user","content":null}]}`,
			llm.Bound{Model: "m", N: 1, PromptBytes: hiBytes}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseChat([]byte(c.body))
			if err != nil {
				t.Fatalf("ParseChat: %v", err)
			}
			if c.want.MinOutputTokens == 0 {
				c.want.MinOutputTokens = 1
			}
			c.want.InputTokens = llm.TokensForBytes(c.want.PromptBytes) + c.want.ImageTokens + c.want.ToolTokens
			got.Object, got.Cap, got.AltCap, got.StreamOptions, got.IncludeUsageValue = 0, llm.Span{}, llm.Span{}, llm.Span{}, llm.Span{}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseChat_Rejects(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, param string
	}{
		{"NotJSON", `hello`, ""},
		{"NotObject", `[1,2]`, ""},
		{"InvalidJSON", `{"model":"m",` + msgs + `,}`, ""},
		{"TrailingData", `{"model":"m",` + msgs + `} {}`, ""},
		{"InvalidJSONInSkippedField", `{"model":"m","temperature":01,` + msgs + `}`, ""},
		{"ModelMissing", `{` + msgs + `}`, "model"},
		{"ModelNotString", `{"model":5,` + msgs + `}`, "model"},
		{"ModelEmpty", `{"model":"",` + msgs + `}`, "model"},
		{"MessagesMissing", `{"model":"m"}`, "messages"},
		{"MessagesEmpty", `{"model":"m","messages":[]}`, "messages"},
		{"MessagesNotArray", `{"model":"m","messages":{"role":"user"}}`, "messages"},
		{"MessageNotObject", `{"model":"m","messages":["hi"]}`, "messages[]"},
		{"MaxTokensNegative", `{"model":"m","max_tokens":-1,` + msgs + `}`, "max_tokens"},
		{"MaxTokensZero", `{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens"},
		{"MaxTokensTooLarge", `{"model":"m","max_tokens":2147483648,` + msgs + `}`, "max_tokens"},
		{"MaxTokensHuge", `{"model":"m","max_tokens":99999999999999999999999,` + msgs + `}`, "max_tokens"},
		{"MaxTokensString", `{"model":"m","max_tokens":"100",` + msgs + `}`, "max_tokens"},
		{"MaxTokensFraction", `{"model":"m","max_tokens":1.5,` + msgs + `}`, "max_tokens"},
		{"MaxCompletionTokensZero", `{"model":"m","max_completion_tokens":0,` + msgs + `}`, "max_completion_tokens"},
		{"MaxTokensDuplicate", `{"model":"m","max_tokens":1,"max_tokens":100000,` + msgs + `}`, "max_tokens"},
		{"MaxTokensEscapedDuplicate", `{"model":"m","max_tokens":1,"max_tok\u0065ns":100000,` + msgs + `}`, "max_tokens"},
		{"MaxTokensCaseVariant", `{"model":"m","MAX_TOKENS":100000,` + msgs + `}`, "max_tokens"},
		{"MaxTokensKelvinVariant", `{"model":"m","stream_options":{"include_usage":true},"max_to\u212aens":5,` + msgs + `}`, "max_tokens"},
		{"NZero", `{"model":"m","n":0,` + msgs + `}`, "n"},
		{"NTooLarge", `{"model":"m","n":129,` + msgs + `}`, "n"},
		{"NString", `{"model":"m","n":"2",` + msgs + `}`, "n"},
		{"StreamNotBool", `{"model":"m","stream":1,` + msgs + `}`, "stream"},
		{"StreamOptionsNotObject", `{"model":"m","stream_options":true,` + msgs + `}`, "stream_options"},
		{"IncludeUsageNotBool", `{"model":"m","stream_options":{"include_usage":"yes"},` + msgs + `}`, "stream_options.include_usage"},
		{"ToolsNotArray", `{"model":"m","tools":{},` + msgs + `}`, "tools"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseChat([]byte(c.body))
			var re *llm.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want *llm.RequestError", err)
			}
			if re.Param != c.param {
				t.Errorf("param = %q, want %q (message %q)", re.Param, c.param, re.Message)
			}
			if re.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestParseChatText_VisitsText(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"be \"brief\""},` +
		`{"role":"user","content":[{"type":"text","text":"caf\u00e9"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"1","content":"42"}]}`
	var got []string
	b, err := ParseChatText([]byte(body), func(s []byte) { got = append(got, string(s)) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`be "brief"`, "café", "42"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("text = %q, want %q", got, want)
	}
	if b.Images != 1 {
		t.Errorf("images = %d, want 1", b.Images)
	}
}

// sameExcept checks that edited decodes to a JSON object whose members other than the named
// ones are byte-identical to original's, and returns the decoded edited body.
func sameExcept(t *testing.T, original, edited []byte, names ...string) map[string]json.RawMessage {
	t.Helper()
	if !json.Valid(edited) {
		t.Fatalf("edited body is not valid JSON: %s", edited)
	}
	var before, after map[string]json.RawMessage
	if err := json.Unmarshal(original, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(edited, &after); err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{}
	for _, n := range names {
		skip[n] = true
	}
	for k, v := range before {
		if !skip[k] && !bytes.Equal(v, after[k]) {
			t.Errorf("member %q changed: %s -> %s", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && !skip[k] {
			t.Errorf("member %q added", k)
		}
	}
	return after
}

func TestEditChat_OutputCap(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, field string
		want              map[string]string
	}{
		{"Insert", `{"model":"m",` + msgs + `}`, "", map[string]string{"max_completion_tokens": "500"}},
		{"InsertLegacyName", `{"model":"m",` + msgs + `}`, "max_tokens", map[string]string{"max_tokens": "500"}},
		{"InsertWithSpace", "{ \n\"model\":\"m\"," + msgs + `}`, "", map[string]string{"max_completion_tokens": "500"}},
		{"ReplaceMaxTokens", `{"model":"m","max_tokens": 9000 ,` + msgs + `}`, "", map[string]string{"max_tokens": "500"}},
		{"ReplaceBoth", `{"model":"m","max_tokens":9000,"max_completion_tokens":10,` + msgs + `}`, "", map[string]string{"max_tokens": "500", "max_completion_tokens": "500"}},
		{"ReplaceNull", `{"model":"m","max_completion_tokens":null,` + msgs + `}`, "", map[string]string{"max_completion_tokens": "500"}},
		{"ReplaceNullMaxTokens", `{"model":"m","max_tokens":null,` + msgs + `}`, "", map[string]string{"max_tokens": "500"}},
		{"ReplaceOnlyNumberNotNull", `{"model":"m","max_tokens":null,"max_completion_tokens":3,` + msgs + `}`, "", map[string]string{"max_tokens": "null", "max_completion_tokens": "500"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := ParseChat([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			out := EditChat([]byte(c.body), b, ChatEdit{OutputCap: 500, CapField: c.field})
			var names []string
			for k := range c.want {
				names = append(names, k)
			}
			got := sameExcept(t, []byte(c.body), out, names...)
			for k, v := range c.want {
				if string(got[k]) != v {
					t.Errorf("%s = %s, want %s (body %s)", k, got[k], v, out)
				}
			}
			again, err := ParseChat(out)
			if err != nil || again.MaxOutputTokens != 500 {
				t.Errorf("reparse: %+v, %v", again, err)
			}
		})
	}
}

func TestEditChat_IncludeUsage(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, want string
	}{
		{"Insert", `{"model":"m","stream":true,` + msgs + `}`, `{"include_usage":true}`},
		{"ReplaceNull", `{"model":"m","stream":true,"stream_options":null,` + msgs + `}`, `{"include_usage":true}`},
		{"InsertIntoEmpty", `{"model":"m","stream":true,"stream_options":{ },` + msgs + `}`, `{"include_usage":true }`},
		{"InsertIntoOther", `{"model":"m","stream":true,"stream_options":{"x":1},` + msgs + `}`, `{"include_usage":true,"x":1}`},
		{"ReplaceFalse", `{"model":"m","stream":true,"stream_options":{"include_usage":false},` + msgs + `}`, `{"include_usage":true}`},
		{"ReplaceNullValue", `{"model":"m","stream":true,"stream_options":{"x":1,"include_usage":null},` + msgs + `}`, `{"x":1,"include_usage":true}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := ParseChat([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			out := EditChat([]byte(c.body), b, ChatEdit{IncludeUsage: true, OutputCap: 64})
			got := sameExcept(t, []byte(c.body), out, "stream_options", "max_completion_tokens")
			if string(got["stream_options"]) != c.want {
				t.Errorf("stream_options = %s, want %s", got["stream_options"], c.want)
			}
			again, err := ParseChat(out)
			if err != nil || !again.IncludeUsage || again.MaxOutputTokens != 64 {
				t.Errorf("reparse: %+v, %v", again, err)
			}
		})
	}
}

func chatBody(textBytes int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"gpt-4o","stream":true,"max_tokens":1000,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"`)
	word := "lorem ipsum dolor sit amet, \\\"consectetur\\\" adipiscing elit. "
	for sb.Len() < textBytes {
		sb.WriteString(word)
	}
	sb.WriteString(`"}],"temperature":0.7}`)
	return []byte(sb.String())
}

func BenchmarkParseChat_1KiB(b *testing.B) { benchParse(b, chatBody(1<<10), ParseChat) }
func BenchmarkParseChat_1MiB(b *testing.B) { benchParse(b, chatBody(1<<20), ParseChat) }
func BenchmarkParseChat_ManyMessages(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"gpt-4o","messages":[`)
	for i := 0; i < 2000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"role":"user","content":[{"type":"text","text":"hello there, how are you today?"}]}`)
	}
	sb.WriteString(`]}`)
	benchParse(b, []byte(sb.String()), ParseChat)
}

// BenchmarkJSONValid_1MiB is the peer: encoding/json's Valid over the same body.
func BenchmarkJSONValid_1MiB(b *testing.B) {
	body := chatBody(1 << 20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(body) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkJSONUnmarshal_1MiB is the peer a naive gateway would use: decoding the body.
func BenchmarkJSONUnmarshal_1MiB(b *testing.B) {
	body := chatBody(1 << 20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v struct {
			Model     string `json:"model"`
			MaxTokens *int64 `json:"max_tokens"`
			Messages  []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func benchParse(b *testing.B, body []byte, parse func([]byte) (llm.Bound, error)) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParseChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"n":2,"stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"tools":[{"type":"function"}]}`,
		`{"model":"m","max_completion_tokens":null,"messages":[{}]}`,
		`{"model":"m","messages":[{"content":"\ud83d\ude00"}]}`,
		`{"model":"m","stream_options":{},"messages":[1]}`,
		`[]`, `{`, `{"model":"m","max_tokens":-0,"messages":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseChatText(body, func([]byte) {})
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
		if b.N < 1 || b.InputTokens < 0 || b.PromptBytes < 0 {
			t.Fatalf("bad bound %+v", b)
		}
		out := EditChat(body, b, ChatEdit{OutputCap: 77, IncludeUsage: true})
		again, err := ParseChat(out)
		if err != nil {
			t.Fatalf("edited body %q rejected: %v", out, err)
		}
		if again.MaxOutputTokens != 77 || !again.IncludeUsage {
			t.Fatalf("edited body %q reparsed as %+v", out, again)
		}
	})
}

// EnsureCapField puts the cap in CapField too when the request capped its
// output only in the other field.
func TestEditChat_EnsureCapField(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","max_completion_tokens":40,"messages":[{"role":"user","content":"x"}]}`, `{"max_tokens":7,"model":"m","max_completion_tokens":7,"messages":[{"role":"user","content":"x"}]}`},
		{`{"model":"m","max_tokens":40,"messages":[{"role":"user","content":"x"}]}`, `{"model":"m","max_tokens":7,"messages":[{"role":"user","content":"x"}]}`},
		{`{"model":"m","max_tokens":null,"max_completion_tokens":40,"messages":[{"role":"user","content":"x"}]}`, `{"model":"m","max_tokens":7,"max_completion_tokens":7,"messages":[{"role":"user","content":"x"}]}`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, `{"max_tokens":7,"model":"m","messages":[{"role":"user","content":"x"}]}`},
	} {
		b, err := ParseChat([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		got := EditChat([]byte(tc.body), b, ChatEdit{OutputCap: 7, CapField: "max_tokens", EnsureCapField: true})
		if string(got) != tc.want {
			t.Errorf("%s: got %s, want %s", tc.body, got, tc.want)
		}
	}
}
