package gateway

import (
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// afterResponse holds, per connection, work to run once the connection's
// current response is written out: settling the call. The server's
// ConnState hook runs it on the connection's own goroutine when the
// connection goes idle (after the response is flushed, unless the client
// pipelines) or closes. The client has its answer before the gateway
// settles, and no goroutine is started, nor another thread woken, per
// call.
type afterResponse struct {
	mu      sync.Mutex
	pending map[net.Conn]func()
}

// add queues f for conn's next idle or closed state.
func (a *afterResponse) add(conn net.Conn, f func()) {
	a.mu.Lock()
	if a.pending == nil {
		a.pending = map[net.Conn]func(){}
	}
	if prev := a.pending[conn]; prev != nil {
		next := f
		f = func() { prev(); next() }
	}
	a.pending[conn] = f
	a.mu.Unlock()
}

// connState is the server's ConnState hook. fasthttp moves a connection
// to idle after writing each response, and to closed or hijacked at its
// end, after any body stream of the last response was closed: whatever
// was queued for a connection runs.
func (a *afterResponse) connState(conn net.Conn, state fasthttp.ConnState) {
	switch state {
	case fasthttp.StateIdle, fasthttp.StateClosed, fasthttp.StateHijacked:
	default:
		return
	}
	a.mu.Lock()
	f := a.pending[conn]
	if f != nil {
		delete(a.pending, conn)
	}
	a.mu.Unlock()
	if f != nil {
		f()
	}
}
