package mockprovider

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strconv"

	"github.com/fasthttp/websocket"
)

// respond answers response.create: response.created, the deltas, and
// response.done with the response's usage, unless a directive cuts or
// closes the connection.
func (rs *realtimeSession) respond(ev *realtimeEvent) bool {
	r := ev.Response
	maxOutput, modalities, instructions, outOfBand := rs.maxOutput, rs.modalities, rs.instructions, false
	if r != nil {
		if len(r.MaxOutputTokens) > 0 {
			maxOutput = parseCap(r.MaxOutputTokens)
		}
		if len(r.OutputModalities) > 0 {
			modalities = r.OutputModalities
		}
		if r.Instructions != nil {
			// The response's instructions replace the session's for it.
			instructions = *r.Instructions
			rs.directives.scan([]byte(instructions))
		}
		outOfBand = r.Conversation == "none"
	}
	if code := max(scanClose([]byte(instructions)), rs.closeCode); code != 0 {
		_ = rs.conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, "mock close directive"))
		return false
	}
	textIn := rs.textBytes + int64(len(instructions))
	input := max(1, ceilDiv(textIn, 4)+rs.audioTokens+rs.answered)
	output := rs.s.opts.DefaultMaxTokens
	if rs.directives.tokens >= 0 {
		output = rs.directives.tokens
	}
	if maxOutput >= 0 {
		output = min(output, maxOutput)
	}
	audio := slices.Contains(modalities, "audio")
	rs.s.live.responses.Add(1)
	id, item := rs.nextID("resp"), rs.nextID("item")
	if !rs.send(map[string]any{"type": "response.created", "response": map[string]any{"id": id, "object": "realtime.response", "status": "in_progress",
		"output": []any{}, "usage": nil}}) {
		return false
	}
	if !rs.deltas(id, item, output, audio) {
		return false
	}
	if !outOfBand {
		rs.answered += output // read again as input, token for token
	}
	rs.s.live.completed.Add(1)
	return rs.send(map[string]any{"type": "response.done", "response": map[string]any{"id": id, "object": "realtime.response",
		"status": "completed", "output": []any{map[string]any{"id": item, "type": "message", "role": "assistant", "status": "completed"}},
		"usage": realtimeUsage(input, rs.audioTokens, output, audio)}})
}

// deltas sends the response's output in deltas of TokensPerChunk tokens;
// false when the connection ended (a [mock cut=K] drops it after K).
func (rs *realtimeSession) deltas(id, item string, output int64, audio bool) bool {
	per := int64(rs.s.opts.TokensPerChunk)
	sent := int64(0)
	for from := int64(0); from < output; from += per {
		if rs.directives.cut >= 0 && sent == rs.directives.cut {
			_ = rs.conn.UnderlyingConn().Close() // no close frame, no usage
			return false
		}
		to := min(output, from+per)
		text := string(appendTokens(nil, from, to))
		ok := true
		if audio {
			pcm := make([]byte, (to-from)*realtimeAudioBytesPerSecond/RealtimeAudioOutputTokensPerSecond)
			ok = rs.send(map[string]any{"type": "response.output_audio.delta", "response_id": id, "item_id": item, "output_index": 0, "content_index": 0,
				"delta": base64.StdEncoding.EncodeToString(pcm)}) &&
				rs.send(map[string]any{"type": "response.output_audio_transcript.delta", "response_id": id, "item_id": item, "output_index": 0, "content_index": 0, "delta": text})
		} else {
			ok = rs.send(map[string]any{"type": "response.output_text.delta", "response_id": id, "item_id": item, "output_index": 0, "content_index": 0, "delta": text})
		}
		if !ok {
			return false
		}
		sent++
		rs.s.pause()
	}
	return true
}

// realtimeUsage is response.done's usage: all output is audio when the
// response speaks, text otherwise.
func realtimeUsage(input, audioIn, output int64, audio bool) map[string]any {
	textOut, audioOut := output, int64(0)
	if audio {
		textOut, audioOut = 0, output
	}
	audioIn = min(audioIn, input)
	return map[string]any{"total_tokens": input + output, "input_tokens": input, "output_tokens": output,
		"input_token_details": map[string]any{"cached_tokens": 0, "text_tokens": input - audioIn, "audio_tokens": audioIn,
			"cached_tokens_details": map[string]any{"text_tokens": 0, "audio_tokens": 0}},
		"output_token_details": map[string]any{"text_tokens": textOut, "audio_tokens": audioOut}}
}

// scanClose reads a [mock close=CODE] directive: the close code, 0 when
// absent.
func scanClose(text []byte) int {
	i := bytes.Index(text, []byte("[mock close="))
	if i < 0 {
		return 0
	}
	rest := text[i+len("[mock close="):]
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		return 0
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(rest[:end])))
	if err != nil || n < 1000 || n > 4999 {
		return 0
	}
	return n
}
