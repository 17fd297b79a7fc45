// Package anthropic reads and edits the Anthropic Messages wire format the gateway proxies. It
// bounds a request's cost from its body without decoding it, sets max_tokens in place, reads
// usage from responses and streams, and writes and classifies error bodies.
package anthropic

import (
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
	"github.com/sluicehq/sluice/llm/internal/reqparse"
)

var messagesRules = reqparse.Rules{
	PayloadKey:  "source",
	ImageType:   "image",
	TextTypes:   []string{"text"},
	NestedKeys:  []string{"content"},
	ImageTokens: llm.AnthropicImageTokens,
}

const (
	msgModel = iota
	msgMessages
	msgSystem
	msgMaxTokens
	msgStream
	msgTools
	msgThinking
)

var messagesKeys = []string{
	msgModel:     "model",
	msgMessages:  "messages",
	msgSystem:    "system",
	msgMaxTokens: "max_tokens",
	msgStream:    "stream",
	msgTools:     "tools",
	msgThinking:  "thinking",
}

// ParseMessages bounds a POST /v1/messages body: max_tokens, system (a string or text blocks),
// messages and tools. Anthropic requires max_tokens, but its absence is not an error here: the
// gateway inserts it (SetMaxTokens). Documents (PDF) count by their bytes, which overestimates.
func ParseMessages(body []byte) (llm.Bound, error) { return ParseMessagesText(body, nil) }

// ParseMessagesText is ParseMessages that also hands the prompt text to text: system when it is
// a string, every message or tool_result content that is a string, and the "text" of every
// block of type text (tool_result blocks included).
func ParseMessagesText(body []byte, text llm.TextFunc) (llm.Bound, error) {
	b := llm.Bound{N: 1, MinOutputTokens: 1, Cap: llm.NoSpan, AltCap: llm.NoSpan, StreamOptions: llm.NoSpan, IncludeUsageValue: llm.NoSpan}
	keys := reqparse.Keys{Names: messagesKeys}
	w := reqparse.Walker{B: body, Rules: &messagesRules, Text: text, Bound: &b}
	var modelSeen, messagesSeen bool
	obj, err := reqparse.Object(body, func(m jsonscan.Member) (int, error) {
		k, err := keys.Match(body, m)
		if err != nil {
			return m.Value, err
		}
		v := m.Value
		switch k {
		case msgModel:
			modelSeen = true
			var end int
			b.Model, end, err = reqparse.String(body, v, "model")
			return end, err
		case msgMessages:
			messagesSeen = true
			return w.Messages(v, "messages")
		case msgSystem:
			if v < len(body) && body[v] != '"' && body[v] != '[' && !jsonscan.IsNull(body, v) {
				if _, err := jsonscan.Skip(body, v, 2); err != nil {
					return v, reqparse.Syntax(err)
				}
				return v, reqparse.TypeError("system", "a string or an array of text blocks", body, v)
			}
			return w.Prompt(v)
		case msgMaxTokens:
			n, null, end, err := reqparse.OutputCap(body, v, "max_tokens")
			b.Cap = llm.Span{Start: v, End: end}
			if err == nil && !null {
				b.HasMaxOutput, b.MaxOutputTokens = true, n
			}
			return end, err
		case msgStream:
			var end int
			b.Stream, end, err = reqparse.Bool(body, v, "stream")
			return end, err
		case msgTools:
			return reqparse.Tools(body, v, "tools", &b)
		case msgThinking:
			// max_tokens must exceed the thinking budget; Anthropic checks the type.
			if f := jsonscan.Lookup(body, v, "budget_tokens"); f >= 0 {
				b.MinOutputTokens = max(b.MinOutputTokens, jsonscan.Count(body, f)+1)
			}
		}
		return -1, nil
	})
	b.Object = obj
	if err != nil {
		return b, err
	}
	if err := reqparse.RequireModel(modelSeen, b.Model); err != nil {
		return b, err
	}
	if !messagesSeen {
		return b, &llm.RequestError{Param: "messages", Message: "messages: Field required"}
	}
	if b.Tools > 0 {
		b.ToolTokens += llm.AnthropicToolSystemTokens
	}
	reqparse.Finish(&b)
	return b, nil
}

// SetMaxTokens returns body with max_tokens set to n, replaced in place or inserted after the
// opening brace; every other byte is unchanged. b must come from parsing this very body.
func SetMaxTokens(body []byte, b llm.Bound, n int64) []byte {
	return reqparse.SetCap(body, b.Object, b.Cap, "max_tokens", n)
}
