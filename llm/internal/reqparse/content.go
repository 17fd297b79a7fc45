package reqparse

import (
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

// Rules say how one wire format lays out prompt content.
type Rules struct {
	// PayloadKey is the member of a content part that carries an image ("image_url" or
	// "source"); its bytes are replaced by ImageTokens.
	PayloadKey string
	// ImageType is the part type that marks an image; empty means any part with PayloadKey.
	ImageType string
	// TextTypes are the part types whose "text" member is prompt text.
	TextTypes []string
	// NestedKeys are the members whose value is itself content (a string or an array of parts):
	// a message's "content", a tool result's "content", a function call's "output".
	NestedKeys []string
	// ImageTokens is the estimate for one image.
	ImageTokens int64
}

// Walker walks prompt content, counting images into Bound and handing text to Text.
type Walker struct {
	B     []byte
	Rules *Rules
	Text  llm.TextFunc
	Bound *llm.Bound
	buf   []byte
}

// Content walks a content value at B[v]: a string is prompt text, an array holds parts, any
// other value is only validated.
func (w *Walker) Content(v, depth int) (int, error) {
	if v >= len(w.B) {
		return jsonscan.Skip(w.B, v, depth)
	}
	switch w.B[v] {
	case '"':
		end, esc, err := jsonscan.String(w.B, v)
		if err != nil {
			return end, err
		}
		Text(w.Text, &w.buf, w.B, v, end, esc)
		return end, nil
	case '[':
		return jsonscan.Array(w.B, v, depth, func(_, e int) (int, error) {
			if e < len(w.B) && w.B[e] == '{' {
				return w.Part(e, depth+1)
			}
			return -1, nil
		})
	}
	return jsonscan.Skip(w.B, v, depth)
}

// Part walks one part (or message) object at B[v] == '{'.
func (w *Walker) Part(v, depth int) (int, error) {
	r := w.Rules
	typ := llm.NoSpan
	var typEsc bool
	text, payload := llm.NoSpan, llm.NoSpan
	var textEsc bool
	end, err := jsonscan.Object(w.B, v, depth, func(m jsonscan.Member) (int, error) {
		switch {
		case KeyIs(w.B, m, "type"):
			if m.Value < len(w.B) && w.B[m.Value] == '"' {
				end, esc, err := jsonscan.String(w.B, m.Value)
				typ, typEsc = llm.Span{Start: m.Value + 1, End: end - 1}, esc
				return end, err
			}
		case KeyIs(w.B, m, "text"):
			if m.Value < len(w.B) && w.B[m.Value] == '"' {
				end, esc, err := jsonscan.String(w.B, m.Value)
				text, textEsc = llm.Span{Start: m.Value, End: end}, esc
				return end, err
			}
		case KeyIs(w.B, m, r.PayloadKey):
			end, err := jsonscan.Skip(w.B, m.Value, depth+1)
			payload = llm.Span{Start: m.Value, End: end}
			return end, err
		default:
			for _, k := range r.NestedKeys {
				if KeyIs(w.B, m, k) {
					return w.Content(m.Value, depth+1)
				}
			}
		}
		return -1, nil
	})
	if err != nil {
		return end, err
	}
	var t []byte
	if typ.Present() {
		t = w.B[typ.Start:typ.End]
		if typEsc {
			t = jsonscan.Unescape(nil, t)
		}
	}
	if payload.Present() && (r.ImageType == "" || string(t) == r.ImageType) {
		w.Bound.Images++
		w.Bound.ImageTokens += r.ImageTokens
		w.Bound.PromptBytes -= int64(payload.End - payload.Start)
	}
	if text.Present() && w.Text != nil {
		for _, tt := range r.TextTypes {
			if string(t) == tt {
				Text(w.Text, &w.buf, w.B, text.Start, text.End, textEsc)
				break
			}
		}
	}
	return end, nil
}

// Messages walks a non-empty array of message objects at B[v], adding its bytes to the
// estimate.
func (w *Walker) Messages(v int, param string) (int, error) {
	if v >= len(w.B) || w.B[v] != '[' {
		if _, err := jsonscan.Skip(w.B, v, 2); err != nil {
			return v, Syntax(err)
		}
		return v, TypeError(param, "an array", w.B, v)
	}
	count := 0
	end, err := jsonscan.Array(w.B, v, 2, func(_, e int) (int, error) {
		count++
		if e >= len(w.B) || w.B[e] != '{' {
			if _, err := jsonscan.Skip(w.B, e, 3); err != nil {
				return e, err
			}
			return e, TypeError(param+"[]", "an object", w.B, e)
		}
		return w.Part(e, 3)
	})
	if err != nil {
		return end, Syntax(err)
	}
	if count == 0 {
		return end, &llm.RequestError{Param: param, Message: "Invalid '" + param + "': empty array. Expected an array with minimum length 1, but got an empty array instead."}
	}
	w.Bound.PromptBytes += int64(end - v)
	return end, nil
}

// Prompt walks a prompt value that is not a message list (system, instructions, input) at
// B[v], adding its bytes to the estimate.
func (w *Walker) Prompt(v int) (int, error) {
	end, err := w.Content(v, 2)
	if err != nil {
		return end, Syntax(err)
	}
	w.Bound.PromptBytes += int64(end - v)
	return end, nil
}
