// Package llm holds the types shared by the wire-format packages llm/openai and
// llm/anthropic: what a request may cost at most (Bound), what a response reports (Usage),
// the error for a malformed request (RequestError), and a reader for server-sent events.
//
// The format packages parse just enough of a body to bound its cost, edit it in place without
// re-encoding it, and read usage back from responses and streams.
package llm

// Usage is what a provider reported for one call, in tokens.
//
// InputTokens is every input token, cached or not; CachedInputTokens and CacheWriteTokens are
// the parts of it read from and written to the prompt cache. The fields map from the wire as
// follows.
//
//   - OpenAI Chat Completions and Embeddings: InputTokens = usage.prompt_tokens,
//     OutputTokens = usage.completion_tokens (reasoning tokens included),
//     CachedInputTokens = usage.prompt_tokens_details.cached_tokens, CacheWriteTokens = 0.
//   - OpenAI Responses: InputTokens = usage.input_tokens, OutputTokens = usage.output_tokens
//     (reasoning included), CachedInputTokens = usage.input_tokens_details.cached_tokens,
//     CacheWriteTokens = 0.
//   - Anthropic Messages: the wire's input_tokens excludes cache traffic, so
//     InputTokens = input_tokens + cache_read_input_tokens + cache_creation_input_tokens,
//     CachedInputTokens = cache_read_input_tokens,
//     CacheWriteTokens = cache_creation_input_tokens, OutputTokens = output_tokens.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	CacheWriteTokens  int64
	// AudioInputTokens (not read from a cache) and AudioOutputTokens are
	// the audio parts of the input and output (the Realtime API's).
	AudioInputTokens  int64
	AudioOutputTokens int64
}

// UncachedInputTokens is the input neither read from nor written to the cache: the part priced
// at the plain input rate.
func (u Usage) UncachedInputTokens() int64 {
	return u.InputTokens - u.CachedInputTokens - u.CacheWriteTokens
}

// TotalTokens is input plus output.
func (u Usage) TotalTokens() int64 { return u.InputTokens + u.OutputTokens }

// Malformed reports a usage with a count that did not parse (a negative,
// fractional or non-numeric value): the parsers give such a count as -1,
// and a caller charges what it reserved instead of believing it.
func (u Usage) Malformed() bool {
	return u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0
}

// Span is a byte range [Start, End) of a request body. Start and End are -1 when the field is
// absent.
type Span struct {
	Start, End int
}

// NoSpan marks an absent field.
var NoSpan = Span{Start: -1, End: -1}

// Present reports whether the span points at a field.
func (s Span) Present() bool { return s.Start >= 0 }

// Estimation constants. Input is estimated before the call as
//
//	ceil(PromptBytes / BytesPerToken) + Images × per-image tokens + tool tokens + TokenIDs
//
// where PromptBytes counts the raw JSON bytes of the prompt-carrying fields (messages, system,
// instructions, input) with image payloads (URLs, base64 data) removed; an image counts as a
// fixed number of tokens instead, and each tool definition as ceil(its JSON bytes /
// BytesPerToken) + ToolOverheadTokens.
const (
	// BytesPerToken is the divisor of the byte estimate: 3 bytes per token overestimates most
	// text (English runs near 4), which is the safe side for a reservation.
	BytesPerToken = 3

	// OpenAIImageTokens is the most a high-detail image costs on OpenAI's tile-priced models
	// (GPT-4o, GPT-4.1, GPT-5): the image is fitted in 2048×2048, its short side scaled to 768,
	// and it is billed 85 tokens plus 170 per 512-pixel tile; the worst case is 768×2048,
	// 2×4 tiles, 85 + 8×170 = 1445. The detail level is ignored (low detail costs 85), and
	// models priced with a multiplier (GPT-4o mini) cost more: Bound.Images lets the caller
	// substitute its own per-model number.
	OpenAIImageTokens = 1445

	// AnthropicImageTokens is the most an image costs on Anthropic's models: tokens are about
	// width×height/750 and images are scaled down to about 1.15 megapixels, about 1600 tokens.
	AnthropicImageTokens = 1600

	// ToolOverheadTokens is added per tool definition for the framing the provider wraps
	// around it.
	ToolOverheadTokens = 10

	// AnthropicToolSystemTokens is added once when an Anthropic request defines tools: the
	// tool-use system prompt that Anthropic documents (346 tokens for current models with
	// tool_choice auto or none).
	AnthropicToolSystemTokens = 346
)

