package anthropic

import (
	"bytes"
	"encoding/json"

	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Limit   any    `json:"limit,omitempty"`
}

type errorBody struct {
	Type  string      `json:"type"`
	Error errorDetail `json:"error"`
}

// ErrorBody returns the Anthropic error shape {"type":"error","error":{"type","message",
// "limit"}}; limit is omitted when nil, and also when it cannot be encoded as JSON.
func ErrorBody(typ, message string, limit any) []byte {
	e := errorBody{Type: "error", Error: errorDetail{Type: typ, Message: message, Limit: limit}}
	out, err := json.Marshal(e)
	if err != nil {
		e.Error.Limit = nil
		out, _ = json.Marshal(e) // strings always encode
	}
	return out
}

// CreditBalanceMessage is what Anthropic says when the account has run out of credit.
const CreditBalanceMessage = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."

// IsQuotaError reports whether an upstream answer says the Anthropic account cannot spend any
// more, which waiting does not fix:
//   - error.type billing_error (HTTP 402, billing and payment problems);
//   - HTTP 400 invalid_request_error whose message mentions the credit balance (an exhausted
//     credit balance, "Your credit balance is too low ...") or the API usage limits (an
//     organization or workspace spend limit set in the console: "You have reached your
//     specified API usage limits" / "workspace API usage limits");
//   - HTTP 429 rate_limit_error whose error.details.error_code is enforced_spend_limit_reached
//     (the usage tier's monthly cap): the same status and type as a rate limit, but without
//     retry-after, and retrying fails until the next month.
func IsQuotaError(status int, body []byte) bool {
	e := jsonscan.Lookup(body, jsonscan.SkipSpace(body, 0), "error")
	if e < 0 {
		return false
	}
	typ := string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "type")))
	switch {
	case typ == "billing_error":
		return true
	case status == 400 && typ == "invalid_request_error":
		msg := bytes.ToLower(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "message")))
		return bytes.Contains(msg, []byte("credit balance")) || bytes.Contains(msg, []byte("api usage limits"))
	case status == 429:
		if d := jsonscan.Lookup(body, e, "details"); d >= 0 {
			return string(jsonscan.StringAt(body, jsonscan.Lookup(body, d, "error_code"))) == "enforced_spend_limit_reached"
		}
	}
	return false
}
