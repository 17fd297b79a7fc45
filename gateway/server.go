package gateway

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"
)

// Server returns a fasthttp server for the client API: bodies over
// MaxBodyBytes are answered 413 from their Content-Length, before the body
// is read.
func (g *Gateway) Server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               g.Handler,
		ErrorHandler:          g.serverError,
		Name:                  "sluice",
		MaxRequestBodySize:    g.opts.MaxBodyBytes,
		ReadTimeout:           time.Minute,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
	}
}

// serverError answers requests fasthttp could not read.
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	rt := routeForShape(string(ctx.Path()))
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, rt, errBodyTooLarge(g.opts.MaxBodyBytes))
		ctx.SetConnectionClose()
		return
	}
	writeError(ctx, rt, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error",
		code: "malformed_request", message: "The request could not be read: " + err.Error()})
	ctx.SetConnectionClose()
}
