package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

// The Realtime API (GA) over WebSocket: one JSON event per text frame. A
// gateway reads what bounds a response's cost from the client's events
// (what they append to the conversation, the output caps) and its usage
// from the server's response.done; every event passes on unchanged.

// Audio token rates of the Realtime API's audio, as OpenAI documents them:
// a token per 100 ms of input, per 50 ms of output. Audio is 24 kHz mono
// 16-bit PCM (48,000 bytes a second).
const (
	RealtimeAudioInputTokensPerSecond  = 10
	RealtimeAudioOutputTokensPerSecond = 20
	RealtimeAudioBytesPerSecond        = 48_000
)

// RealtimeClientEvent is what bounds cost in a client event.
type RealtimeClientEvent struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Session *struct {
		Instructions    *string         `json:"instructions"`
		MaxOutputTokens json.RawMessage `json:"max_output_tokens"`
	} `json:"session"`
	Item *realtimeItem `json:"item"`
	// Audio is input_audio_buffer.append's base64 audio.
	Audio    string `json:"audio"`
	Response *struct {
		Instructions    *string         `json:"instructions"`
		MaxOutputTokens json.RawMessage `json:"max_output_tokens"`
		Input           json.RawMessage `json:"input"`
		Conversation    string          `json:"conversation"`
	} `json:"response"`
}

type realtimeItem struct {
	Content []struct {
		Text       string `json:"text"`
		Transcript string `json:"transcript"`
		Audio      string `json:"audio"`
	} `json:"content"`
	Output    string `json:"output"`
	Arguments string `json:"arguments"`
}

// ErrRealtimeEvent is a frame that is no Realtime API event: not a JSON
// object with a string type.
var ErrRealtimeEvent = errors.New("not a Realtime API event")

// ParseRealtimeClientEvent reads a client event.
func ParseRealtimeClientEvent(frame []byte) (RealtimeClientEvent, error) {
	var e RealtimeClientEvent
	if err := json.Unmarshal(frame, &e); err != nil {
		return e, errors.Join(ErrRealtimeEvent, err)
	}
	if e.Type == "" {
		return e, errors.Join(ErrRealtimeEvent, errors.New(`no "type"`))
	}
	return e, nil
}

// Appended estimates the input tokens the event adds to every later
// response's input: the text it appends (session instructions, an item's
// text) at llm.BytesPerToken, and its audio at the input audio rate.
func (e *RealtimeClientEvent) Appended() int64 {
	var text, audio int64
	switch e.Type {
	case "session.update":
		if e.Session != nil && e.Session.Instructions != nil {
			text = int64(len(*e.Session.Instructions))
		}
	case "conversation.item.create":
		if it := e.Item; it != nil {
			text = int64(len(it.Output) + len(it.Arguments))
			for _, c := range it.Content {
				text += int64(len(c.Text) + len(c.Transcript))
				audio += int64(base64.StdEncoding.DecodedLen(len(c.Audio)))
			}
		}
	case "input_audio_buffer.append":
		audio = int64(base64.StdEncoding.DecodedLen(len(e.Audio)))
	}
	return ceilDiv(text, llm.BytesPerToken) + ceilDiv(audio*RealtimeAudioInputTokensPerSecond, RealtimeAudioBytesPerSecond)
}

// ResponseExtra estimates the input a response.create adds for that
// response alone: its own instructions and input items.
func (e *RealtimeClientEvent) ResponseExtra() int64 {
	if e.Response == nil {
		return 0
	}
	n := int64(len(e.Response.Input))
	if e.Response.Instructions != nil {
		n += int64(len(*e.Response.Instructions))
	}
	return ceilDiv(n, llm.BytesPerToken)
}

