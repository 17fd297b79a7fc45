package mockprovider

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

// The realtime API (GET /v1/realtime?model=..., WebSocket, the OpenAI
// Realtime API's GA events) is spoken enough to try a live session:
//
//   - session.update merges instructions, max_output_tokens and
//     output_modalities, answered session.updated;
//   - conversation.item.create adds an item (conversation.item.added and
//     conversation.item.done); input_audio_buffer.append and .commit add
//     an audio item, and with turn detection on (session.update's
//     audio.input.turn_detection not null) a commit starts a response, as
//     the provider's voice activity detection does;
//   - response.create answers response.created, one delta per
//     TokensPerChunk tokens (response.output_text.delta, or with audio
//     output response.output_audio.delta and
//     response.output_audio_transcript.delta), ChunkInterval apart, and
//     response.done with its usage;
//   - any other event type is answered with an error event.
//
// Usage is exact: a response's input tokens are its conversation's text
// bytes (instructions, the items' text) divided by 4, rounded up, plus its
// audio tokens (RealtimeAudioInputTokensPerSecond of 24 kHz 16-bit audio)
// and the output tokens of its earlier responses, at least 1; its output
// is min(cap, [mock tokens=N] or DefaultMaxTokens), the cap being the
// response's or the session's max_output_tokens ("inf": none). The answer
// joins the conversation (unless the response was out of band). Directives in any text of the session: [mock tokens=N],
// [mock cut=K] (send K deltas, then drop the connection with no close
// frame and no usage) and [mock close=CODE] (answer the next
// response.create by closing with CODE).

// Audio token rates of the mock's realtime usage, as the provider documents
// its audio: 1 token per 100 ms of input, per 50 ms of output.
const (
	RealtimeAudioInputTokensPerSecond  = 10
	RealtimeAudioOutputTokensPerSecond = 20
	// realtimeAudioBytesPerSecond is 24 kHz mono 16-bit PCM.
	realtimeAudioBytesPerSecond = 48_000
)

// RealtimeStats counts the mock's live sessions.
type RealtimeStats struct {
	// Connections counts the sessions opened; Open those still open.
	Connections, Open int64
	// Responses counts the responses begun, Completed those that sent
	// response.done.
	Responses, Completed int64
	// ClientEvents counts the events received.
	ClientEvents int64
}

// realtimeCounters are a Server's RealtimeStats.
type realtimeCounters struct {
	connections, open, responses, completed, events atomic.Int64
}

// RealtimeStats returns a snapshot of the realtime counters.
func (s *Server) RealtimeStats() RealtimeStats {
	c := &s.live
	return RealtimeStats{Connections: c.connections.Load(), Open: c.open.Load(), Responses: c.responses.Load(),
		Completed: c.completed.Load(), ClientEvents: c.events.Load()}
}

var realtimeUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// realtime serves one live session.
func (s *Server) realtime(w http.ResponseWriter, r *http.Request) {
	model := r.URL.Query().Get("model")
	if !knownModel(model) {
		writeError(w, RouteChat, http.StatusNotFound, "The model `"+model+"` does not exist or you do not have access to it.", "model", "model_not_found")
		return
	}
	conn, err := realtimeUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	s.live.connections.Add(1)
	s.live.open.Add(1)
	defer s.live.open.Add(-1)
	defer conn.Close()
	rs := &realtimeSession{s: s, conn: conn, id: "sess_mock" + strconv.FormatInt(s.seq.Add(1), 10), model: model,
		maxOutput: -1, modalities: []string{"text"}, directives: directives{tokens: -1, cut: -1}}
	rs.send(map[string]any{"type": "session.created", "session": rs.session()})
	for {
		_, frame, err := conn.ReadMessage()
		if err != nil {
			return
		}
		s.live.events.Add(1)
		if !rs.handle(frame) {
			return
		}
	}
}

// realtimeSession is the state of one live session.
type realtimeSession struct {
	s            *Server
	conn         *websocket.Conn
	id, model    string
	instructions string
	// maxOutput is the session's max_output_tokens; -1 is "inf".
	maxOutput  int64
	modalities []string
	// textBytes, audioTokens and answered (the output of its responses)
	// are the conversation's input so far.
	textBytes, audioTokens, answered int64
	// buffered is the audio appended and not yet committed, in bytes.
	buffered   int64
	directives directives
	closeCode  int
	seq        int64
	// turnDetection is set by session.update's
	// audio.input.turn_detection: a commit starts a response by itself.
	turnDetection bool
}

// realtimeEvent is what the mock reads of a client event.
type realtimeEvent struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Session *struct {
		Instructions     *string         `json:"instructions"`
		MaxOutputTokens  json.RawMessage `json:"max_output_tokens"`
		OutputModalities []string        `json:"output_modalities"`
		Audio            *struct {
			Input *struct {
				TurnDetection json.RawMessage `json:"turn_detection"`
			} `json:"input"`
		} `json:"audio"`
	} `json:"session"`
	Item     json.RawMessage `json:"item"`
	Audio    string          `json:"audio"`
	Response *struct {
		Instructions     *string         `json:"instructions"`
		MaxOutputTokens  json.RawMessage `json:"max_output_tokens"`
		OutputModalities []string        `json:"output_modalities"`
		Conversation     string          `json:"conversation"`
	} `json:"response"`
}

