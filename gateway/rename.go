package gateway

import (
	"bytes"
	"encoding/json"
)

// setModel returns body with its top-level "model" set to name. It runs
// only when an alias or a fallback serves the call, so it may afford a
// token walk of the top level; the body was validated by the route's
// parser.
func setModel(body []byte, name string) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return body
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return body
		}
		start := dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return body
		}
		end := dec.InputOffset()
		if key != "model" {
			continue
		}
		// InputOffset after the key points before the colon and spaces.
		start += int64(bytes.IndexByte(body[start:end], ':') + 1)
		for start < end && (body[start] == ' ' || body[start] == '\t' || body[start] == '\n' || body[start] == '\r') {
			start++
		}
		out := make([]byte, 0, len(body)+len(name))
		out = append(out, body[:start]...)
		quoted, _ := json.Marshal(name) // a string always encodes
		out = append(out, quoted...)
		return append(out, body[end:]...)
	}
	return body
}
