package gateway

import (
	"context"
	"net"
	"syscall"
	"time"
)

// watchClient cancels cancel if the client closes its connection while
// the call waits for admission (a batch request may wait up to
// BatchMaxWait in the engine's queue): a client that gave up must not
// have its call admitted, charged or sent upstream. It peeks at the socket
// through the runtime's poller, consuming nothing, and costs one goroutine
// only for calls that may wait. A client that shuts down its sending side
// after its request is taken as gone, as a reverse proxy that sees the end
// of the stream would. stop ends the watch; call it before the handler
// uses the connection again.
func watchClient(conn net.Conn, cancel context.CancelFunc) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1]byte
		gone := false
		err := raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN || err == syscall.EINTR:
				return false // nothing to read yet: wait until there is
			case err != nil:
				gone = true // reset by the peer
			default:
				gone = n == 0 // end of stream; bytes are a next request
			}
			return true
		})
		if err == nil && gone {
			cancel()
		}
	}()
	return func() {
		// A deadline in the past wakes the poller's wait; the server sets
		// its own deadline before it reads the next request.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}
