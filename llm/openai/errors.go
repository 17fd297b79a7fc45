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

// IsQuotaError reports whether an upstream answer is one of OpenAI's 429s that waiting does not
// clear: error.type or error.code insufficient_quota, or one of the billing codes OpenAI documents
// beside it (credit_balance_exhausted, organization_usage_limit_exceeded,
// organization_spend_limit_exceeded, project_spend_limit_exceeded: prepaid credit used up, or a
// usage or hard spend limit reached). The gateway passes these on as terminal instead of retrying.
func IsQuotaError(status int, body []byte) bool {
	if status != 429 {
		return false
	}
	e := lookupPath(body, "error")
	if e < 0 {
		return false
	}
	switch string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "code"))) {
	case "insufficient_quota", "credit_balance_exhausted", "organization_usage_limit_exceeded",
		"organization_spend_limit_exceeded", "project_spend_limit_exceeded":
		return true
	}
	return string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "type"))) == "insufficient_quota"
}
