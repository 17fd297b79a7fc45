package mockprovider

import (
	"context"
	"net/http"
)

// streamer writes one streamed answer, an event at a time, flushing each.
type streamer struct {
	s      *Server
	w      http.ResponseWriter
	rc     *http.ResponseController
	ctx    context.Context
	c      *call
	buf    []byte
	chunks int64 // content chunks sent
	seq    int64 // Responses sequence_number
	failed bool
}

// stream writes a streamed answer and reports how it ended. A [mock cut=K] directive ends it by
// aborting the handler (panic(http.ErrAbortHandler), the net/http way to drop a connection)
// after counting it, so stream does not return in that case.
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, c *call) Outcome {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Request-Id", "req_mock_"+c.id)
	w.WriteHeader(http.StatusOK)
	st := &streamer{s: s, w: w, rc: http.NewResponseController(w), ctx: ctx, c: c, buf: make([]byte, 0, 1024)}
	var ok bool
	switch c.route {
	case RouteChat:
		ok = st.chat()
	case RouteResponses:
		ok = st.responses()
	default:
		ok = st.messages()
	}
	if !ok {
		return Cancelled
	}
	return Completed
}

// flush sends what is buffered; it reports false once the client is gone.
func (st *streamer) flush() bool {
	if st.failed || st.ctx.Err() != nil {
		st.failed = true
		return false
	}
	if _, err := st.w.Write(st.buf); err != nil {
		st.failed = true
		return false
	}
	st.buf = st.buf[:0]
	if err := st.rc.Flush(); err != nil {
		st.failed = true
		return false
	}
	return true
}

// content sends the content chunks: for chunk j, tokens [j×TokensPerChunk, ...) of every
// completion, through emit. It honours ChunkInterval and a cut directive, and reports false
// once the client is gone.
func (st *streamer) content(emit func(choice, from, to int64)) bool {
	per := int64(st.s.opts.TokensPerChunk)
	for from := int64(0); from < st.c.perChoice; from += per {
		to := min(from+per, st.c.perChoice)
		for i := range st.c.n {
			st.cutIfDue()
			if st.chunks > 0 && st.s.opts.ChunkInterval > 0 && !st.s.wait(st.ctx, st.s.opts.ChunkInterval) {
				return false
			}
			emit(i, from, to)
			st.chunks++
			if !st.flush() {
				return false
			}
		}
	}
	if st.c.cut >= 0 {
		st.cut()
	}
	return true
}

func (st *streamer) cutIfDue() {
	if st.c.cut >= 0 && st.chunks >= st.c.cut {
		st.cut()
	}
}

func (st *streamer) cut() {
	st.flush()
	st.s.end(st.c.route, Cut)
	panic(http.ErrAbortHandler)
}
