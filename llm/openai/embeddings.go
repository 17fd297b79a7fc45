package openai

import (
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
	"github.com/sluicehq/sluice/llm/internal/reqparse"
)

var embeddingsKeys = []string{"model", "input"}

// ParseEmbeddings bounds a POST /v1/embeddings body. input is a string, an array of strings,
// an array of token ids, or an array of token-id arrays; strings count at llm.BytesPerToken,
// token ids one each (Bound.TokenIDs). Embeddings produce no output: Bound.NoOutput is set.
func ParseEmbeddings(body []byte) (llm.Bound, error) { return ParseEmbeddingsText(body, nil) }

// ParseEmbeddingsText is ParseEmbeddings that also hands every input string to text.
func ParseEmbeddingsText(body []byte, text llm.TextFunc) (llm.Bound, error) {
	b := llm.Bound{N: 1, NoOutput: true, Cap: llm.NoSpan, AltCap: llm.NoSpan, StreamOptions: llm.NoSpan, IncludeUsageValue: llm.NoSpan}
	keys := reqparse.Keys{Names: embeddingsKeys}
	var modelSeen, inputSeen bool
	var buf []byte
	obj, err := reqparse.Object(body, func(m jsonscan.Member) (int, error) {
		k, err := keys.Match(body, m)
		if err != nil {
			return m.Value, err
		}
		switch k {
		case 0:
			modelSeen = true
			var end int
			b.Model, end, err = reqparse.String(body, m.Value, "model")
			return end, err
		case 1:
			inputSeen = true
			return embeddingsInput(body, m.Value, &b, text, &buf)
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

func errEmbeddingsInput(body []byte, v int) error {
	return reqparse.TypeError("input", "a string, an array of strings, or an array of token arrays", body, v)
}

func embeddingsInput(body []byte, v int, b *llm.Bound, text llm.TextFunc, buf *[]byte) (int, error) {
	str := func(e int) (int, error) {
		end, esc, err := jsonscan.String(body, e)
		if err != nil {
			return end, reqparse.Syntax(err)
		}
		if end-e == 2 {
			return end, &llm.RequestError{Param: "input", Message: "Invalid 'input': empty string. Expected non-empty input."}
		}
		b.PromptBytes += int64(end - e - 2)
		reqparse.Text(text, buf, body, e, end, esc)
		return end, nil
	}
	tokenID := func(e int) (int, error) {
		n, end, isInt, err := jsonscan.Int(body, e)
		if err != nil {
			return end, reqparse.Syntax(err)
		}
		if !isInt || n < 0 {
			return end, errEmbeddingsInput(body, e)
		}
		b.TokenIDs++
		return end, nil
	}
	if v < len(body) && body[v] == '"' {
		return str(v)
	}
	if v >= len(body) || body[v] != '[' {
		if _, err := jsonscan.Skip(body, v, 2); err != nil {
			return v, reqparse.Syntax(err)
		}
		return v, errEmbeddingsInput(body, v)
	}
	count := 0
	end, err := jsonscan.Array(body, v, 2, func(_, e int) (int, error) {
		count++
		switch {
		case e >= len(body):
			return -1, nil
		case body[e] == '"':
			return str(e)
		case body[e] == '-' || ('0' <= body[e] && body[e] <= '9'):
			return tokenID(e)
		case body[e] == '[':
			inner := 0
			end, err := jsonscan.Array(body, e, 3, func(_, t int) (int, error) {
				inner++
				if t < len(body) && (body[t] == '-' || ('0' <= body[t] && body[t] <= '9')) {
					return tokenID(t)
				}
				if _, err := jsonscan.Skip(body, t, 4); err != nil {
					return t, err
				}
				return t, errEmbeddingsInput(body, t)
			})
			if err == nil && inner == 0 {
				return end, &llm.RequestError{Param: "input", Message: "Invalid 'input': empty token array."}
			}
			return end, err
		}
		if _, err := jsonscan.Skip(body, e, 3); err != nil {
			return e, err
		}
		return e, errEmbeddingsInput(body, e)
	})
	if err != nil {
		return end, reqparse.Syntax(err)
	}
	if count == 0 {
		return end, &llm.RequestError{Param: "input", Message: "Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead."}
	}
	return end, nil
}
