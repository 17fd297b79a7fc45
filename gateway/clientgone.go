package gateway

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// clientWatchDelay is how long an upstream call runs before the gateway
// starts watching its client's connection: a call answered sooner never
// pays for the watch. The shared watcher looks for calls that have run
// this long every clientWatchTick, so a client that leaves a longer call
// has it cancelled at most clientWatchDelay + clientWatchTick late.
const clientWatchDelay = 10 * time.Millisecond

// clientWatchTick is how often the shared watcher looks, while calls are
// registered, for those that have waited long enough to be watched.
const clientWatchTick = 5 * time.Millisecond

// clientWatchLinger is how many ticks the shared watcher's goroutine
// keeps ticking with nothing registered before it ends: a gateway serving
// one short call after another keeps one goroutine and one ticker rather
// than starting them again for each call, and an idle one has no periodic
// wake-up once the linger is over.
const clientWatchLinger = 20

// clientWatch watches a client's connection, while the gateway works on its
// call, for the client closing it; gone is then called once. It peeks at
// the socket through the runtime's poller, consuming nothing, on a
// goroutine that exists only while the watch runs. A client that shuts
// down its sending side after its request is taken as gone, as a reverse
// proxy that sees the end of the stream would; bytes arriving (a pipelined
// next request) end the watch without calling gone.
type clientWatch struct {
	conn net.Conn
	raw  syscall.RawConn
	gone func()

	// A watch that starts late is registered with list until it is due;
	// slot and due are guarded by list.mu.
	list *watchList
	slot int // index in list.calls; -1 once taken off it
	due  time.Time

	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{} // closed when the watching goroutine ends
	fired   bool          // gone was called
}

// stop ends the watch, waiting for its goroutine, and reports whether gone
// was called. It must be called before the connection is read again. A
// nil watch (nothing to watch) reports false, as does one that never
// started.
func (w *clientWatch) stop() bool {
	if w == nil {
		return false
	}
	if w.list != nil && w.list.remove(w) {
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

// lateWatches holds the watches of the package's upstream calls until
// they are due.
var lateWatches = watchList{tick: clientWatchTick, linger: clientWatchLinger}

// watchList starts the watches registered with it once they are due, from
// one goroutine that ticks while any are registered (and linger ticks
// more). A call answered before its watch is due costs a lock and a slice
// append and removal: unlike a timer per call, registering never makes
// the runtime wake the poller or another thread.
type watchList struct {
	tick   time.Duration
	linger int // idle ticks before the goroutine ends

	mu      sync.Mutex
	calls   []*clientWatch
	running bool // the ticking goroutine exists

	// launch, when set (by tests), is called instead of starting a due
	// watch's goroutine.
	launch func(*clientWatch)
}

// add registers w, to be started delay from now.
func (l *watchList) add(w *clientWatch, delay time.Duration) {
	w.list = l
	w.due = time.Now().Add(delay)
	l.mu.Lock()
	w.slot = len(l.calls)
	l.calls = append(l.calls, w)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
}

// remove takes w off the list and reports whether it was still on it
// (its watch not started).
func (l *watchList) remove(w *clientWatch) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.slot < 0 {
		return false
	}
	l.take(w.slot)
	return true
}

// take removes the watch at index i, moving the last one into its place.
// l.mu must be held.
func (l *watchList) take(i int) *clientWatch {
	w := l.calls[i]
	last := len(l.calls) - 1
	moved := l.calls[last]
	l.calls[i] = moved
	moved.slot = i
	l.calls[last] = nil
	l.calls = l.calls[:last]
	w.slot = -1
	return w
}

// run ticks, starting the watches that are due, until the list has been
// empty for linger ticks.
func (l *watchList) run() {
	t := time.NewTicker(l.tick)
	defer t.Stop()
	var due []*clientWatch
	idle := 0
	for now := range t.C {
		l.mu.Lock()
		for i := 0; i < len(l.calls); {
			w := l.calls[i]
			if now.Before(w.due) {
				i++
				continue
			}
			due = append(due, l.take(i))
		}
		if len(l.calls) > 0 || len(due) > 0 {
			idle = 0
		} else if idle++; idle >= l.linger {
			l.running = false
			l.mu.Unlock()
			return
		}
		launch := l.launch
		l.mu.Unlock()
		for i, w := range due {
			if launch != nil {
				launch(w)
			} else {
				go w.start()
			}
			due[i] = nil
		}
		due = due[:0]
	}
}
