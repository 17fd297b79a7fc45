package gateway

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
	"github.com/valyala/fasthttp"
)

// Listener returns ln for Server with the gateway's connection caps
// (Options.MaxConns, and MaxConnsPerIP, by default half of MaxConns, so
// that no one address can hold every place) and an Accept that outlasts
// running out of file descriptors (PatientListener). A connection over a
// cap is answered at once, in the API's error shape with Retry-After (503
// over MaxConns, 429 over MaxConnsPerIP), and closed, before it is read:
// fasthttp's own refusal would be plain text with no hint. With no
// MaxConns, the per-address cap is MaxConnsPerIP alone.
func (g *Gateway) Listener(ln net.Listener) net.Listener {
	perIP := g.opts.MaxConnsPerIP
	if perIP == 0 && g.opts.MaxConns > 0 {
		perIP = max(1, g.opts.MaxConns/2)
	}
	return &capListener{Listener: PatientListener(ln, g.log), max: g.opts.MaxConns, perIP: perIP, byIP: map[string]int{},
		refusing: make(chan struct{}, maxRefusing), observer: g.opts.Observer}
}

// capListener counts the connections it accepted and has not seen closed,
// in all and per client address.
type capListener struct {
	net.Listener
	max, perIP int

	mu   sync.Mutex
	open int
	byIP map[string]int
	// refusing holds a token per connection being refused.
	refusing chan struct{}
	// observer is the gateway's Options.Observer, told of each refusal
	// answered (one closed unanswered is not a request).
	observer func(Event)
}

// maxRefusing bounds the connections refused at once: past it, one over a
// cap is closed unanswered, so that a flood costs no more than this many
// goroutines and descriptors beyond the caps.
const maxRefusing = 64

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := addressOf(c.RemoteAddr())
		status := l.take(ip)
		if status == 0 {
			return &cappedConn{Conn: c, l: l, ip: ip}, nil
		}
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				path := refuseConn(c, status)
				if l.observer != nil {
					ev := Event{Route: routeName(path), Status: status, Outcome: "busy", Class: "throttled"}
					if status == 429 {
						ev.Outcome = "rate_limited"
					}
					l.observer(ev)
				}
			}()
		default:
			_ = c.Close()
		}
	}
}

// take counts a new connection from ip, or returns the status it is
// refused with.
func (l *capListener) take(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.open >= l.max:
		return 503
	case l.perIP > 0 && l.byIP[ip] >= l.perIP:
		return 429
	}
	l.open++
	l.byIP[ip]++
	return 0
}

func (l *capListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// cappedConn gives its place back when it closes, once.
type cappedConn struct {
	net.Conn
	l    *capListener
	ip   string
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() { c.l.release(c.ip) })
	return c.Conn.Close()
}

// addressOf is the client address of a connection, without its port.
func addressOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// refuseConn answers a connection over a cap and closes it: it reads the
// request's head first (for at most a second), so that the client reads
// the answer as its request's, in the error shape of the API it called,
// with Retry-After. It returns the request's path.
func refuseConn(c net.Conn, status int) string {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	br := bufio.NewReaderSize(c, 4096)
	line, err := br.ReadSlice('\n')
	for err == nil {
		var h []byte
		if h, err = br.ReadSlice('\n'); len(h) <= 2 {
			break
		}
	}
	_, path, _ := strings.Cut(string(line), " ")
	path, _, _ = strings.Cut(path, " ")
	message, code := "The gateway is serving as many connections as it can; retry shortly.", "too_many_connections"
	typ := "server_error"
	if status == 429 {
		message, code, typ = "Too many connections from your address; close one, or retry shortly.", "too_many_connections_per_address", "rate_limit_error"
	}
	var body []byte
	if routeForShape(path).anthropic {
		anthType := "overloaded_error"
		if status == 429 {
			anthType = "rate_limit_error"
		}
		body = anthropic.ErrorBody(anthType, message, nil)
	} else {
		body = openai.ErrorBody(message, typ, code, "", nil)
	}
	head := "HTTP/1.1 " + strconv.Itoa(status) + " " + fasthttp.StatusMessage(status) +
		"\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	_, _ = c.Write(append([]byte(head), body...))
	return path
}