// TokensForBytes is the token estimate for n bytes: n / BytesPerToken rounded up.
func TokensForBytes(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + BytesPerToken - 1) / BytesPerToken
}

// MaxOutputTokensLimit is the largest output cap a request may carry (2^31-1).
const MaxOutputTokensLimit = 1<<31 - 1

// Bound is what a parsed request may cost at most, with the offsets the format packages need
// to edit the body in place. The offsets refer to the body that was parsed; an edited body
// must be parsed again before it is edited again.
type Bound struct {
	// Model is the requested model name, unescaped.
	Model string
	// Stream is true when the client asked for a server-sent event stream.
	Stream bool
	// IncludeUsage is true when an OpenAI chat client set stream_options.include_usage.
	IncludeUsage bool
	// NoOutput is true for routes that produce no output tokens (embeddings): the output cap
	// is neither read nor set.
	NoOutput bool

	// MaxOutputTokens is the output cap as sent (per completion), 0 when absent or null.
	MaxOutputTokens int64
	// HasMaxOutput is true when the request carried a non-null output cap.
	HasMaxOutput bool
	// MinOutputTokens is the smallest output cap the provider accepts for this request, the
	// floor for a gateway that lowers the cap: 1, 16 for OpenAI Responses
	// (max_output_tokens), thinking.budget_tokens+1 for Anthropic with extended thinking.
	MinOutputTokens int64
	// N is the number of completions asked for (OpenAI chat n), at least 1.
	N int64

	// InputTokens is the input estimate; see the estimation constants.
	InputTokens int64
	// PromptBytes is the part of the body counted at BytesPerToken.
	PromptBytes int64
	// Images is the number of images found in the prompt.
	Images int64
	// ImageTokens is the part of InputTokens charged for images.
	ImageTokens int64
	// Tools is the number of tool definitions.
	Tools int64
	// ToolTokens is the part of InputTokens charged for tool definitions.
	ToolTokens int64
	// TokenIDs is the number of token ids sent directly (embeddings token-array input), each
	// counted as one token.
	TokenIDs int64

	// Object is the offset of the body's opening brace, where absent fields are inserted.
	Object int
	// Cap is the value of the output cap field (max_completion_tokens, max_output_tokens or
	// max_tokens), null included.
	Cap Span
	// AltCap is, for OpenAI chat, the value of max_tokens (Cap then holds
	// max_completion_tokens).
	AltCap Span
	// StreamOptions is, for OpenAI chat, the value of stream_options.
	StreamOptions Span
	// IncludeUsageValue is, for OpenAI chat, the value of stream_options.include_usage.
	IncludeUsageValue Span
}

// OutputTokens is the output bound: the cap times the number of completions, 0 without a cap.
func (b Bound) OutputTokens() int64 {
	if !b.HasMaxOutput {
		return 0
	}
	return b.MaxOutputTokens * b.N
}

// RequestError is a malformed request: the gateway answers 400 with Param and Message in the
// error shape of the API the client called.
type RequestError struct {
	// Param names the offending field, e.g. "max_tokens" or "messages"; empty for the body as
	// a whole.
	Param string
	// Message is a sentence for the client.
	Message string
	// Err is the underlying cause, if any (a JSON syntax error).
	Err error
}

// Error returns Message.
func (e *RequestError) Error() string { return e.Message }

// Unwrap returns the underlying cause.
func (e *RequestError) Unwrap() error { return e.Err }

// TextFunc receives each piece of prompt text of a request, unescaped, in body order. The slice
// is valid only during the call.
type TextFunc func(text []byte)
