package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sluicehq/sluice/llm"
	"github.com/valyala/fasthttp"
)

// stream answers the client with the provider's event stream. fasthttp's
// server pulls the body from streamBody on the connection's own goroutine:
// each event is read from the provider, rewritten if need be, and written
// to the client as one chunk, flushed at once, with no goroutine or pipe
// between the two connections. The call is settled when fasthttp closes
// the body: with the reported usage, or when none came (a cut, a client
// gone), with the input estimate and the output counted in the stream.
//
// The stream owns x, the exchange with the provider, once it has started:
// x is closed when the body closes. The first event is read before the
// answer starts: a stream that fails there (an event over the size cap, a
// cut) is returned as the error, for the client to be told in the API's
// error shape rather than given a 200 with nothing in it, and x is left to
// the caller.
func (c *call) stream(x *exchange, adm *admission) error {
	upstream := x.resp.BodyStream()
	br, _ := upstreamReaders.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(upstream, 4096)
	} else {
		br.Reset(upstream)
	}
	s := &streamBody{c: c, x: x, adm: adm, upstream: upstream, reader: c.rt.stream(x.injected),
		br: br, events: llm.NewEventReader(br)}
	s.stopDeadline = c.g.clock.AfterFunc(c.deadline.Sub(c.g.now()), func() { s.closeUpstream(errors.New("request deadline")) })
	for len(s.pending) == 0 && !s.ended {
		s.next()
	}
	if s.forwarded > 0 {
		c.event.FirstToken = c.g.since(c.start)
		c.trace.firstToken()
	}
	if s.upstreamErr != nil && !s.endCleanly {
		s.stopDeadline()
		closeStream(upstream, s.upstreamErr)
		s.br.Reset(nil)
		upstreamReaders.Put(s.br)
		return s.upstreamErr
	}
	c.event.FirstToken = c.g.since(c.start)
	c.ctx.SetStatusCode(200)
	c.ctx.Response.Header.Set("Cache-Control", "no-cache")
	c.ctx.SetBodyStream(s, -1)
	c.g.streams.add(s)
	return nil
}

// openStreams are the streams being answered, for CutStreams.
type openStreams struct {
	mu   sync.Mutex
	open map[*streamBody]struct{}
}

func (o *openStreams) add(s *streamBody) {
	o.mu.Lock()
	if o.open == nil {
		o.open = map[*streamBody]struct{}{}
	}
	o.open[s] = struct{}{}
	o.mu.Unlock()
}

func (o *openStreams) remove(s *streamBody) {
	o.mu.Lock()
	delete(o.open, s)
	o.mu.Unlock()
}

// errShutdown cuts the streams still open when the gateway stops.
var errShutdown = errors.New("the gateway is shutting down")

// CutStreams ends the streams still being answered, as a shutdown whose
// drain deadline has passed must: each provider call is cancelled, the
// client's stream fails (it was not complete), and the call is settled
// with what it streamed (the input, and the output counted so far) rather
// than left open for the next start's sweep to charge its whole
// reservation. Drain then waits for those settlements.
func (g *Gateway) CutStreams() {
	g.streams.mu.Lock()
	open := make([]*streamBody, 0, len(g.streams.open))
	for s := range g.streams.open {
		open = append(open, s)
	}
	g.streams.mu.Unlock()
	for _, s := range open {
		s.closeUpstream(errShutdown)
	}
	g.cutLive() // and the live connections: realtime_conn.go
}

// upstreamReaders are the 4 KiB buffers streams read the provider through.
var upstreamReaders sync.Pool

// streamBody is the client's body of a streamed answer. fasthttp calls
// WriteTo (or Read), then CloseWithError once, on one goroutine; only the
// deadline's timer runs beside them, and it touches only the upstream
// stream, under mu.
//
// A stream the provider cut is passed on as a failure: WriteTo returns the
// error, fasthttp drops the connection without the final chunk, and the
// client sees the stream fail instead of a clean, truncated end.
type streamBody struct {
	c        *call
	x        *exchange
	adm      *admission
	upstream io.Reader
	br       *bufio.Reader // under events; back to upstreamReaders once closed
	events   *llm.EventReader
	reader   streamReader
	// stopDeadline stops the timer that cuts the stream at the call's
	// deadline.
	stopDeadline func() bool
	// out holds a rewritten event; pending is what is left to forward of
	// the current event (Read may take it in parts).
	out, pending []byte
	// ended is set once the provider's stream has ended, cleanly or with
	// upstreamErr. forwarded counts the events read; endCleanly is set
	// when an event over the size cap came after some: the stream then
	// ends with the API's error event, cleanly, rather than cut.
	ended       bool
	upstreamErr error
	forwarded   int
	endCleanly  bool

	mu       sync.Mutex
	released bool // resp is released: the upstream stream is gone
}

// SupportsBodyWriteTo lets fasthttp frame each Write of WriteTo as a chunk
// of its own, flushed at once.
func (s *streamBody) SupportsBodyWriteTo() bool { return true }

