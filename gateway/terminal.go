package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"

	"github.com/valyala/fasthttp"
)

// The terminal statuses a gateway may answer budget and session-ceiling
// refusals with (Options.TerminalStatus).
const (
	// TerminalAuto answers 429 with x-should-retry: false to clients that
	// honour it (the official OpenAI and Anthropic SDKs), and 402 to the
	// clients known to retry every 429 (the Vercel AI SDK, which names
	// itself "ai-sdk/" in its User-Agent): measured, every one of them
	// tries a 402 once.
	TerminalAuto = "auto"
	Terminal429  = "429"
	Terminal402  = "402"
	Terminal400  = "400"
)

// terminalStatusKey holds, on a request, the status its terminal refusals
// get instead of 429.
const terminalStatusKey = "sluice.terminal_status"

// checkTerminalStatus validates Options.TerminalStatus.
func checkTerminalStatus(s string) error {
	switch s {
	case "", TerminalAuto, Terminal429, Terminal402, Terminal400:
		return nil
	}
	return fmt.Errorf("gateway: terminal status %q: want auto, 429, 402 or 400", s)
}

// noteTerminalStatus records on ctx the status a terminal refusal of this
// request is answered with, when it is not 429.
func (g *Gateway) noteTerminalStatus(ctx *fasthttp.RequestCtx) {
	switch g.opts.TerminalStatus {
	case Terminal402:
		ctx.SetUserValue(terminalStatusKey, 402)
	case Terminal400:
		ctx.SetUserValue(terminalStatusKey, 400)
	case "", TerminalAuto:
		if retriesEvery429(ctx.Request.Header.UserAgent()) {
			ctx.SetUserValue(terminalStatusKey, 402)
		}
	}
}

// retriesEvery429 recognises the clients that retry a 429 whatever
// x-should-retry says: the Vercel AI SDK's providers send
// "ai/6.0.325 ai-sdk/provider-utils/4.0.66 runtime/node.js/v20.20.2".
func retriesEvery429(userAgent []byte) bool {
	return bytes.Contains(userAgent, []byte("ai-sdk/"))
}

// HeaderRequestID names a request: the client's own value when it is a
// plain token of at most 128 bytes, else one the gateway makes; it is on
// every answer and in the request's log line.
const HeaderRequestID = "X-Request-Id"

const requestIDKey = "sluice.request_id"

// headerAnthropicRequestID is where Anthropic's API names a request: an
// answer on an Anthropic route carries the request's ID there too.
const headerAnthropicRequestID = "Request-Id"

// noteRequestID gives the request its ID and the answer its header (and
// request-id on an Anthropic route, as the Anthropic SDKs read it).
func noteRequestID(ctx *fasthttp.RequestCtx) string {
	id := string(ctx.Request.Header.Peek(HeaderRequestID))
	if !plainToken(id) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], rand.Uint64())
		var buf [len("req_") + 2*len(b)]byte
		id = string(hex.AppendEncode(append(buf[:0], "req_"...), b[:]))
	}
	ctx.SetUserValue(requestIDKey, id)
	h := canonicalHeaders{&ctx.Response.Header}
	h.Set(HeaderRequestID, id)
	if bytes.HasPrefix(ctx.Path(), []byte("/v1/messages")) {
		h.Set(headerAnthropicRequestID, id)
	}
	return id
}

// requestIDOf is the ID noteRequestID gave ctx's request.
func requestIDOf(ctx *fasthttp.RequestCtx) string {
	id, _ := ctx.UserValue(requestIDKey).(string)
	return id
}

// plainToken reports a value of 1 to 128 letters, digits and "-_.:".
func plainToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// terminalStatus is the status of a terminal refusal of ctx's request.
func terminalStatus(ctx *fasthttp.RequestCtx) int {
	if s, ok := ctx.UserValue(terminalStatusKey).(int); ok {
		return s
	}
	return 429
}