// RealtimeCap reads a max_output_tokens of the Realtime API: a number
// (set, n), "inf" (set, 0: none), or absent (not set).
func RealtimeCap(raw json.RawMessage) (n int64, set bool, err error) {
	s := strings.TrimSpace(string(raw))
	switch s {
	case "", "null":
		return 0, false, nil
	case `"inf"`:
		return 0, true, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, false, &llm.RequestError{Param: "max_output_tokens", Message: `max_output_tokens must be a positive integer or "inf".`}
	}
	return n, true, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// RealtimeServerEvent is what a gateway reads of a server event.
type RealtimeServerEvent struct {
	Type string `json:"type"`
	// ResponseID is a delta's response_id.
	ResponseID string `json:"response_id"`
	// DeltaBytes is the length of a delta's text, or base64 audio.
	DeltaBytes int `json:"-"`
	Response   *struct {
		ID     string         `json:"id"`
		Status string         `json:"status"`
		Usage  *RealtimeUsage `json:"usage"`
	} `json:"response"`
	Error *struct {
		EventID string `json:"event_id"`
		Code    string `json:"code"`
	} `json:"error"`
}

// RealtimeUsage is response.done's usage: its input and output, text and
// audio apart.
type RealtimeUsage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	InputTokenDetails struct {
		CachedTokens        int64 `json:"cached_tokens"`
		TextTokens          int64 `json:"text_tokens"`
		AudioTokens         int64 `json:"audio_tokens"`
		CachedTokensDetails struct {
			AudioTokens int64 `json:"audio_tokens"`
		} `json:"cached_tokens_details"`
	} `json:"input_token_details"`
	OutputTokenDetails struct {
		TextTokens  int64 `json:"text_tokens"`
		AudioTokens int64 `json:"audio_tokens"`
	} `json:"output_token_details"`
}

// Usage is the usage the gateway settles: input (cached apart) and output,
// and their audio parts (the input's not read from a cache).
func (u *RealtimeUsage) Usage() llm.Usage {
	d := &u.InputTokenDetails
	return llm.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: d.CachedTokens,
		AudioInputTokens: max(0, d.AudioTokens-d.CachedTokensDetails.AudioTokens), AudioOutputTokens: u.OutputTokenDetails.AudioTokens}
}

// ParseRealtimeServerEvent reads a server event. A delta, most of what a
// provider sends (audio by the kilobyte), is read in one pass that copies
// nothing but its type and response id; the others are decoded.
func ParseRealtimeServerEvent(frame []byte) (RealtimeServerEvent, error) {
	var e RealtimeServerEvent
	if readDelta(frame, &e) {
		return e, nil
	}
	if err := json.Unmarshal(frame, &e); err != nil {
		return e, errors.Join(ErrRealtimeEvent, err)
	}
	return e, nil
}

// readDelta reads frame into e when it is a valid object whose type ends
// in ".delta": its type, response_id and the length of its delta.
func readDelta(frame []byte, e *RealtimeServerEvent) bool {
	v := jsonscan.SkipSpace(frame, 0)
	if jsonscan.At(frame, v) != '{' {
		return false
	}
	var typ, responseID []byte
	_, err := jsonscan.Object(frame, v, 1, func(m jsonscan.Member) (int, error) {
		if m.Escaped {
			return -1, nil
		}
		switch string(frame[m.KeyStart:m.KeyEnd]) {
		case "type":
			typ = jsonscan.StringAt(frame, m.Value)
		case "response_id":
			responseID = jsonscan.StringAt(frame, m.Value)
		case "delta":
			e.DeltaBytes = len(jsonscan.StringAt(frame, m.Value))
		}
		return -1, nil
	})
	if err != nil || !bytes.HasSuffix(typ, []byte(".delta")) {
		e.DeltaBytes = 0
		return false
	}
	e.Type, e.ResponseID = string(typ), string(responseID)
	return true
}

// OutputSoFar is the output tokens a server event shows a response
// produced, for a response cut before its response.done: a text delta
// counts one token (as a stream's delta does), an audio delta its length
// at the output audio rate; a transcript of audio counts nothing.
func (e *RealtimeServerEvent) OutputSoFar() int64 {
	switch e.Type {
	case "response.output_text.delta", "response.function_call_arguments.delta":
		return 1
	case "response.output_audio.delta":
		n := int64(base64.StdEncoding.DecodedLen(e.DeltaBytes))
		return max(1, ceilDiv(n*RealtimeAudioOutputTokensPerSecond, RealtimeAudioBytesPerSecond))
	}
	return 0
}
