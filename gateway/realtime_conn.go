package gateway

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/openai"
)

// liveCloseWait is how long, once the gateway closed a connection, it
// waits for the client's own close frame, so that the error event and
// the close it sent are read before the socket goes.
const liveCloseWait = time.Second

// liveConn is one live connection: the client's WebSocket and the
// provider's, relayed both ways, and the responses made on them.
type liveConn struct {
	g        *Gateway
	c        *call // the connection's own call: its lease, settled at close
	model    *model
	client   *websocket.Conn
	upstream *websocket.Conn
	// clientMu and upstreamMu serialize the writes to each side.
	clientMu, upstreamMu sync.Mutex
	// upstreamDone is closed when the provider's side stopped reading.
	upstreamDone chan struct{}

	endOnce sync.Once
	// closeCode, closeReason and closeCause are how the connection
	// ended.
	closeCode               int
	closeReason, closeCause string

	mu sync.Mutex
	// lastInput is the conversation's size as the provider last reported
	// it (the input and output of its last response); appended is the
	// estimate of what was added since.
	lastInput, appended int64
	// sessionCap is the session's max_output_tokens (0: none, the model's).
	sessionCap int64
	// pending are the responses admitted and forwarded, oldest first;
	// each gets its provider's id with its response.created.
	pending []*liveResponse
	// responses counts the responses made on the connection.
	responses int
	// cancelled are the responses the provider started by itself that
	// the rules refused, by id, until their response.done; unsolicited is
	// what those that ended used, charged with the connection at its
	// close (realtime_unsolicited.go).
	cancelled   map[string]*liveResponse
	unsolicited llm.Usage
	// secs are the seconds the connection reserved (MetricSeconds).
	secs liveSeconds
}

func newLiveConn(c *call, m *model, up *websocket.Conn) *liveConn {
	return &liveConn{g: c.g, c: c, model: m, upstream: up, upstreamDone: make(chan struct{})}
}

// run relays the connection once the client is upgraded (on a goroutine
// of its own: c.ctx is no longer the connection's), then ends it.
func (lc *liveConn) run(client *websocket.Conn) {
	g := lc.g
	lc.c.ctx = nil
	lc.client = client
	client.SetReadLimit(int64(g.opts.LiveMaxFrameBytes))
	lc.upstream.SetReadLimit(int64(g.opts.LiveMaxFrameBytes) * 4)
	g.live.add(lc)
	defer g.live.remove(lc)
	stop := g.clock.AfterFunc(lc.c.deadline.Sub(g.now()), lc.timeUp)
	lc.startSeconds()
	go lc.fromUpstream()
	lc.fromClient()
	<-lc.upstreamDone
	stop()
	lc.cutClient()
	lc.finish()
}

// fromClient reads the client's events until it leaves or the connection
// ends: each is checked, accounted and forwarded, or answered with an
// error event.
func (lc *liveConn) fromClient() {
	for {
		typ, frame, err := lc.client.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				lc.end(websocket.CloseMessageTooBig, "frame over the gateway's size cap", causeFrameTooLarge, nil)
			}
			lc.endClientGone(err)
			return
		}
		if typ != websocket.TextMessage {
			lc.sendError(badEvent("invalid_event", "Binary frames are not Realtime API events; send JSON text frames.", ""))
			continue
		}
		ev, err := openai.ParseRealtimeClientEvent(frame)
		if err != nil {
			lc.sendError(badEvent("invalid_event", "The frame is not a Realtime API event (a JSON object with a type).", ""))
			continue
		}
		if !clientEvents[ev.Type] {
			lc.sendError(badEvent("unknown_event", "Unknown client event type "+quote(ev.Type)+"; this gateway forwards the Realtime API's client events only.", ev.EventID))
			continue
		}
		if ev.Type == "response.create" {
			lc.createResponse(&ev, frame)
			continue
		}
		if err := lc.note(&ev); err != nil {
			lc.sendError(badEventError(err, ev.EventID))
			continue
		}
		if !lc.forward(frame) {
			return
		}
	}
}

