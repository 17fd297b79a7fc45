package openai

import (
	"encoding/json"

	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    *string `json:"code"`
	Param   *string `json:"param"`
	Limit   any     `json:"limit,omitempty"`
}

// ErrorBody returns the OpenAI error shape
// {"error":{"message","type","code","param","limit"}}. An empty code or param is written as
// null, as OpenAI does; limit is omitted when nil, and also when it cannot be encoded as JSON.
func ErrorBody(message, typ, code, param string, limit any) []byte {
	d := errorDetail{Message: message, Type: typ, Limit: limit}
	if code != "" {
		d.Code = &code
	}
	if param != "" {
		d.Param = &param
	}
	out, err := json.Marshal(struct {
		Error errorDetail `json:"error"`
	}{d})
	if err != nil {
		d.Limit = nil
		out, _ = json.Marshal(struct {
			Error errorDetail `json:"error"`
		}{d}) // strings and nil pointers always encode
	}
	return out
}

// IsQuotaError reports whether an upstream answer is OpenAI's quota-exhausted error: status 429
// with error.code or error.type "insufficient_quota" (sent when the account's credit or
// monthly spend limit is used up). Unlike a rate limit it does not clear by waiting, so the
// gateway passes it on as terminal instead of retrying.
func IsQuotaError(status int, body []byte) bool {
	if status != 429 {
		return false
	}
	e := lookupPath(body, "error")
	if e < 0 {
		return false
	}
	return string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "code"))) == "insufficient_quota" ||
		string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "type"))) == "insufficient_quota"
}
