package gateway

import (
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// upstreamConns is a provider's pool of upstream connections. Each entry is
// a fasthttp HostClient limited to one connection, so that a call knows the
// connection its request travels on and can close it: that is how the call
// of a client that left is cancelled at the provider, since fasthttp's Do
// takes no context. Entries are reused last in, first out, so a steady load
// keeps a few warm connections; the connection of an entry left idle is
// closed by its HostClient after its MaxIdleConnDuration.
type upstreamConns struct {
	// newClient makes an entry's HostClient, dialling with dial.
	newClient func(dial fasthttp.DialFuncWithTimeout) *fasthttp.HostClient
	max       int

	mu    sync.Mutex
	idle  []*upstreamConn
	inUse int
}

// upstreamConn is one entry: a HostClient and the connection it dialled
// last.
type upstreamConn struct {
	client *fasthttp.HostClient

	mu   sync.Mutex
	conn net.Conn
}

// get takes an entry for one call, or returns nil when max entries are in
// use.
func (p *upstreamConns) get() *upstreamConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse >= p.max {
		return nil
	}
	p.inUse++
	if n := len(p.idle); n > 0 {
		u := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		return u
	}
	u := &upstreamConn{}
	u.client = p.newClient(func(addr string, timeout time.Duration) (net.Conn, error) {
		conn, err := fasthttp.DialTimeout(addr, timeout)
		if err == nil {
			u.mu.Lock()
			u.conn = conn
			u.mu.Unlock()
		}
		return conn, err
	})
	u.client.MaxConns = 1
	return u
}

// put gives back an entry once its call is done with the connection (a
// stream's body closed). aborted says the call may have closed the
// connection under the HostClient, which then forgets it.
func (p *upstreamConns) put(u *upstreamConn, aborted bool) {
	if aborted {
		u.client.CloseIdleConnections()
	}
	p.mu.Lock()
	p.idle = append(p.idle, u)
	p.inUse--
	p.mu.Unlock()
}

// abort closes the entry's connection: a request waiting for its answer,
// or a stream being read, fails at once, and the provider sees the call
// cancelled.
func (u *upstreamConn) abort() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		_ = u.conn.Close()
	}
}
