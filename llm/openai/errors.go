package openai

import (
	"encoding/json"
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
