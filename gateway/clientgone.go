package gateway

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// clientWatchDelay is how long an upstream call runs before the gateway
// starts watching its client's connection: a call answered sooner never
// pays for the watch, and a client that leaves a longer call has it
// cancelled at most this late.
const clientWatchDelay = 10 * time.Millisecond

// clientWatch watches a client's connection, while the gateway works on its
// call, for the client closing it; gone is then called once. It peeks at
// the socket through the runtime's poller, consuming nothing, on a
// goroutine that exists only while the watch runs. A client that shuts
// down its sending side after its request is taken as gone, as a reverse
// proxy that sees the end of the stream would; bytes arriving (a pipelined
// next request) end the watch without calling gone.
type clientWatch struct {
	conn  net.Conn
	raw   syscall.RawConn
	gone  func()
	timer *time.Timer // set when the watch starts late

	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{} // closed when the watching goroutine ends
	fired   bool          // gone was called
}

// stop ends the watch, waiting for its goroutine, and reports whether gone
// was called. It must be called before the connection is read again. A
// nil watch (nothing to watch) reports false.
func (w *clientWatch) stop() bool {
	if w == nil {
		return false
	}
	if w.timer != nil && w.timer.Stop() {
		return false // never started
	}
	w.mu.Lock()
	w.stopped = true
	started := w.started
	w.mu.Unlock()
	if !started {
		return false
	}
	// A deadline in the past wakes the poller's wait; the server sets its
	// own deadline before it reads the next request.
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
	return w.fired
}

// start runs the watch on the calling goroutine, unless stop came first.
func (w *clientWatch) start() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.started = true
	w.done = make(chan struct{})
	// The server's read deadline (its ReadTimeout, from when the request
	// was read) would end the watch of a long call. Cleared under mu, so
	// that stop's deadline always comes after.
	_ = w.conn.SetReadDeadline(time.Time{})
	w.mu.Unlock()
	defer close(w.done)
	if clientGone(w.raw) {
		w.fired = true // read by stop only after done is closed
		w.gone()
	}
}