// clientEvents are the client events of the Realtime API (GA): any other
// type is answered with an error and not forwarded, so that no event the
// gateway cannot account for reaches the model.
var clientEvents = map[string]bool{
	"session.update": true, "input_audio_buffer.append": true, "input_audio_buffer.commit": true, "input_audio_buffer.clear": true,
	"conversation.item.create": true, "conversation.item.retrieve": true, "conversation.item.truncate": true, "conversation.item.delete": true,
	"response.create": true, "response.cancel": true, "output_audio_buffer.clear": true,
}

// note accounts for what a client event appends to the conversation, and
// the session's output cap.
func (lc *liveConn) note(ev *openai.RealtimeClientEvent) error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if ev.Type == "session.update" && ev.Session != nil {
		n, set, err := openai.RealtimeCap(ev.Session.MaxOutputTokens)
		if err != nil {
			return err
		}
		if set {
			lc.sessionCap = n
		}
	}
	lc.appended += ev.Appended()
	return nil
}

// forward sends a client event to the provider; false when the provider
// is gone (the connection is then ending).
func (lc *liveConn) forward(frame []byte) bool {
	lc.upstreamMu.Lock()
	defer lc.upstreamMu.Unlock()
	_ = lc.upstream.SetWriteDeadline(time.Now().Add(lc.g.opts.LiveWriteTimeout))
	if err := lc.upstream.WriteMessage(websocket.TextMessage, frame); err != nil {
		lc.end(websocket.CloseInternalServerErr, "provider connection lost", causeProviderGone, nil)
		return false
	}
	return true
}

// fromUpstream reads the provider's events until it closes or the
// connection ends: each is accounted (a response's usage settled before
// its response.done is passed on) and sent to the client unchanged.
func (lc *liveConn) fromUpstream() {
	defer close(lc.upstreamDone)
	for {
		typ, frame, err := lc.upstream.ReadMessage()
		if err != nil {
			lc.endUpstream(err)
			return
		}
		if typ == websocket.TextMessage {
			if ev, err := openai.ParseRealtimeServerEvent(frame); err == nil {
				lc.account(&ev)
			}
		}
		if !lc.send(typ, frame) {
			lc.endClientGone(nil)
			return
		}
	}
}

// send writes a frame to the client; false when the client is gone or
// does not read.
func (lc *liveConn) send(typ int, frame []byte) bool {
	lc.clientMu.Lock()
	defer lc.clientMu.Unlock()
	_ = lc.client.SetWriteDeadline(time.Now().Add(lc.g.opts.LiveWriteTimeout))
	return lc.client.WriteMessage(typ, frame) == nil
}

// endUpstream ends the connection the provider ended: with the provider's
// own close code and reason when it sent one (a provider's quota close
// stays terminal), else 1011 without quota words (a reconnect may work).
func (lc *liveConn) endUpstream(err error) {
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code != websocket.CloseNoStatusReceived && ce.Code != websocket.CloseAbnormalClosure && ce.Code != websocket.CloseTLSHandshake {
		lc.end(ce.Code, ce.Text, causeProviderClose, nil)
		return
	}
	lc.end(websocket.CloseInternalServerErr, "provider connection lost", causeProviderGone, nil)
}

// endClientGone ends a connection whose client left (err, its read's
// error: its close frame, if it sent one) or stopped reading (err nil):
// the provider's side is closed at once.
func (lc *liveConn) endClientGone(err error) {
	lc.endOnce.Do(func() {
		lc.closeCode, lc.closeReason, lc.closeCause = websocket.CloseAbnormalClosure, "client gone", causeClientGone
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			lc.closeCode, lc.closeReason = ce.Code, ce.Text
		}
		lc.closeUpstream()
		lc.cutClient()
	})
}

// cutClient ends the client's socket: its deadline passed at once, which
// ends a read or a write in progress (closing a connection fasthttp
// hijacked does nothing until its handler returns: then fasthttp does).
func (lc *liveConn) cutClient() {
	_ = lc.client.NetConn().SetDeadline(time.Now())
	_ = lc.client.NetConn().Close()
}

