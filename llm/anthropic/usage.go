package anthropic

import (
	"bytes"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

// MessageUsage reads the usage of a non-streaming message. Anthropic's usage.input_tokens
// excludes the tokens read from and written to the prompt cache, so InputTokens is the sum of
// input_tokens, cache_read_input_tokens and cache_creation_input_tokens; CachedInputTokens is
// cache_read_input_tokens and CacheWriteTokens cache_creation_input_tokens. ok is false when
// the body carries no usage object.
func MessageUsage(body []byte) (llm.Usage, bool) {
	return usageAt(body, jsonscan.Lookup(body, jsonscan.SkipSpace(body, 0), "usage"), llm.Usage{})
}

// usageAt reads the usage object at b[v] over prev: fields absent from it keep prev's values
// (a message_delta may carry only output_tokens).
func usageAt(b []byte, v int, prev llm.Usage) (llm.Usage, bool) {
	if jsonscan.At(b, v) != '{' {
		return prev, false
	}
	malformed := false
	get := func(key string, old int64) int64 {
		if f := jsonscan.Lookup(b, v, key); f >= 0 && !jsonscan.IsNull(b, f) {
			n := jsonscan.Count(b, f)
			malformed = malformed || n < 0
			return n
		}
		return old
	}
	uncached := get("input_tokens", prev.UncachedInputTokens())
	read := get("cache_read_input_tokens", prev.CachedInputTokens)
	write := get("cache_creation_input_tokens", prev.CacheWriteTokens)
	output := get("output_tokens", prev.OutputTokens)
	if malformed {
		// A count that did not parse: a sum with it would look possible.
		return llm.Usage{InputTokens: -1, OutputTokens: -1, CachedInputTokens: -1, CacheWriteTokens: -1}, true
	}
	return llm.Usage{InputTokens: uncached + read + write, OutputTokens: output, CachedInputTokens: read, CacheWriteTokens: write}, true
}

// MessagesStream follows a streamed message, one SSE event at a time: input and cache tokens
// from message_start, output from the cumulative usage of the last message_delta (which may
// also restate input and cache counts; the latest values win). Until a message_delta arrives
// the output so far is the larger of message_start's output_tokens and the number of
// content_block_delta events, one token each (a floor: a delta often holds several tokens).
// Events are forwarded unchanged. A usage with a count that does not parse is not believed: the
// usage stays what it was, and Malformed says so. A MessagesStream is not safe for concurrent
// use.
type MessagesStream struct {
	usage     llm.Usage
	started   bool
	reported  bool
	malformed bool
	deltas    int64
}

// Feed takes one event's name and data and returns data (always forwarded unchanged) and the
// usage so far. When the event name is empty the data's "type" is used.
func (s *MessagesStream) Feed(event, data []byte) (forward []byte, usage llm.Usage) {
	typ := event
	v := jsonscan.SkipSpace(data, 0)
	if len(typ) == 0 {
		typ = jsonscan.StringAt(data, jsonscan.Lookup(data, v, "type"))
	}
	switch {
	case bytes.Equal(typ, []byte("content_block_delta")):
		s.deltas++
	case bytes.Equal(typ, []byte("message_start")):
		m := jsonscan.Lookup(data, v, "message")
		if u, ok := usageAt(data, jsonscan.Lookup(data, m, "usage"), s.usage); ok && !s.malformedBy(u) {
			s.usage, s.started = u, true
		}
	case bytes.Equal(typ, []byte("message_delta")):
		if u, ok := usageAt(data, jsonscan.Lookup(data, v, "usage"), s.usage); ok && !s.malformedBy(u) {
			s.usage, s.reported = u, true
		}
	}
	return data, s.Usage()
}

// Usage is the usage so far (see MessagesStream).
func (s *MessagesStream) Usage() llm.Usage {
	u := s.usage
	if !s.reported {
		u.OutputTokens = max(u.OutputTokens, s.deltas)
	}
	return u
}

// Reported reports whether a message_delta with the final usage has been seen.
func (s *MessagesStream) Reported() bool { return s.reported }

// Malformed reports whether a usage with a count that did not parse was seen: the stream's
// usage is then unknown, whatever Usage says.
func (s *MessagesStream) Malformed() bool { return s.malformed }

func (s *MessagesStream) malformedBy(u llm.Usage) bool {
	s.malformed = s.malformed || u.Malformed()
	return u.Malformed()
}
