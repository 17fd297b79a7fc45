package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/human"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/sluicehq/sluice/sluicehttp"
	"github.com/valyala/fasthttp"
)

// apiError is a refusal the gateway decides itself.
type apiError struct {
	status    int
	typ       string // OpenAI error type
	anthType  string // Anthropic error type
	code      string
	param     string
	message   string
	terminal  bool // x-should-retry: false
	retryHint time.Duration
	limit     *sluicehttp.RefusalLimit // the limit object, when a limit refused
	// room is the room of the rules that apply to the caller, for the
	// rate-limit header fields (see call.withRoom); nil sends none.
	room *sluice.Result
	// cause is the failure behind the refusal (a store's error, the
	// provider's connection error): logged, never sent to the client,
	// whose message says only what failed.
	cause error
}

func (e *apiError) Error() string { return e.message }

// Unwrap returns the cause.
func (e *apiError) Unwrap() error { return e.cause }

func errBadKey() *apiError {
	return &apiError{status: 401, typ: "invalid_request_error", anthType: "authentication_error", code: "invalid_api_key",
		message: "Invalid API key: send your Sluice key in the Authorization header (Bearer) or in x-api-key."}
}

// errBadToken refuses a JWT bearer token, saying why.
func errBadToken(reason string) *apiError {
	return &apiError{status: 401, typ: "invalid_request_error", anthType: "authentication_error", code: "invalid_token",
		message: "Invalid bearer token: " + reason + "."}
}

func errKeyStore(err error) error {
	return &apiError{status: 503, typ: "server_error", anthType: "api_error", code: "key_store_unavailable",
		message: "The key store is unavailable; retry shortly.", retryHint: time.Second, cause: fmt.Errorf("key store: %w", err)}
}

// errProviderAuth is the answer to a call whose provider refused the
// gateway's own key for it (401 or 403): an operator's problem, 502.
func errProviderAuth(provider string, status int) error {
	return &apiError{status: 502, typ: "server_error", anthType: "api_error", code: "provider_auth_error",
		message: fmt.Sprintf("Provider %s refused the gateway's key for it (%d); this is not your key: the operator must fix the provider's key.", provider, status)}
}

// errDeadlinePassed is the answer to a call whose deadline passed before
// it could be sent to the provider: released, not charged.
func errDeadlinePassed() error {
	return &apiError{status: 503, typ: "server_error", anthType: "api_error", code: "deadline_passed",
		message: "The request's deadline passed before it could be sent to the provider (the gateway waited for a store); nothing was charged; retry.", retryHint: time.Second}
}

// errClientGone is the answer to a client that closed its connection
// before its answer: nobody reads it (499, as nginx logs it).
func errClientGone() error {
	return &apiError{status: 499, typ: "invalid_request_error", anthType: "invalid_request_error", code: "client_closed_request",
		message: "The client closed the connection before its answer was sent.", terminal: true}
}

// errPaced refuses a call that its provider's rate limit would refuse for
// longer than the gateway holds calls.
func errPaced(model string, wait time.Duration) error {
	return &apiError{status: 429, typ: "rate_limit_error", anthType: "rate_limit_error", code: "provider_rate_limited", retryHint: wait,
		message: fmt.Sprintf("The provider's rate limit for model %s is reached; retry in %s (at %s).", model, human.Duration(wait), human.Instant(time.Now().Add(wait)))}
}

func errNotFound(path string) error {
	return &apiError{status: 404, typ: "invalid_request_error", anthType: "not_found_error", code: "not_found",
		message: fmt.Sprintf("No route %s on this gateway.", path)}
}

func errMethodNotAllowed(method, path string) error {
	return &apiError{status: 405, typ: "invalid_request_error", anthType: "invalid_request_error", code: "method_not_allowed",
		message: fmt.Sprintf("%s %s is not supported; use POST.", method, path)}
}

func errUnknownModel(name string) error {
	return &apiError{status: 404, typ: "invalid_request_error", anthType: "not_found_error", code: "model_not_found", param: "model",
		message: fmt.Sprintf("The model %q does not exist on this gateway.", name)}
}

func errModelNotAllowed(name string) error {
	return &apiError{status: 403, typ: "invalid_request_error", anthType: "permission_error", code: "model_not_allowed", param: "model",
		message: fmt.Sprintf("This key may not use the model %q.", name)}
}

func errWrongAPI(name string, rt *route) error {
	use := "/v1/messages"
	if rt.anthropic {
		use = "/v1/chat/completions or /v1/responses"
	}
	return &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error", code: "wrong_api", param: "model",
		message: fmt.Sprintf("The model %q is served by a provider that does not speak %s; use %s.", name, rt.path, use)}
}

func errBodyTooLarge(limit int) *apiError {
	return &apiError{status: 413, typ: "invalid_request_error", anthType: "request_too_large", code: "request_too_large", terminal: true,
		message: fmt.Sprintf("The request body is larger than this gateway accepts (%d bytes).", limit)}
}

// errUpstream is the answer to a call its provider failed: the message
// says what failed, the cause (which may name internal addresses) goes to
// the log only.
func errUpstream(status int, err error) error {
	message := "The provider could not be reached; retry shortly."
	if status == 504 {
		message = "The provider did not answer before the request's deadline."
	}
	return &apiError{status: status, typ: "server_error", anthType: "api_error", code: "upstream_error",
		message: message, cause: err}
}

