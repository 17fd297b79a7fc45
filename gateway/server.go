package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Server returns a fasthttp server for the client API: bodies over
// MaxBodyBytes are answered 413 from their Content-Length, before the body
// is read. Its calls are settled on the connection's goroutine once their
// response is written out, by its ConnState hook (see afterResponse): a
// caller that sets its own ConnState must call the one it replaces.
func (g *Gateway) Server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:            g.handleServed,
		ErrorHandler:       g.serverError,
		Name:               "sluice",
		MaxRequestBodySize: g.opts.MaxBodyBytes,
		// Room for the headers of a request whose JWT bearer token is as
		// large as MaxTokenBytes allows (fasthttp's default is 4 KiB).
		ReadBufferSize: 16 << 10,
		Concurrency:    g.opts.MaxConns,
		MaxConnsPerIP:  g.opts.MaxConnsPerIP,
		// The headers must come within HeaderTimeout; then the body at a
		// minimum rate (bodyTimeout).
		ReadTimeout: g.opts.HeaderTimeout,
		IdleTimeout: g.opts.HeaderTimeout,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: bodyTimeout(h.ContentLength(), g.opts.MaxBodyBytes)}
		},
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                serverLog{g.log},
		ConnState:             g.after.connState,
	}
}

// A request's body must arrive at minBodyRate on average, after
// bodyGrace: a client that trickles a body holds a connection for
// seconds, not the minute it once could (Listener's caps bound how many).
const (
	bodyGrace   = 10 * time.Second
	minBodyRate = 64 << 10 // bytes a second
)

// bodyTimeout is how long a body of length bytes (negative: unknown, so
// as long as maxBody) may take to arrive.
func bodyTimeout(length, maxBody int) time.Duration {
	if length < 0 || length > maxBody {
		length = maxBody
	}
	return bodyGrace + time.Duration(length)*time.Second/minBodyRate
}

// PatientListener returns ln with an Accept that outlasts running out of
// file descriptors: on EMFILE or ENFILE it waits (5 ms, doubling to 1 s)
// and accepts again, logging once per second at most, where fasthttp would
// stop serving. The connections already open are served meanwhile; the
// next accepted once one closes.
func PatientListener(ln net.Listener, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &patientListener{Listener: ln, log: log}
}

type patientListener struct {
	net.Listener
	log    *slog.Logger
	mu     sync.Mutex
	logged time.Time
}

func (l *patientListener) Accept() (net.Conn, error) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil || !(errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
			return c, err
		}
		l.mu.Lock()
		if now := time.Now(); now.Sub(l.logged) >= time.Second {
			l.logged = now
			l.log.Warn("client listener: out of file descriptors; accepting again when a connection closes", "err", err)
		}
		l.mu.Unlock()
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// serverLog sends fasthttp's own messages (connections that fail, bodies
// over the cap) to the gateway's structured log, at debug level: they are
// about clients, and the client was answered.
type serverLog struct{ log *slog.Logger }

func (l serverLog) Printf(format string, args ...any) {
	l.log.Debug("http server", "msg", fmt.Sprintf(format, args...))
}

// serverError answers requests fasthttp could not read, and tells the
// Observer of each answer (see refuseEarly).
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	noteRequestID(ctx)
	path := string(ctx.Path())
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		// Refused before its key was read: the only limit that applies
		// is the client address's pre-auth limit.
		e := errBodyTooLarge(g.opts.MaxBodyBytes)
		e.room = g.addressRoom(ctx)
		g.refuseEarly(ctx, path, e)
		ctx.SetConnectionClose()
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		g.refuseEarly(ctx, path, &apiError{status: 408, typ: "invalid_request_error", anthType: "invalid_request_error",
			code: "request_timeout", message: "The request was not sent in time: its headers must arrive within the header timeout, its body within 10 seconds plus one for every 64 KiB."})
		ctx.SetConnectionClose()
		return
	}
	// fasthttp's error quotes the raw request, headers (and so the key)
	// included: the client is told what is wrong, never the bytes back.
	g.refuseEarly(ctx, path, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error",
		code: "malformed_request", message: "The request could not be read as HTTP/1.1 (a malformed request line or header, or a header too large)."})
	ctx.SetConnectionClose()
}

// refuseEarly answers err to a request refused before it became a call
// (see serve), in the error shape of the API its path names, and tells the
// Observer, so that it is logged and counted as every call is.
func (g *Gateway) refuseEarly(ctx *fasthttp.RequestCtx, path string, err error) {
	g.writeError(ctx, routeForShape(path), err)
	g.observeEarly(ctx, routeName(path), err)
}

// observeEarly tells the Observer about a refusal made outside a call's
// pipeline, before any key was known.
func (g *Gateway) observeEarly(ctx *fasthttp.RequestCtx, route string, err error) {
	ev := Event{Route: route, Cause: causeOf(err)}
	ev.Outcome, ev.Class = outcomeOf(err)
	g.observe(ctx, ev)
}

// routeName is the route a path names, as events name it: "other" for a
// path the gateway does not serve.
func routeName(path string) string {
	switch {
	case routes[path] != nil:
		return routes[path].name
	case path == "/v1/models":
		return "models"
	case path == "/v1/sessions" || strings.HasPrefix(path, "/v1/sessions/"):
		return "sessions"
	}
	return "other"
}
