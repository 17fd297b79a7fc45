// Command bareproxy is the do-nothing peer of the gateway load harness
// (bench/gateway): a bare fasthttp reverse proxy that forwards every request
// to one upstream with a fasthttp.HostClient, with no auth, no parsing and
// no limits. The harness builds it, starts it as a separate process like the
// gateway, and loads it in the same rounds, so that what the gateway adds can
// be read against what a proxy that does nothing adds on the same machine.
//
//	go run -C bench ./gateway/bareproxy -listen 127.0.0.1:9000 -upstream 127.0.0.1:8080
//
// The client reads responses as streams (StreamResponseBody), and Do fills
// the server's own response, which the server then writes from that stream:
// a chunked (SSE) answer goes out chunk by chunk as it arrives, each chunk
// flushed, instead of being held until the end. The upstream connection goes
// back to the pool when the server closes the stream after writing it.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "host:port to forward every request to")
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "bareproxy: -upstream is required")
		os.Exit(2)
	}
	client := &fasthttp.HostClient{
		Addr:                     *upstream,
		MaxConns:                 4096,
		MaxIdleConnDuration:      time.Minute,
		ReadTimeout:              30 * time.Second,
		WriteTimeout:             30 * time.Second,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
		StreamResponseBody:       true,
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			// The same request and response: the request goes out as it
			// came in, and the upstream's answer, its body a stream, is
			// what the server writes back.
			if err := client.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.ResetBody()
				ctx.Error("bareproxy: "+err.Error(), fasthttp.StatusBadGateway)
			}
		},
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  time.Minute,
		WriteTimeout:                 time.Minute,
		IdleTimeout:                  time.Minute,
	}
	if err := srv.ListenAndServe(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "bareproxy:", err)
		os.Exit(1)
	}
}
