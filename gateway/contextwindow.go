package gateway

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Tokenizer counts the tokens of a piece of prompt text exactly as the
// model's provider does (see llm/bpe for OpenAI's encodings). It must be
// safe for concurrent use.
type Tokenizer interface {
	Count(text []byte) int
}

// boundarySlack is what each piece of prompt text gives back from its count
// before the sum is compared with the context window. The gateway counts
// each piece (a message's content, one text part) on its own, while a
// provider may join a message's parts into one text, and a byte-level BPE
// can merge across the joint: measured on the repository's docs (2,194
// cuts in each encoding), two pieces counted apart come to at most 3
// (o200k_base) or 4 (cl100k_base) tokens more than the text they were cut
// from (llm/bpe.TestCount_PiecesAreALowerBound); 8 is twice that.
const boundarySlack = 8

// checkContext refuses a prompt certainly longer than m's context window:
// 400 context_length_exceeded, once the call is admitted for m and before
// it is forwarded; the caller releases the admission, so nothing is
// charged. It runs after admission (on the byte estimate) so that a key
// makes the gateway count, the costly part, only while its limits admit
// it: a call they refuse is never counted. Certainly: only with m's
// own tokenizer, counting no more than the provider would (every piece of
// text counted as the provider counts it, less boundarySlack each; images,
// tool definitions and the chat format's own tokens not at all). The
// admission estimate (bytes / 3) is not used: it overestimates English by
// about a third, and would refuse prompts that fit.
func (c *call) checkContext(m *model) error {
	tk, window := m.Tokenizer, m.ContextWindow
	// A token of a byte-level BPE is at least one byte, and the text is no
	// longer than the JSON that carries it: a prompt of no more bytes than
	// the window fits, and most are not tokenized at all.
	if tk == nil || window <= 0 || c.rt.text == nil || c.bound.PromptBytes <= window {
		return nil
	}
	// Counting costs about two seconds per megabyte on a loaded machine: a
	// long piece is counted in chunks (each cut is a piece's joint, covered
	// by boundarySlack), and counting stops once the window is certainly
	// passed, so no prompt costs much more than its window's worth; and
	// only Options.MaxConcurrentCounts prompts are counted at once, so that
	// a key sending long prompts as fast as its limits allow takes that
	// many CPUs at most.
	c.g.counting <- struct{}{}
	defer func() { <-c.g.counting }()
	var tokens, pieces int64
	over := func() bool { return tokens-boundarySlack*pieces > window }
	if _, err := c.rt.text(c.body, func(text []byte) {
		for len(text) > 0 && !over() {
			n := min(len(text), countChunk)
			for n < len(text) && !utf8.RuneStart(text[n]) {
				n++
			}
			tokens += int64(tk.Count(text[:n]))
			pieces++
			text = text[n:]
		}
	}); err != nil || !over() {
		return nil // an error: parsed once already, the provider will say
	}
	return errContextLength(m.Name, window, tokens-boundarySlack*pieces)
}

// overWindow reports a refusal of a prompt longer than a model's context
// window: a fallback with a larger window may still take it.
func overWindow(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == "context_length_exceeded"
}

// countChunk is the most text checkContext counts at once.
const countChunk = 16 << 10

func errContextLength(model string, window, least int64) error {
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "context_length_exceeded", param: "messages",
		message: fmt.Sprintf("This model's maximum context length is %d tokens; the prompt alone has at least %d. Shorten the prompt: it was not sent to %s, nor charged.", window, least, model)}
}
