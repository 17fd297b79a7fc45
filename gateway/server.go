package gateway

import (
	"errors"
	"fmt"
	"log/slog"
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
		ReadBufferSize:        16 << 10,
		ReadTimeout:           time.Minute,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                serverLog{g.log},
		ConnState:             g.after.connState,
	}
}

// serverLog sends fasthttp's own messages (connections that fail, bodies
// over the cap) to the gateway's structured log, at debug level: they are
// about clients, and the client was answered.
type serverLog struct{ log *slog.Logger }

func (l serverLog) Printf(format string, args ...any) {
	l.log.Debug("http server", "msg", fmt.Sprintf(format, args...))
}

// serverError answers requests fasthttp could not read.
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	rt := routeForShape(string(ctx.Path()))
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, rt, errBodyTooLarge(g.opts.MaxBodyBytes))
		ctx.SetConnectionClose()
		return
	}
	// fasthttp's error quotes the raw request, headers (and so the key)
	// included: the client is told what is wrong, never the bytes back.
	writeError(ctx, rt, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error",
		code: "malformed_request", message: "The request could not be read as HTTP/1.1 (a malformed request line or header, or a header too large)."})
	ctx.SetConnectionClose()
}
