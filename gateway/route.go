package gateway

import (
	"encoding/json"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
)

// route is one client API: how to bound a request, edit it, read its
// usage, and answer errors in its shape.
type route struct {
	path string
	// name is the route's name in rules and the ledger (chat, responses,
	// embeddings, messages).
	name      string
	anthropic bool
	parse     func(body []byte) (llm.Bound, error)
	// text parses as parse does, handing each piece of prompt text to a
	// function (for checkContext); nil where no window is checked.
	text func(body []byte, fn llm.TextFunc) (llm.Bound, error)
	// setCap returns the body with its output cap set; nil for routes
	// without output.
	setCap func(body []byte, b llm.Bound, n int64) []byte
	usage  func(body []byte) (llm.Usage, bool)
	stream func(injectedUsage bool) streamReader
}

// streamReader follows one SSE stream (see llm/openai and llm/anthropic).
type streamReader interface {
	Feed(event, data []byte) (forward []byte, usage llm.Usage)
	Usage() llm.Usage
	Reported() bool
	// Malformed reports a usage seen with a count that did not parse:
	// the call is then charged its reservation.
	Malformed() bool
}

var routes = map[string]*route{
	"/v1/chat/completions": {
		path: "/v1/chat/completions", name: "chat",
		parse: openai.ParseChat, text: openai.ParseChatText, setCap: openai.SetChatOutputCap, usage: openai.ChatUsage,
		stream: func(injected bool) streamReader { return &openai.ChatStream{StripUsage: injected} },
	},
	"/v1/responses": {
		path: "/v1/responses", name: "responses",
		parse: openai.ParseResponses, text: openai.ParseResponsesText, setCap: openai.SetResponsesOutputCap, usage: openai.ResponsesUsage,
		stream: func(bool) streamReader { return &openai.ResponsesStream{} },
	},
	"/v1/embeddings": {
		path: "/v1/embeddings", name: "embeddings",
		parse: openai.ParseEmbeddings, usage: openai.EmbeddingsUsage,
	},
	"/v1/messages": {
		path: "/v1/messages", name: "messages", anthropic: true,
		parse: anthropic.ParseMessages, text: anthropic.ParseMessagesText, setCap: anthropic.SetMaxTokens, usage: anthropic.MessageUsage,
		stream: func(bool) streamReader { return &anthropic.MessagesStream{} },
	},
	// Counting a prompt's tokens runs no model: request rules count the
	// call, token and cost rules are charged nothing.
	"/v1/messages/count_tokens": {
		path: "/v1/messages/count_tokens", name: "count_tokens", anthropic: true,
		parse: parseCountTokens,
		usage: func([]byte) (llm.Usage, bool) { return llm.Usage{}, true },
	},
}

// parseCountTokens bounds a POST /v1/messages/count_tokens body (a
// Messages request without max_tokens) at no tokens and no output.
func parseCountTokens(body []byte) (llm.Bound, error) {
	b, err := anthropic.ParseMessages(body)
	if err != nil {
		return b, err
	}
	b.InputTokens, b.NoOutput, b.HasMaxOutput, b.MaxOutputTokens, b.Stream = 0, true, false, 0, false
	return b, nil
}

// streamError is the event that ends a stream the gateway cannot go on
// with, in the route's own shape: Anthropic's error event, the Responses
// API's, or a chat completion chunk's error followed by [DONE].
func (rt *route) streamError(message string) []byte {
	msg, _ := json.Marshal(message)
	switch {
	case rt.anthropic:
		return []byte(`event: error` + "\n" + `data: {"type":"error","error":{"type":"api_error","message":` + string(msg) + `}}` + "\n\n")
	case rt.name == "responses":
		return []byte(`event: error` + "\n" + `data: {"type":"error","code":"upstream_event_too_large","message":` + string(msg) + `}` + "\n\n")
	}
	return []byte(`data: {"error":{"message":` + string(msg) + `,"type":"server_error","code":"upstream_event_too_large"}}` + "\n\n" + "data: [DONE]\n\n")
}
