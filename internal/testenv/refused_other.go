//go:build !unix

package testenv

import (
	"net"
	"testing"
)

// RefusedAddr returns a loopback address ("127.0.0.1:port") where nothing
// listens. Here (not a Unix system) the port is only freed, not held: a
// test or process that takes it meanwhile answers where nothing should.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testenv: listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
