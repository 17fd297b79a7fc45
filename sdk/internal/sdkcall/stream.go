package sdkcall

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"github.com/sluicehq/sluice/llm"
)

// streamBody is the body of a streamed answer as the SDK reads it: the provider's events, one
// at a time as the SDK asks for them, passed through the follower (which may edit or drop
// them), and the reservation settled when the stream ends or the SDK closes it. Since nothing
// is read ahead of the SDK, a stream closed part-way is charged the output the SDK received.
type streamBody struct {
	c        *call
	upstream io.ReadCloser
	events   *llm.EventReader
	// pending is what is left of the current event; it may point into the event reader's
	// buffer, which holds until the next event is read, once pending is drained.
	pending []byte
	// err is returned once pending is drained: io.EOF or the upstream's error.
	err error

	mu       sync.Mutex // guards follower: Close may race a Read
	follower Follower
	settled  sync.Once
}

func (c *call) newStreamBody(upstream io.ReadCloser) *streamBody {
	return &streamBody{
		c:        c,
		upstream: upstream,
		events:   llm.NewEventReader(bufio.NewReaderSize(upstream, 4096)),
		follower: c.api.Stream(c.injected),
	}
}

// Read reads the stream as edited by the follower.
func (s *streamBody) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.next()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// next reads one event into pending; at the end of the stream it settles and sets err.
func (s *streamBody) next() {
	ev, err := s.events.Next()
	if len(ev.Raw) > 0 {
		out := ev.Raw
		if ev.Data != nil {
			s.mu.Lock()
			data, _ := s.follower.Feed(ev.Name, ev.Data)
			s.mu.Unlock()
			out = llm.Forward(ev, data) // nil: dropped
		}
		s.pending = out
	}
	if err == nil {
		return
	}
	if err == io.ErrUnexpectedEOF { // not wrapped: a clean end inside an event
		err = io.EOF
	}
	if errors.Is(err, io.EOF) {
		err = io.EOF
	}
	s.err = err
	s.finish()
}

// Close closes the provider's stream and settles, for what was produced, when that was not
// done yet.
func (s *streamBody) Close() error {
	err := s.upstream.Close()
	s.finish()
	return err
}

// finish settles once: with the usage the provider reported, or, for a stream that ended
// before reporting it, with the input as estimated (or as the stream's start reported it) and
// the output counted in the stream so far.
func (s *streamBody) finish() {
	s.settled.Do(func() {
		s.mu.Lock()
		u, reported := s.follower.Usage(), s.follower.Reported()
		s.mu.Unlock()
		if !reported {
			u.InputTokens = max(u.InputTokens, s.c.bound.InputTokens)
		}
		s.c.finish(u, true)
	})
}
