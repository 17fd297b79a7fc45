package openai

import (
	"bytes"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
	"github.com/sluicehq/sluice/llm/internal/reqparse"
)

// ChatStream follows a streamed chat completion, one SSE event at a time. The zero value
// forwards every event unchanged. A ChatStream is not safe for concurrent use.
//
// Output is counted as the stream goes, so that a stream cut before its usage chunk can still
// be charged: each chunk adds one token per choice whose delta carries content, a refusal,
// reasoning or a tool call. One delta is close to one token on OpenAI's own servers; other
// servers may pack more into a delta, so the count is a floor, not the truth.
type ChatStream struct {
	// StripUsage hides usage the client did not ask for: set it when the gateway injected
	// stream_options.include_usage. The final usage-only chunk (empty choices) is dropped and
	// the "usage" member is removed from every other chunk.
	StripUsage bool

	usage     llm.Usage
	reported  bool
	malformed bool
	deltas    int64
}

// Feed takes the data payload of one event (the event name is not used by this format) and
// returns what to forward: data itself when unchanged, a new slice when edited, or nil when
// the event must be dropped; and the usage so far (see Usage).
func (s *ChatStream) Feed(event, data []byte) (forward []byte, usage llm.Usage) {
	v := jsonscan.SkipSpace(data, 0)
	if v >= len(data) || data[v] != '{' {
		return data, s.Usage() // [DONE], or something to pass on as is
	}
	var (
		prevEnd                    = -1
		usageKey, usageEnd, before = -1, -1, -1
		usageVal, usages           = -1, 0
		choicesEmpty               = true
	)
	_, err := jsonscan.Object(data, v, 1, func(m jsonscan.Member) (int, error) {
		var end int
		var err error
		switch {
		case reqparse.KeyIs(data, m, "choices") && m.Value < len(data) && data[m.Value] == '[':
			end, err = jsonscan.Array(data, m.Value, 2, func(_, c int) (int, error) {
				choicesEmpty = false
				return s.countChoice(data, c)
			})
		case reqparse.KeyIs(data, m, "usage"):
			end, err = jsonscan.Skip(data, m.Value, 2)
			usageKey, usageVal, usageEnd, before = m.KeyStart-1, m.Value, end, prevEnd
			usages++
		default:
			end, err = jsonscan.Skip(data, m.Value, 2)
		}
		prevEnd = end
		return end, err
	})
	if err != nil || usageKey < 0 {
		return data, s.Usage()
	}
	if data[usageVal] == '{' {
		if u, ok := chatUsageAt(data, usageVal); ok {
			if u.Malformed() {
				s.malformed = true
			} else {
				s.usage, s.reported = u, true
			}
		}
	}
	if !s.StripUsage {
		return data, s.Usage()
	}
	if data[usageVal] == '{' && choicesEmpty {
		return nil, s.Usage()
	}
	out := removeMember(data, before, usageKey, usageEnd)
	if usages > 1 { // a repeated key: remove the others too
		out, _ = s.Feed(event, out)
	}
	return out, s.Usage()
}

// removeMember returns data without the member that starts at key and whose value ends at
// valueEnd. before is where the previous member's value ends (-1 for the first member).
func removeMember(data []byte, before, key, valueEnd int) []byte {
	from, to := before, valueEnd
	if before < 0 {
		from = key
		if j := jsonscan.SkipSpace(data, valueEnd); data[j] == ',' {
			to = jsonscan.SkipSpace(data, j+1)
		}
	}
	return reqparse.Splice(data, reqparse.Edit{Start: from, End: to})
}

// countChoice adds one to the delta count when the choice's delta carries output.
func (s *ChatStream) countChoice(data []byte, c int) (int, error) {
	if c >= len(data) || data[c] != '{' {
		return -1, nil
	}
	d := jsonscan.Lookup(data, c, "delta")
	if jsonscan.At(data, d) == '{' && hasOutput(data, d) {
		s.deltas++
	}
	return -1, nil
}

func hasOutput(data []byte, d int) bool {
	found := false
	jsonscan.Object(data, d, 3, func(m jsonscan.Member) (int, error) {
		key := data[m.KeyStart:m.KeyEnd]
		switch string(key) {
		case "content", "refusal", "reasoning_content", "reasoning":
			if jsonscan.At(data, m.Value) == '"' && jsonscan.At(data, m.Value+1) != '"' {
				found = true
			}
		case "tool_calls", "function_call":
			if c := jsonscan.At(data, m.Value); c == '[' || c == '{' {
				found = true
			}
		}
		return -1, nil
	})
	return found
}

// Usage is the usage so far: what the provider reported when it did, otherwise the output
// counted from deltas (input 0: the caller keeps its own estimate).
func (s *ChatStream) Usage() llm.Usage {
	if s.reported {
		return s.usage
	}
	return llm.Usage{OutputTokens: s.deltas}
}

// Reported reports whether the provider's own usage has been seen.
func (s *ChatStream) Reported() bool { return s.reported }

// Malformed reports whether a usage with a count that did not parse was seen (and not
// believed): the stream's usage is then unknown, whatever Usage says.
func (s *ChatStream) Malformed() bool { return s.malformed }

// ResponsesStream follows a streamed Responses API call. Usage comes from the response of the
// terminal event (response.completed, response.incomplete or response.failed); until then each
// event whose type ends in ".delta" counts as one output token. Events are forwarded
// unchanged. A ResponsesStream is not safe for concurrent use.
type ResponsesStream struct {
	usage     llm.Usage
	reported  bool
	malformed bool
	deltas    int64
}

// Feed takes one event's name and data and returns data (always forwarded unchanged) and the
// usage so far.
func (s *ResponsesStream) Feed(event, data []byte) (forward []byte, usage llm.Usage) {
	typ := event
	v := jsonscan.SkipSpace(data, 0)
	if len(typ) == 0 {
		typ = jsonscan.StringAt(data, jsonscan.Lookup(data, v, "type"))
	}
	switch {
	case bytes.HasSuffix(typ, []byte(".delta")):
		s.deltas++
	case string(typ) == "response.completed" || string(typ) == "response.incomplete" || string(typ) == "response.failed":
		r := jsonscan.Lookup(data, v, "response")
		if u, ok := responsesUsageAt(data, jsonscan.Lookup(data, r, "usage")); ok {
			if u.Malformed() {
				s.malformed = true
			} else {
				s.usage, s.reported = u, true
			}
		}
	}
	return data, s.Usage()
}

// Usage is the usage so far: what the provider reported when it did, otherwise the output
// counted from delta events.
func (s *ResponsesStream) Usage() llm.Usage {
	if s.reported {
		return s.usage
	}
	return llm.Usage{OutputTokens: s.deltas}
}

// Reported reports whether the provider's own usage has been seen.
func (s *ResponsesStream) Reported() bool { return s.reported }

// Malformed reports whether a usage with a count that did not parse was seen (and not
// believed).
func (s *ResponsesStream) Malformed() bool { return s.malformed }