// end ends the connection from the gateway, for cause: the error event ev
// (nil: none) and a close frame with code and reason go to the client,
// whose own close is awaited for liveCloseWait; the provider's side is
// closed at once.
func (lc *liveConn) end(code int, reason, cause string, ev []byte) {
	lc.endOnce.Do(func() {
		lc.closeCode, lc.closeReason, lc.closeCause = code, reason, cause
		lc.closeUpstream()
		if ev != nil {
			lc.send(websocket.TextMessage, ev)
		}
		deadline := time.Now().Add(liveCloseWait)
		_ = lc.client.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline)
		_ = lc.client.SetReadDeadline(deadline)
	})
}

// closeUpstream closes the provider's side: a normal close frame, then
// the socket.
func (lc *liveConn) closeUpstream() {
	_ = lc.upstream.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = lc.upstream.NetConn().Close()
}

// finish ends the responses still open (charged their input and the
// output seen so far) and the connection's own call.
func (lc *liveConn) finish() {
	lc.mu.Lock()
	open := lc.pending
	lc.pending = nil
	lc.mu.Unlock()
	for _, r := range open {
		r.abandon()
	}
	c := lc.c
	// The seconds it was open, and what the responses the rules refused
	// used before their cancel landed.
	c.usage, c.reported = lc.unsolicitedUsage(), true
	lc.chargeSeconds()
	c.event.Outcome = outcomeAdmitted
	c.event.LiveClose, c.event.LiveCause, c.event.LiveSeconds = lc.closeCode, lc.closeCause, lc.g.since(c.start)
	lc.g.log.Info("live connection closed", "request_id", c.event.RequestID, "model", lc.model.Name, "session", c.session.id,
		"close_code", lc.closeCode, "close_reason", lc.closeReason, "responses", lc.responses, "seconds", lc.g.since(c.start).Seconds())
	c.end()
}

// liveConns are the live connections open, for CutStreams.
type liveConns struct {
	mu   sync.Mutex
	open map[*liveConn]struct{}
}

func (l *liveConns) add(lc *liveConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[*liveConn]struct{}{}
	}
	l.open[lc] = struct{}{}
}

// list returns the connections open now.
func (l *liveConns) list() []*liveConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.open))
}

func (l *liveConns) remove(lc *liveConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.open, lc)
}

// cutLive ends the live connections still open, as a shutdown whose drain
// deadline has passed must: each closes with 1012 (service restart: a
// client reconnects, to another replica), its responses in progress
// charged what they produced so far, and Drain then waits for their ends.
func (g *Gateway) cutLive() {
	for _, lc := range g.live.list() {
		lc.end(websocket.CloseServiceRestart, "the gateway is shutting down; reconnect", causeShutdown, nil)
	}
}

// LiveConnections is how many live connections are open.
func (g *Gateway) LiveConnections() int {
	g.live.mu.Lock()
	defer g.live.mu.Unlock()
	return len(g.live.open)
}

// LiveConnection is a live connection open in this process, for the
// console.
type LiveConnection struct {
	RequestID, Org, Workspace, KeyID, User, Model, Provider, Session string
	Opened                                                           time.Time
	// Responses counts the responses made on it so far.
	Responses int64
}

// LiveList returns the live connections open in this process, the oldest
// first.
func (g *Gateway) LiveList() []LiveConnection {
	open := g.live.list()
	out := make([]LiveConnection, 0, len(open))
	for _, lc := range open {
		c := lc.c
		lc.mu.Lock()
		n := lc.responses
		lc.mu.Unlock()
		out = append(out, LiveConnection{RequestID: c.event.RequestID, Org: c.who.Org, Workspace: c.who.Workspace, KeyID: c.who.KeyID,
			User: c.who.User, Model: lc.model.Name, Provider: c.event.Provider, Session: c.session.id, Opened: c.start, Responses: int64(n)})
	}
	slices.SortFunc(out, func(a, b LiveConnection) int { return a.Opened.Compare(b.Opened) })
	return out
}
