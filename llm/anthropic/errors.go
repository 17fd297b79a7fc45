package anthropic

import (
	"encoding/json"
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
