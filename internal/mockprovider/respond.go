package mockprovider

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
)

// respond writes a non-streaming answer.
func (s *Server) respond(w http.ResponseWriter, c *call) {
	var body []byte
	switch c.route {
	case RouteChat:
		body = chatBody(c)
	case RouteResponses:
		body = appendResponse(make([]byte, 0, 512+c.output()*8), c, true)
	case RouteEmbeddings:
		body = embeddingsBody(c)
	default:
		body = messageBody(c)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Request-Id", "req_mock_"+c.id)
	w.WriteHeader(http.StatusOK)
	w.Write(body) //nolint:errcheck // the client going away is not an error of the mock
}

func chatBody(c *call) []byte {
	b := make([]byte, 0, 512+c.output()*8)
	b = append(b, `{"id":"chatcmpl-mock-`...)
	b = append(b, c.id...)
	b = append(b, `","object":"chat.completion","created":`...)
	b = appendInt(b, c.created)
	b = append(b, `,"model":"`...)
	b = append(b, c.model...)
	b = append(b, `","choices":[`...)
	for i := range c.n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = appendInt(b, i)
		b = append(b, `,"message":{"role":"assistant","content":"`...)
		b = appendTokens(b, 0, c.perChoice)
		b = append(b, `","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"`...)
		b = append(b, chatFinish(c)...)
		b = append(b, `"}`...)
	}
	b = append(b, `],"usage":`...)
	b = appendChatUsage(b, c)
	return append(b, `,"service_tier":"default","system_fingerprint":"fp_mock"}`...)
}

func chatFinish(c *call) string {
	if c.hitCap() {
		return "length"
	}
	return "stop"
}

func appendChatUsage(b []byte, c *call) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = appendInt(b, c.input)
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, c.output())
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, c.input+c.output())
	return append(b, `,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`...)
}