// handle answers one client event; false ends the session.
func (rs *realtimeSession) handle(frame []byte) bool {
	var ev realtimeEvent
	if err := json.Unmarshal(frame, &ev); err != nil {
		return rs.fail("invalid_json", "The event is not valid JSON: "+err.Error(), "", ev.EventID)
	}
	switch ev.Type {
	case "session.update":
		return rs.update(&ev)
	case "conversation.item.create":
		return rs.addItem(ev.Item)
	case "input_audio_buffer.append":
		n, err := base64.StdEncoding.DecodeString(ev.Audio)
		if err != nil {
			return rs.fail("invalid_value", "audio is not base64.", "audio", ev.EventID)
		}
		rs.buffered += int64(len(n))
		return true
	case "input_audio_buffer.commit":
		rs.audioTokens += ceilDiv(rs.buffered*RealtimeAudioInputTokensPerSecond, realtimeAudioBytesPerSecond)
		rs.buffered = 0
		item := rs.nextID("item")
		if !rs.send(map[string]any{"type": "input_audio_buffer.committed", "item_id": item}) {
			return false
		}
		if rs.turnDetection {
			// The provider's turn detection answers a turn by itself.
			return rs.respond(&realtimeEvent{Type: "response.create"})
		}
		return true
	case "input_audio_buffer.clear":
		rs.buffered = 0
		return rs.send(map[string]any{"type": "input_audio_buffer.cleared"})
	case "response.create":
		return rs.respond(&ev)
	case "response.cancel":
		return true // responses are answered whole before the next event is read
	}
	return rs.fail("invalid_value", "Invalid value: '"+ev.Type+"'. Supported values are the Realtime API's client events.", "type", ev.EventID)
}

// update applies session.update.
func (rs *realtimeSession) update(ev *realtimeEvent) bool {
	if u := ev.Session; u != nil {
		if u.Instructions != nil {
			rs.instructions = *u.Instructions
			rs.directives.scan([]byte(rs.instructions))
		}
		if len(u.MaxOutputTokens) > 0 {
			rs.maxOutput = parseCap(u.MaxOutputTokens)
		}
		if len(u.OutputModalities) > 0 {
			rs.modalities = u.OutputModalities
		}
		if a := u.Audio; a != nil && a.Input != nil && len(a.Input.TurnDetection) > 0 {
			rs.turnDetection = string(a.Input.TurnDetection) != "null"
		}
	}
	return rs.send(map[string]any{"type": "session.updated", "session": rs.session()})
}

// addItem adds a conversation item, counting its text.
func (rs *realtimeSession) addItem(raw json.RawMessage) bool {
	var item struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Output  string `json:"output"`
		Content []struct {
			Type       string `json:"type"`
			Text       string `json:"text"`
			Transcript string `json:"transcript"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &item); err != nil || item.Type == "" {
		return rs.fail("invalid_value", "item must be an object with a type.", "item", "")
	}
	text := item.Output
	for _, c := range item.Content {
		text += c.Text + c.Transcript
	}
	rs.textBytes += int64(len(text))
	rs.directives.scan([]byte(text))
	if code := scanClose([]byte(text)); code != 0 {
		rs.closeCode = code
	}
	if item.ID == "" {
		item.ID = rs.nextID("item")
	}
	added := map[string]any{"id": item.ID, "object": "realtime.item", "type": item.Type, "role": item.Role, "status": "completed"}
	return rs.send(map[string]any{"type": "conversation.item.added", "item": added}) &&
		rs.send(map[string]any{"type": "conversation.item.done", "item": added})
}

// session is the session object the mock shows.
func (rs *realtimeSession) session() map[string]any {
	var maxOutput any = "inf"
	if rs.maxOutput >= 0 {
		maxOutput = rs.maxOutput
	}
	return map[string]any{"id": rs.id, "object": "realtime.session", "type": "realtime", "model": rs.model,
		"instructions": rs.instructions, "max_output_tokens": maxOutput, "output_modalities": rs.modalities}
}

// fail sends an error event; the session goes on.
func (rs *realtimeSession) fail(code, message, param, eventID string) bool {
	e := map[string]any{"type": "invalid_request_error", "code": code, "message": message, "param": nil, "event_id": nil}
	if param != "" {
		e["param"] = param
	}
	if eventID != "" {
		e["event_id"] = eventID
	}
	return rs.send(map[string]any{"type": "error", "error": e})
}

// send writes one server event, with an event_id; false when the client
// is gone.
func (rs *realtimeSession) send(ev map[string]any) bool {
	ev["event_id"] = rs.nextID("event")
	b, _ := json.Marshal(ev)
	return rs.conn.WriteMessage(websocket.TextMessage, b) == nil
}

func (rs *realtimeSession) nextID(prefix string) string {
	rs.seq++
	return prefix + "_mock" + strconv.FormatInt(rs.seq, 10)
}

// parseCap reads a max_output_tokens: a number, or "inf" (-1).
func parseCap(raw json.RawMessage) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// pause waits the chunk interval.
func (s *Server) pause() {
	if s.opts.ChunkInterval > 0 {
		time.Sleep(s.opts.ChunkInterval)
	}
}
