package openai

import (
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

// ChatUsage reads the usage of a non-streaming chat completion: usage.prompt_tokens,
// completion_tokens and prompt_tokens_details.cached_tokens (or, from servers that report it
// that way, prompt_cache_hit_tokens). ok is false when the body carries no usage object.
func ChatUsage(body []byte) (llm.Usage, bool) {
	return chatUsageAt(body, lookupPath(body, "usage"))
}

func chatUsageAt(b []byte, v int) (llm.Usage, bool) {
	if jsonscan.At(b, v) != '{' {
		return llm.Usage{}, false
	}
	u := llm.Usage{
		InputTokens:  jsonscan.Count(b, jsonscan.Lookup(b, v, "prompt_tokens")),
		OutputTokens: jsonscan.Count(b, jsonscan.Lookup(b, v, "completion_tokens")),
	}
	if d := jsonscan.Lookup(b, v, "prompt_tokens_details"); d >= 0 {
		u.CachedInputTokens = jsonscan.Count(b, jsonscan.Lookup(b, d, "cached_tokens"))
	} else {
		u.CachedInputTokens = jsonscan.Count(b, jsonscan.Lookup(b, v, "prompt_cache_hit_tokens"))
	}
	return u, true
}

// ResponsesUsage reads the usage of a non-streaming Responses API response: usage.input_tokens,
// output_tokens and input_tokens_details.cached_tokens. ok is false without a usage object.
func ResponsesUsage(body []byte) (llm.Usage, bool) {
	return responsesUsageAt(body, lookupPath(body, "usage"))
}

func responsesUsageAt(b []byte, v int) (llm.Usage, bool) {
	if jsonscan.At(b, v) != '{' {
		return llm.Usage{}, false
	}
	u := llm.Usage{
		InputTokens:  jsonscan.Count(b, jsonscan.Lookup(b, v, "input_tokens")),
		OutputTokens: jsonscan.Count(b, jsonscan.Lookup(b, v, "output_tokens")),
	}
	if d := jsonscan.Lookup(b, v, "input_tokens_details"); d >= 0 {
		u.CachedInputTokens = jsonscan.Count(b, jsonscan.Lookup(b, d, "cached_tokens"))
	}
	return u, true
}

// EmbeddingsUsage reads the usage of an embeddings response: usage.prompt_tokens as input.
// ok is false without a usage object.
func EmbeddingsUsage(body []byte) (llm.Usage, bool) {
	v := lookupPath(body, "usage")
	if jsonscan.At(body, v) != '{' {
		return llm.Usage{}, false
	}
	return llm.Usage{InputTokens: jsonscan.Count(body, jsonscan.Lookup(body, v, "prompt_tokens"))}, true
}

// lookupPath follows object members from the top-level value of b and returns the offset of
// the last one's value, or -1.
func lookupPath(b []byte, path ...string) int {
	v := jsonscan.SkipSpace(b, 0)
	for _, key := range path {
		if v = jsonscan.Lookup(b, v, key); v < 0 {
			return -1
		}
	}
	return v
}
