// Package anthropicsdk limits the calls an official Anthropic Go SDK client
// (github.com/anthropics/anthropic-sdk-go/v2) makes, with a sluice.Limiter in the program
// itself and no gateway:
//
//	client := anthropic.NewClient(option.WithMiddleware(anthropicsdk.Middleware(limiter, anthropicsdk.Options{
//		Identity: func(r *http.Request) sluice.Identity { return userFrom(r.Context()) },
//	})))
//
// Every POST to .../v1/messages is bounded from its body, given max_tokens when it has none
// (Options.MaxOutputTokens), and admitted before it is sent. A refused call never leaves the
// program: the SDK gets an answer in Anthropic's error shape with the status and headers the
// Sluice gateway sends (429 with retry-after-ms for rate limits and busy, 429 with
// x-should-retry: false for budgets, 413 with x-should-retry: false for a call that can never
// fit, 503 with Retry-After: 1 when the store is unavailable), so the SDK's own retries wait for
// throttles and never repeat a terminal refusal. The SDK surfaces the final refusal as an
// *anthropic.Error.
//
// An admitted call is settled with the usage the provider reports: read from the response body
// (which the SDK still reads whole), or from a stream as the SDK reads it. A stream the caller
// closes part-way (or that is cut) is charged its input and the output received so far; a
// stream that is neither read to its end nor closed is settled by the Limiter's sweep at its
// deadline. An answer other than 2xx from the provider releases the reservation. Other
// requests (token counting, batches, models) pass through untouched.
package anthropicsdk

import (
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/sdk/internal/sdkcall"
	"github.com/sluicehq/sluice/sluicehttp"
)

// Options configures Middleware.
type Options struct {
	// Identity says who pays for a request, from a trusted source: typically what the program
	// put in the request's context. Model and Route, when left empty, are filled in with the
	// requested model and "messages". Required.
	Identity func(*http.Request) sluice.Identity
	// Price returns a model's price list, for cost rules and budgets; nil prices nothing.
	Price func(model string) sluice.Price
	// MaxOutputTokens returns the max_tokens to set on a request that has none (the SDK always
	// sends one; raw requests may not). Nil, or 0 for a model, sends the request unchanged.
	MaxOutputTokens func(model string) int64
	// OnSettleError, if set, is called when a reservation cannot be settled or released (a
	// store error); the Limiter's sweep settles it at its deadline.
	OnSettleError func(*http.Request, error)
}

// Middleware returns an SDK middleware (pass it to option.WithMiddleware) that admits the
// client's model calls through l. It panics if l or opts.Identity is nil: a wiring mistake,
// caught at start-up.
func Middleware(l *sluice.Limiter, opts Options) option.Middleware {
	if l == nil || opts.Identity == nil {
		panic("anthropicsdk: Middleware needs a Limiter and Options.Identity")
	}
	return sdkcall.Middleware(l, sdkcall.Options{
		Identity:        opts.Identity,
		Price:           opts.Price,
		MaxOutputTokens: opts.MaxOutputTokens,
		OnSettleError:   opts.OnSettleError,
	}, route)
}

func route(r *http.Request) *sdkcall.API {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages") {
		return messagesAPI
	}
	return nil
}

var messagesAPI = &sdkcall.API{
	Name:  "messages",
	Parse: anthropic.ParseMessages,
	Edit: func(body []byte, b llm.Bound, outputCap int64) ([]byte, bool) {
		if outputCap == 0 {
			return body, false
		}
		return anthropic.SetMaxTokens(body, b, outputCap), false
	},
	Usage:          anthropic.MessageUsage,
	Stream:         func(bool) sdkcall.Follower { return &anthropic.MessagesStream{} },
	RefusalBody:    refusalBody,
	BadRequestBody: badRequestBody,
}

// refusalBody writes a refusal in Anthropic's error shape, with the types the gateway uses.
func refusalBody(r *sluicehttp.Refusal) []byte {
	typ := "rate_limit_error"
	switch r.Code {
	case "request_too_large":
		typ = "request_too_large"
	case "store_unavailable":
		typ = "api_error"
	}
	var limit any
	if r.Limit != nil {
		limit = r.Limit
	}
	return anthropic.ErrorBody(typ, r.Message, limit)
}

func badRequestBody(_, message string) []byte {
	return anthropic.ErrorBody("invalid_request_error", message, nil)
}