// causeOf is what the log says of a failure: the refusal's code and its
// cause for the gateway's own, the store's error for a store that did not
// answer, else the error; nil for a limit's refusal (the limit object says
// all) and for no error.
func causeOf(err error) error {
	if err == nil || errors.Is(err, sluice.ErrStoreUnavailable) {
		return err
	}
	if _, ok := sluicehttp.RefusalOf(err); ok {
		return nil
	}
	var ae *apiError
	if errors.As(err, &ae) {
		if ae.cause == nil {
			return errors.New(ae.code)
		}
		return fmt.Errorf("%s: %w", ae.code, ae.cause)
	}
	return err
}

// writeError is the one place that turns an error into a status, headers
// and a body in the error shape of the route the client called.
func (g *Gateway) writeError(ctx *fasthttp.RequestCtx, rt *route, err error) {
	var (
		status        int
		typ, anthType string
		code, param   string
		message       string
		limit         *sluicehttp.RefusalLimit
		terminal      bool
	)
	h := &ctx.Response.Header
	var (
		req *llm.RequestError
		ae  *apiError
	)
	// The library's refusals: status, code, wording and limit object are
	// the library's (sluicehttp.RefusalOf), the error types the API's.
	if hr, ok := sluicehttp.RefusalOf(err); ok {
		status, code, message, limit = hr.Status, hr.Code, hr.Message, hr.Limit
		terminal = hr.Terminal
		typ, anthType = errorTypes(code)
		hr.SetHeaders(canonicalHeaders{h}, g.now())
		var fh *fitHint
		if errors.As(err, &fh) {
			message += fmt.Sprintf(" The largest max_tokens that fits now is %d.", fh.maxTokens)
		}
		var wh *waitHint
		if errors.As(err, &wh) {
			message += fmt.Sprintf(" This call could wait at most %s, set by %s.", human.Duration(wh.maxWait), wh.source)
		}
	} else {
		switch {
		case errors.As(err, &req):
			status, typ, anthType, code, param = 400, "invalid_request_error", "invalid_request_error", "invalid_request", req.Param
			message = req.Message
		case errors.As(err, &ae):
			status, typ, anthType, code, param, message = ae.status, ae.typ, ae.anthType, ae.code, ae.param, ae.message
			terminal, limit = ae.terminal, ae.limit
			// The gateway's own refusals get their rate-limit and retry
			// headers where the library's do.
			if ae.room != nil {
				sluicehttp.SetHeaders(canonicalHeaders{h}, *ae.room, g.now())
			}
			hr := sluicehttp.Refusal{RetryAfter: ae.retryHint, Terminal: ae.terminal}
			hr.SetHeaders(canonicalHeaders{h}, g.now())
		default:
			status, typ, anthType, code = 500, "server_error", "api_error", "internal_error"
			message = "Internal error."
		}
	}
	if terminal && status == 429 {
		status = terminalStatus(ctx)
	}
	var limitAny any
	if limit != nil {
		limitAny = limit
		if cs := refusedClass(err); cs != nil {
			limitAny = classLimit{limit, refusalClass{Name: cs.Class, Floor: cs.Floor, Share: cs.Share, Capacity: cs.Capacity}}
		}
	}
	var body []byte
	if rt != nil && rt.anthropic {
		body = anthropic.ErrorBody(anthType, message, limitAny)
	} else {
		body = openai.ErrorBody(message, typ, code, param, limitAny)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// classLimit is the limit object of a refusal by a class rule: the
// library's, whose limit, used and remaining are then the class's share's,
// with the class.
type classLimit struct {
	*sluicehttp.RefusalLimit
	Class refusalClass `json:"class"`
}

// refusalClass names the class a class rule refused: its floor and its
// share of the rule's capacity.
type refusalClass struct {
	Name     string `json:"name"`
	Floor    int64  `json:"floor"`
	Share    int64  `json:"share"`
	Capacity int64  `json:"capacity"`
}

// refusedClass returns the class of a refusal by a class rule (rate or
// concurrency: a budget has no classes); nil for any other error.
func refusedClass(err error) *sluice.ClassShare {
	var rl *sluice.RateLimitError
	var bz *sluice.BusyError
	switch {
	case errors.As(err, &rl):
		return rl.Class
	case errors.As(err, &bz):
		return bz.Class
	}
	return nil
}

// errorTypes returns the OpenAI and Anthropic error types of a refusal
// code.
func errorTypes(code string) (openaiType, anthropicType string) {
	switch code {
	case "rate_limit_exceeded", "concurrency_limit_exceeded":
		return "rate_limit_error", "rate_limit_error"
	case "budget_exceeded", "budget_insufficient":
		return "budget_exceeded", "rate_limit_error"
	case "request_too_large":
		return "invalid_request_error", "request_too_large"
	}
	return "server_error", "api_error"
}

// outcomeOf names a refusal for metrics: its outcome and its class.
func outcomeOf(err error) (outcome, class string) {
	switch {
	case errors.Is(err, sluice.ErrRateLimited):
		return "rate_limited", "throttled"
	case errors.Is(err, sluice.ErrBusy):
		return "busy", "throttled"
	case errors.Is(err, sluice.ErrBudgetExhausted):
		return "budget_exceeded", "terminal"
	case errors.Is(err, sluice.ErrTooLarge):
		return "too_large", "terminal"
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return "store_error", "transient"
	}
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.status == 401:
			return "unauthorized", "terminal"
		case ae.status == 499:
			return "client_gone", "terminal"
		case ae.status == 413:
			return "too_large", "terminal"
		case ae.code == "provider_rate_limited":
			return "rate_limited", "throttled"
		case ae.code == "session_ceiling_reached":
			return "session_ceiling", "terminal"
		case ae.code == "too_many_sessions":
			return "too_many_sessions", "terminal"
		case ae.status >= 500:
			return "upstream_error", "transient"
		}
	}
	return "bad_request", "terminal"
}
