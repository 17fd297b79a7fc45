//go:build unix

package testenv

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A refused address refuses, and its port stays taken while the test runs.
func TestRefusedAddr_RefusesAndHoldsThePort(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want refused", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listen on %s succeeded, want the port held", addr)
	}
}
