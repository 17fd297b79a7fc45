// Package openai reads and edits the OpenAI wire formats the gateway proxies: Chat
// Completions, Responses and Embeddings. It bounds a request's cost from its body without
// decoding it, sets the output cap and stream_options in place, reads usage from responses
// and streams, and writes and classifies error bodies.
package openai

import (
	"cmp"
	"slices"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
	"github.com/sluicehq/sluice/llm/internal/reqparse"
)

// MaxN is the largest n a chat request may ask for.
const MaxN = 128

var chatRules = reqparse.Rules{
	PayloadKey:  "image_url",
	TextTypes:   []string{"text"},
	NestedKeys:  []string{"content"},
	ImageTokens: llm.OpenAIImageTokens,
}

const (
	chatModel = iota
	chatMessages
	chatMaxCompletionTokens
	chatMaxTokens
	chatN
	chatStream
	chatStreamOptions
	chatTools
	chatFunctions
)

var chatKeys = []string{
	chatModel:               "model",
	chatMessages:            "messages",
	chatMaxCompletionTokens: "max_completion_tokens",
	chatMaxTokens:           "max_tokens",
	chatN:                   "n",
	chatStream:              "stream",
	chatStreamOptions:       "stream_options",
	chatTools:               "tools",
	chatFunctions:           "functions",
}

// ParseChat bounds a POST /v1/chat/completions body. The output cap is the larger of
// max_completion_tokens and max_tokens when both are set (a provider may honour either).
// Bound.Cap points at max_completion_tokens and Bound.AltCap at max_tokens. Images (parts with
// image_url) count as llm.OpenAIImageTokens each; audio and file parts count by their bytes,
// which overestimates them.
func ParseChat(body []byte) (llm.Bound, error) { return ParseChatText(body, nil) }