// appendResponse appends a Responses API response object: finished (with output and usage) or
// as it stands when created.
func appendResponse(b []byte, c *call, finished bool) []byte {
	b = append(b, `{"id":"resp_mock_`...)
	b = append(b, c.id...)
	b = append(b, `","object":"response","created_at":`...)
	b = appendInt(b, c.created)
	switch {
	case !finished:
		b = append(b, `,"status":"in_progress","error":null,"incomplete_details":null`...)
	case c.hitCap():
		b = append(b, `,"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"}`...)
	default:
		b = append(b, `,"status":"completed","error":null,"incomplete_details":null`...)
	}
	b = append(b, `,"instructions":null,"max_output_tokens":`...)
	if c.capSent {
		b = appendInt(b, c.cap)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"model":"`...)
	b = append(b, c.model...)
	b = append(b, `","output":[`...)
	if finished {
		b = appendOutputItem(b, c, true)
	}
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":`...)
	if !finished {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"input_tokens":`...)
		b = appendInt(b, c.input)
		b = append(b, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
		b = appendInt(b, c.output())
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
		b = appendInt(b, c.input+c.output())
		b = append(b, '}')
	}
	return append(b, `,"user":null,"metadata":{}}`...)
}

// appendOutputItem appends the message output item, empty while in progress.
func appendOutputItem(b []byte, c *call, done bool) []byte {
	b = append(b, `{"id":"msg_mock_`...)
	b = append(b, c.id...)
	b = append(b, `","type":"message","status":"`...)
	switch {
	case !done:
		b = append(b, `in_progress","role":"assistant","content":[]}`...)
		return b
	case c.hitCap():
		b = append(b, "incomplete"...)
	default:
		b = append(b, "completed"...)
	}
	b = append(b, `","role":"assistant","content":[`...)
	b = appendTextPart(b, c)
	return append(b, `]}`...)
}

func appendTextPart(b []byte, c *call) []byte {
	b = append(b, `{"type":"output_text","text":"`...)
	b = appendTokens(b, 0, c.perChoice)
	return append(b, `","annotations":[],"logprobs":[]}`...)
}

// embeddingsBody answers an embeddings request with one deterministic vector per input, of
// the requested dimensions (8 by default), as floats or as base64 little-endian float32.
func embeddingsBody(c *call) []byte {
	var req struct {
		Input          json.RawMessage `json:"input"`
		Dimensions     int             `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	json.Unmarshal(c.body, &req) //nolint:errcheck // the body was validated by the parser
	dims := req.Dimensions
	if dims <= 0 || dims > 4096 {
		dims = 8
	}
	inputs := 1
	var items []json.RawMessage
	if json.Unmarshal(req.Input, &items) == nil && len(items) > 0 && (items[0][0] == '"' || items[0][0] == '[') {
		inputs = len(items)
	}
	b := make([]byte, 0, 128+inputs*dims*12)
	b = append(b, `{"object":"list","data":[`...)
	vec := make([]byte, 4*dims)
	for i := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = appendInt(b, int64(i))
		b = append(b, `,"embedding":`...)
		if req.EncodingFormat == "base64" {
			for j := range dims {
				binary.LittleEndian.PutUint32(vec[4*j:], math.Float32bits(component(i, j)))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, vec)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for j := range dims {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(component(i, j)), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":"`...)
	b = append(b, c.model...)
	b = append(b, `","usage":{"prompt_tokens":`...)
	b = appendInt(b, c.input)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, c.input)
	return append(b, `}}`...)
}

func component(i, j int) float32 { return float32((i+1)*(j+3)%17) / 16 }

func messageBody(c *call) []byte {
	b := make([]byte, 0, 384+c.output()*8)
	b = append(b, `{"id":"msg_mock_`...)
	b = append(b, c.id...)
	b = append(b, `","type":"message","role":"assistant","model":"`...)
	b = append(b, c.model...)
	b = append(b, `","content":[{"type":"text","text":"`...)
	b = appendTokens(b, 0, c.perChoice)
	b = append(b, `"}],"stop_reason":"`...)
	b = append(b, stopReason(c)...)
	b = append(b, `","stop_sequence":null,"usage":{"input_tokens":`...)
	b = appendInt(b, c.input)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`...)
	b = appendInt(b, c.output())
	return append(b, `,"service_tier":"standard"}}`...)
}

func stopReason(c *call) string {
	if c.hitCap() {
		return "max_tokens"
	}
	return "end_turn"
}

// models lists the models, in Anthropic's shape when the client sent anthropic-version.
func (s *Server) models(w http.ResponseWriter, anthropicShape bool) {
	var b []byte
	if anthropicShape {
		b = append(b, `{"data":[`...)
		for i, m := range Models {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"model","id":"`...)
			b = append(b, m...)
			b = append(b, `","display_name":"`...)
			b = append(b, m...)
			b = append(b, `","created_at":"2025-01-01T00:00:00Z"}`...)
		}
		b = append(b, `],"has_more":false,"first_id":"`...)
		b = append(b, Models[0]...)
		b = append(b, `","last_id":"`...)
		b = append(b, Models[len(Models)-1]...)
		b = append(b, `"}`...)
	} else {
		b = append(b, `{"object":"list","data":[`...)
		for i, m := range Models {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":"`...)
			b = append(b, m...)
			b = append(b, `","object":"model","created":1735689600,"owned_by":"sluice"}`...)
		}
		b = append(b, `]}`...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b) //nolint:errcheck // the client going away is not an error of the mock
}

// writeError answers status in the error shape of the route's provider.
func writeError(w http.ResponseWriter, route Route, status int, msg, param, code string) {
	var body []byte
	if route.anthropic() {
		body = anthropic.ErrorBody(anthropicErrorType(status), msg, nil)
	} else {
		typ := "invalid_request_error"
		switch {
		case status == http.StatusUnauthorized:
			code = "invalid_api_key"
		case status == http.StatusTooManyRequests:
			typ, code = "requests", "rate_limit_exceeded"
		case status >= 500:
			typ = "server_error"
		}
		body = openai.ErrorBody(msg, typ, code, param, nil)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if status == http.StatusTooManyRequests && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client going away is not an error of the mock
}

func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// OpenAIQuotaMessage is the message of OpenAI's quota-exhausted error.
const OpenAIQuotaMessage = "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."

// writeQuota answers the provider's quota-exhausted error: OpenAI's 429 insufficient_quota, or
// Anthropic's 400 "credit balance is too low" (what Anthropic sends in practice; see
// llm.QuotaCode).
func writeQuota(w http.ResponseWriter, route Route) {
	var body []byte
	status := http.StatusTooManyRequests
	if route.anthropic() {
		status = http.StatusBadRequest
		body = anthropic.ErrorBody("invalid_request_error", anthropic.CreditBalanceMessage, nil)
	} else {
		body = openai.ErrorBody(OpenAIQuotaMessage, "insufficient_quota", "insufficient_quota", "", nil)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client going away is not an error of the mock
}
