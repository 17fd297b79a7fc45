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

// IsQuotaError reports whether an upstream answer says the Anthropic account cannot pay, which
// waiting does not fix. Anthropic documents a billing_error type (HTTP 402) for billing and
// payment problems, but an exhausted credit balance is in practice answered with HTTP 400,
// type invalid_request_error and the message "Your credit balance is too low ...". Both are
// recognised: any status with error.type billing_error, and 400 invalid_request_error whose
// message mentions the credit balance.
func IsQuotaError(status int, body []byte) bool {
	e := jsonscan.Lookup(body, jsonscan.SkipSpace(body, 0), "error")
	if e < 0 {
		return false
	}
	typ := jsonscan.StringAt(body, jsonscan.Lookup(body, e, "type"))
	if string(typ) == "billing_error" {
		return true
	}
	msg := jsonscan.StringAt(body, jsonscan.Lookup(body, e, "message"))
	return status == 400 && string(typ) == "invalid_request_error" && bytes.Contains(bytes.ToLower(msg), []byte("credit balance"))
}