// WriteTo forwards every event as one Write, straight from the event
// reader's buffer.
func (s *streamBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		if len(s.pending) == 0 {
			if s.ended {
				if s.endCleanly {
					return n, nil
				}
				return n, s.upstreamErr
			}
			s.next()
			continue
		}
		m, err := w.Write(s.pending)
		n += int64(m)
		s.pending = s.pending[m:]
		if err != nil {
			return n, err
		}
	}
}

// Read serves the same bytes for a fasthttp path that reads instead: one
// event per call when it fits.
func (s *streamBody) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.ended {
			if s.upstreamErr != nil && !s.endCleanly {
				return 0, s.upstreamErr
			}
			return 0, io.EOF
		}
		s.next()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// next reads the provider's next event into pending: as it came, rewritten
// by the route's stream reader, or nothing (the usage chunk the client did
// not ask for). At the end of the stream it sets ended.
func (s *streamBody) next() {
	ev, err := s.events.Next()
	// io.ErrUnexpectedEOF itself is a last event without its blank line,
	// after a clean end of the body: forward it. Any other error is the
	// upstream stream failing.
	if err != nil && err != io.ErrUnexpectedEOF {
		s.ended = true
		if err != io.EOF {
			s.upstreamErr = err
		}
		if errors.Is(err, llm.ErrEventTooLarge) && s.forwarded > 0 {
			// Events were forwarded: end the stream as the API ends
			// one that failed, with an error event.
			s.endCleanly = true
			s.pending = s.c.rt.streamError("The provider sent an event larger than the gateway accepts; the answer ends here.")
		}
		return
	}
	s.forwarded++
	s.c.teeStream(ev.Raw) // kept for the response cache (cache.go)
	if err != nil {
		s.ended = true
	}
	if len(ev.Raw) == 0 {
		return
	}
	if ev.Data == nil {
		s.pending = ev.Raw
		return
	}
	forward, _ := s.reader.Feed(ev.Name, ev.Data)
	switch {
	case forward == nil:
		// dropped
	case sameSlice(forward, ev.Data):
		s.pending = ev.Raw
	default:
		s.out = llm.AppendEvent(s.out[:0], ev.Name, forward)
		s.pending = s.out
	}
}

// CloseWithError is called by fasthttp once the body is written, or could
// not be: werr is the error that stopped it (the provider's, or the
// client's connection failing), nil after a clean end. The call is settled
// once the stream's final chunk is written out (fasthttp sends it only
// after this returns); Drain still waits for it.
func (s *streamBody) CloseWithError(werr error) error {
	c := s.c
	c.g.streams.remove(s)
	s.stopDeadline()
	// The watch closed the upstream connection if the client left while
	// the provider was silent.
	left := s.x.watch.stop()
	s.mu.Lock()
	clean := false
	switch {
	case left:
		closeStream(s.upstream, errors.New("client went away"))
		c.event.Outcome = outcomeClientGone
	case s.upstreamErr != nil:
		closeStream(s.upstream, s.upstreamErr)
		c.event.Outcome, c.event.Class = outcomeUpstreamError, "transient"
	case werr != nil || !s.ended:
		// The client went away (or the answer was never written).
		closeStream(s.upstream, errors.New("client went away"))
		c.event.Outcome = outcomeClientGone
	default:
		_ = s.x.resp.CloseBodyStream()
		clean = true
	}
	s.released = true
	s.mu.Unlock()
	s.x.close(left)
	s.br.Reset(nil)
	upstreamReaders.Put(s.br)
	s.upstream, s.pending, s.br, s.events = nil, nil, nil, nil
	u, reported := s.reader.Usage(), s.reader.Reported()
	c.keepStream(clean && !s.reader.Malformed(), s.adm, u, reported) // the response cache (cache.go)
	var why error
	if s.upstreamErr != nil {
		why = s.upstreamErr
		c.event.Cause = fmt.Errorf("provider stream failed: %w", s.upstreamErr)
	}
	c.trace.endUpstream(c.event.UpstreamStatus, s.adm.model.Name, c.event.Attempts, u, reported, why)
	switch {
	case s.reader.Malformed():
		// The provider sent a count that does not parse: what the call
		// produced is unknown, and the reservation is charged.
		c.g.log.Error("provider streamed usage that does not parse; the reservation is charged instead", "request_id", c.event.RequestID,
			"route", c.rt.name, "model", s.adm.model.Name)
		c.event.ImpossibleUsage = true
		u, reported = llm.Usage{}, false
	case !reported:
		// Charge what was produced: the input as estimated (or as the
		// stream's start reported it) and the output counted.
		u.InputTokens = max(u.InputTokens, c.bound.InputTokens)
		reported = true
	}
	c.event.Status = 200
	c.upstreamDone()
	c.adm, c.ending, c.usage, c.reported = s.adm, endCharge, u, reported
	c.afterAnswer()
	return nil
}

// closeUpstream ends the provider's stream early (the request deadline),
// unless the body is already closed.
func (s *streamBody) closeUpstream(why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.released {
		closeStream(s.upstream, why)
	}
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// closeStream stops reading an upstream stream, closing its connection:
// the provider sees the call cancelled.
func closeStream(upstream io.Reader, why error) {
	if s, ok := upstream.(fasthttp.ReadCloserWithError); ok {
		_ = s.CloseWithError(why)
	}
}
