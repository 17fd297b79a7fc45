package openai

import (
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
	"github.com/sluicehq/sluice/llm/internal/reqparse"
)

// MinResponsesOutputTokens is the smallest max_output_tokens the OpenAI Responses API accepts;
// a gateway that lowers the cap should not go below it.
const MinResponsesOutputTokens = 16

var responsesRules = reqparse.Rules{
	PayloadKey:  "image_url",
	ImageType:   "input_image",
	TextTypes:   []string{"input_text", "output_text", "text"},
	NestedKeys:  []string{"content", "output"},
	ImageTokens: llm.OpenAIImageTokens,
}

const (
	respModel = iota
	respInput
	respInstructions
	respMaxOutputTokens
	respStream
	respTools
)

var responsesKeys = []string{
	respModel:           "model",
	respInput:           "input",
	respInstructions:    "instructions",
	respMaxOutputTokens: "max_output_tokens",
	respStream:          "stream",
	respTools:           "tools",
}

// ParseResponses bounds a POST /v1/responses body: max_output_tokens, input (a string or an
// array of items), instructions and tools. Input held by the provider (previous_response_id,
// conversation) is not in the body and not in the estimate.
func ParseResponses(body []byte) (llm.Bound, error) { return ParseResponsesText(body, nil) }

// ParseResponsesText is ParseResponses that also hands the prompt text to text: instructions,
// input when it is a string, every item content or function call output that is a string, and
// the "text" of every part of type input_text, output_text or text.
func ParseResponsesText(body []byte, text llm.TextFunc) (llm.Bound, error) {
	b := llm.Bound{N: 1, MinOutputTokens: MinResponsesOutputTokens, Cap: llm.NoSpan, AltCap: llm.NoSpan, StreamOptions: llm.NoSpan, IncludeUsageValue: llm.NoSpan}
	keys := reqparse.Keys{Names: responsesKeys}
	w := reqparse.Walker{B: body, Rules: &responsesRules, Text: text, Bound: &b}
	var modelSeen, inputSeen bool
	obj, err := reqparse.Object(body, func(m jsonscan.Member) (int, error) {
		k, err := keys.Match(body, m)
		if err != nil {
			return m.Value, err
		}
		v := m.Value
		switch k {
		case respModel:
			modelSeen = true
			var end int
			b.Model, end, err = reqparse.String(body, v, "model")
			return end, err
		case respInput:
			inputSeen = true
			return input(body, v, &w)
		case respInstructions:
			if jsonscan.IsNull(body, v) {
				return v + 4, nil
			}
			if v >= len(body) || body[v] != '"' {
				if _, err := jsonscan.Skip(body, v, 2); err != nil {
					return v, reqparse.Syntax(err)
				}
				return v, reqparse.TypeError("instructions", "a string", body, v)
			}
			return w.Prompt(v)
		case respMaxOutputTokens:
			n, null, end, err := reqparse.OutputCap(body, v, "max_output_tokens")
			b.Cap = llm.Span{Start: v, End: end}
			if err == nil && !null {
				b.HasMaxOutput, b.MaxOutputTokens = true, n
			}
			return end, err
		case respStream:
			var end int
			b.Stream, end, err = reqparse.Bool(body, v, "stream")
			return end, err
		case respTools:
			return reqparse.Tools(body, v, "tools", &b)
		}
		return -1, nil
	})
	b.Object = obj
	if err != nil {
		return b, err
	}
	if err := reqparse.RequireModel(modelSeen, b.Model); err != nil {
		return b, err
	}
	if !inputSeen {
		return b, &llm.RequestError{Param: "input", Message: "Missing required parameter: 'input'."}
	}
	reqparse.Finish(&b)
	return b, nil
}

func input(body []byte, v int, w *reqparse.Walker) (int, error) {
	if v < len(body) && body[v] == '[' {
		return w.Messages(v, "input")
	}
	if v >= len(body) || body[v] != '"' {
		if _, err := jsonscan.Skip(body, v, 2); err != nil {
			return v, reqparse.Syntax(err)
		}
		return v, reqparse.TypeError("input", "a string or an array", body, v)
	}
	if jsonscan.At(body, v+1) == '"' {
		return v, &llm.RequestError{Param: "input", Message: "Invalid 'input': empty string. Expected a non-empty prompt."}
	}
	return w.Prompt(v)
}

// SetResponsesOutputCap returns body with max_output_tokens set to n, replaced in place or
// inserted after the opening brace; every other byte is unchanged. b must come from parsing
// this very body.
func SetResponsesOutputCap(body []byte, b llm.Bound, n int64) []byte {
	return reqparse.SetCap(body, b.Object, b.Cap, "max_output_tokens", n)
}
