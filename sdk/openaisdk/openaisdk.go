// Package openaisdk limits the calls an official OpenAI Go SDK client
// (github.com/openai/openai-go/v3) makes, with a sluice.Limiter in the program itself and no
// gateway:
//
//	client := openai.NewClient(option.WithMiddleware(openaisdk.Middleware(limiter, openaisdk.Options{
//		Identity: func(r *http.Request) sluice.Identity { return userFrom(r.Context()) },
//	})))
//
// Every POST to .../chat/completions, .../responses and .../embeddings is bounded from its body,
// given an output cap when it has none (Options.MaxOutputTokens), and admitted before it is
// sent. A refused call never leaves the program: the SDK gets an answer in OpenAI's error shape
// with the status and headers the Sluice gateway sends (429 with retry-after-ms for rate limits
// and busy, 429 with x-should-retry: false for budgets, 413 with x-should-retry: false for a
// call that can never fit, 503 with Retry-After: 1 when the store is unavailable), so the SDK's
// own retries wait for throttles and never repeat a terminal refusal. The SDK surfaces the
// final refusal as an *openai.Error.
//
// An admitted call is settled with the usage the provider reports: read from the response body
// (which the SDK still reads whole), or from a stream as the SDK reads it. A chat stream that
// did not ask for usage is sent with stream_options.include_usage, and the usage chunk is
// removed before the SDK sees it. A stream the caller closes part-way (or that is cut) is
// charged the input estimate and the output received so far; a stream that is neither read to
// its end nor closed is settled by the Limiter's sweep at its deadline. An answer other than 2xx
// from the provider releases the reservation. Other requests pass through untouched.
package openaisdk

import (
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3/option"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/sdk/internal/sdkcall"
	"github.com/sluicehq/sluice/sluicehttp"
)

// Options configures Middleware.
type Options struct {
	// Identity says who pays for a request, from a trusted source: typically what the program
	// put in the request's context. Model and Route, when left empty, are filled in with the
	// requested model and the route (chat, responses or embeddings). Required.
	Identity func(*http.Request) sluice.Identity
	// Price returns a model's price list, for cost rules and budgets; nil prices nothing.
	Price func(model string) sluice.Price
	// MaxOutputTokens returns the output cap to set on a request that has none, so that its
	// bound is real (typically the model's maximum output). Nil, or 0 for a model, sends the
	// request unchanged and reserves its input only; settlement then charges the real output.
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
		panic("openaisdk: Middleware needs a Limiter and Options.Identity")
	}
	return sdkcall.Middleware(l, sdkcall.Options{
		Identity:        opts.Identity,
		Price:           opts.Price,
		MaxOutputTokens: opts.MaxOutputTokens,
		OnSettleError:   opts.OnSettleError,
	}, route)
}

func route(r *http.Request) *sdkcall.API {
	if r.Method != http.MethodPost {
		return nil
	}
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return chatAPI
	case strings.HasSuffix(p, "/responses"):
		return responsesAPI
	case strings.HasSuffix(p, "/embeddings"):
		return embeddingsAPI
	}
	return nil
}

var (
	chatAPI = &sdkcall.API{
		Name:  "chat",
		Parse: openai.ParseChat,
		Edit: func(body []byte, b llm.Bound, outputCap int64) ([]byte, bool) {
			injected := b.Stream && !b.IncludeUsage
			if outputCap == 0 && !injected {
				return body, false
			}
			return openai.EditChat(body, b, openai.ChatEdit{OutputCap: outputCap, IncludeUsage: injected}), injected
		},
		Usage:          openai.ChatUsage,
		Stream:         func(injected bool) sdkcall.Follower { return &openai.ChatStream{StripUsage: injected} },
		RefusalBody:    refusalBody,
		BadRequestBody: badRequestBody,
	}
	responsesAPI = &sdkcall.API{
		Name:  "responses",
		Parse: openai.ParseResponses,
		Edit: func(body []byte, b llm.Bound, outputCap int64) ([]byte, bool) {
			if outputCap == 0 {
				return body, false
			}
			return openai.SetResponsesOutputCap(body, b, outputCap), false
		},
		Usage:          openai.ResponsesUsage,
		Stream:         func(bool) sdkcall.Follower { return &openai.ResponsesStream{} },
		RefusalBody:    refusalBody,
		BadRequestBody: badRequestBody,
	}
	embeddingsAPI = &sdkcall.API{
		Name:           "embeddings",
		Parse:          openai.ParseEmbeddings,
		Usage:          openai.EmbeddingsUsage,
		RefusalBody:    refusalBody,
		BadRequestBody: badRequestBody,
	}
)

// refusalBody writes a refusal in OpenAI's error shape, with the types the gateway uses.
func refusalBody(r *sluicehttp.Refusal) []byte {
	typ := "rate_limit_error"
	switch r.Code {
	case "budget_exceeded", "budget_insufficient":
		typ = "budget_exceeded"
	case "request_too_large":
		typ = "invalid_request_error"
	case "store_unavailable":
		typ = "server_error"
	}
	var limit any
	if r.Limit != nil {
		limit = r.Limit
	}
	return openai.ErrorBody(r.Message, typ, r.Code, "", limit)
}

func badRequestBody(param, message string) []byte {
	return openai.ErrorBody(message, "invalid_request_error", "invalid_request", param, nil)
}
