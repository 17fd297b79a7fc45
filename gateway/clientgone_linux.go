package gateway

import (
	"net"
	"syscall"
	"time"
)

// watchClient starts watching conn after delay (at once when delay is 0;
// otherwise on the shared watcher's first tick after delay) and calls gone
// if the client closes it. It returns nil when conn cannot
// be watched (not a socket).
func watchClient(conn net.Conn, delay time.Duration, gone func()) *clientWatch {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &clientWatch{conn: conn, raw: raw, gone: gone}
	if delay > 0 {
		lateWatches.add(w, delay)
	} else {
		go w.start()
	}
	return w
}

// clientGone waits until the socket has bytes to read or is closed, and
// reports whether it is closed (end of stream or reset). A deadline set on
// the connection ends the wait with false.
func clientGone(raw syscall.RawConn) bool {
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
	return err == nil && gone
}