// ParseChatText is ParseChat that also hands the prompt text to text: every message content
// that is a string, and the "text" of every content part of type "text".
func ParseChatText(body []byte, text llm.TextFunc) (llm.Bound, error) {
	b := llm.Bound{N: 1, MinOutputTokens: 1, Cap: llm.NoSpan, AltCap: llm.NoSpan, StreamOptions: llm.NoSpan, IncludeUsageValue: llm.NoSpan}
	keys := reqparse.Keys{Names: chatKeys}
	w := reqparse.Walker{B: body, Rules: &chatRules, Text: text, Bound: &b}
	var modelSeen, messagesSeen bool
	obj, err := reqparse.Object(body, func(m jsonscan.Member) (int, error) {
		k, err := keys.Match(body, m)
		if err != nil {
			return m.Value, err
		}
		v := m.Value
		switch k {
		case chatModel:
			modelSeen = true
			var end int
			b.Model, end, err = reqparse.String(body, v, "model")
			return end, err
		case chatMessages:
			messagesSeen = true
			return w.Messages(v, "messages")
		case chatMaxCompletionTokens, chatMaxTokens:
			n, null, end, err := reqparse.OutputCap(body, v, chatKeys[k])
			if k == chatMaxCompletionTokens {
				b.Cap = llm.Span{Start: v, End: end}
			} else {
				b.AltCap = llm.Span{Start: v, End: end}
			}
			if err == nil && !null {
				b.HasMaxOutput = true
				b.MaxOutputTokens = max(b.MaxOutputTokens, n)
			}
			return end, err
		case chatN:
			n, null, end, err := reqparse.Int(body, v, "n")
			if err != nil || null {
				return end, err
			}
			if n < 1 || n > MaxN {
				return end, &llm.RequestError{Param: "n", Message: "Invalid 'n': expected a value between 1 and 128."}
			}
			b.N = n
			return end, nil
		case chatStream:
			var end int
			b.Stream, end, err = reqparse.Bool(body, v, "stream")
			return end, err
		case chatStreamOptions:
			return streamOptions(body, v, &b)
		case chatTools, chatFunctions:
			return reqparse.Tools(body, v, chatKeys[k], &b)
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
		return b, &llm.RequestError{Param: "messages", Message: "Missing required parameter: 'messages'."}
	}
	reqparse.Finish(&b)
	return b, nil
}

func streamOptions(body []byte, v int, b *llm.Bound) (int, error) {
	if jsonscan.IsNull(body, v) {
		b.StreamOptions = llm.Span{Start: v, End: v + 4}
		return v + 4, nil
	}
	if v >= len(body) || body[v] != '{' {
		if _, err := jsonscan.Skip(body, v, 2); err != nil {
			return v, reqparse.Syntax(err)
		}
		return v, reqparse.TypeError("stream_options", "an object", body, v)
	}
	keys := reqparse.Keys{Names: []string{"include_usage"}}
	end, err := jsonscan.Object(body, v, 2, func(m jsonscan.Member) (int, error) {
		k, err := keys.Match(body, m)
		if err != nil || k < 0 {
			return -1, err
		}
		on, end, err := reqparse.Bool(body, m.Value, "stream_options.include_usage")
		b.IncludeUsage = on
		b.IncludeUsageValue = llm.Span{Start: m.Value, End: end}
		return end, err
	})
	if err != nil {
		return end, reqparse.Syntax(err)
	}
	b.StreamOptions = llm.Span{Start: v, End: end}
	return end, nil
}

// ChatEdit says how EditChat changes a chat request.
type ChatEdit struct {
	// OutputCap, when above 0, becomes the output cap: every cap field the request sets to a
	// number gets it; when none does, a null cap field is replaced, or CapField is inserted.
	OutputCap int64
	// CapField is the field inserted when the request has no cap: empty means
	// max_completion_tokens; set "max_tokens" for servers that know only the older name.
	CapField string
	// EnsureCapField inserts CapField even when the request caps its output in the other
	// field, for a server that reads only CapField.
	EnsureCapField bool
	// IncludeUsage sets stream_options.include_usage to true, inserting what is missing. Set
	// it for streaming requests only: OpenAI rejects stream_options without stream.
	IncludeUsage bool
}

// EditChat returns a copy of body changed as e says, without re-encoding it: values are
// replaced in place and missing fields inserted right after the opening brace, so every other
// byte is unchanged. b must come from parsing this very body.
func EditChat(body []byte, b llm.Bound, e ChatEdit) []byte {
	var edits []reqparse.Edit
	var insert []byte
	if e.OutputCap > 0 {
		value := reqparse.IntText(e.OutputCap)
		set := false
		for _, s := range []llm.Span{b.Cap, b.AltCap} {
			if s.Present() && !reqparse.IsNullSpan(body, s) {
				edits = append(edits, reqparse.Edit{Start: s.Start, End: s.End, Text: value})
				set = true
			}
		}
		field := cmp.Or(e.CapField, "max_completion_tokens")
		if set && e.EnsureCapField {
			span := b.Cap
			if field == "max_tokens" {
				span = b.AltCap
			}
			if !span.Present() {
				insert = reqparse.Member(insert, field, value)
			} else if reqparse.IsNullSpan(body, span) {
				edits = append(edits, reqparse.Edit{Start: span.Start, End: span.End, Text: value})
			}
		}
		if !set {
			nullSpan := b.Cap
			if field == "max_tokens" && b.AltCap.Present() || !b.Cap.Present() {
				nullSpan = b.AltCap
			}
			if nullSpan.Present() {
				edits = append(edits, reqparse.Edit{Start: nullSpan.Start, End: nullSpan.End, Text: value})
			} else {
				insert = reqparse.Member(insert, field, value)
			}
		}
	}
	if e.IncludeUsage {
		switch {
		case b.IncludeUsageValue.Present():
			edits = append(edits, reqparse.Edit{Start: b.IncludeUsageValue.Start, End: b.IncludeUsageValue.End, Text: []byte("true")})
		case b.StreamOptions.Present() && reqparse.IsNullSpan(body, b.StreamOptions):
			edits = append(edits, reqparse.Edit{Start: b.StreamOptions.Start, End: b.StreamOptions.End, Text: []byte(`{"include_usage":true}`)})
		case b.StreamOptions.Present():
			edits = append(edits, reqparse.Insert(body, b.StreamOptions.Start, []byte(`"include_usage":true`)))
		default:
			insert = reqparse.Member(insert, "stream_options", []byte(`{"include_usage":true}`))
		}
	}
	if len(insert) > 0 {
		edits = append(edits, reqparse.Insert(body, b.Object, insert))
	}
	slices.SortFunc(edits, func(x, y reqparse.Edit) int { return cmp.Compare(x.Start, y.Start) })
	return reqparse.Splice(body, edits...)
}

// SetChatOutputCap returns body with its output cap set to n (see ChatEdit.OutputCap).
func SetChatOutputCap(body []byte, b llm.Bound, n int64) []byte {
	return EditChat(body, b, ChatEdit{OutputCap: n})
}

// SetChatIncludeUsage returns body with stream_options.include_usage set to true.
func SetChatIncludeUsage(body []byte, b llm.Bound) []byte {
	return EditChat(body, b, ChatEdit{IncludeUsage: true})
}
