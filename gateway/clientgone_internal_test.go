//go:build linux

package gateway

import (
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// connPair returns both ends of a loopback TCP connection.
func connPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func newWatch(t *testing.T, conn net.Conn, gone func()) *clientWatch {
	t.Helper()
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return &clientWatch{conn: conn, raw: raw, gone: gone}
}

// waitIdle waits for l's goroutine to end, as it must once nothing has
// been registered for its linger.
func waitIdle(t *testing.T, l *watchList) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		running, n := l.running, len(l.calls)
		l.mu.Unlock()
		if !running && n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the watcher still runs with %d watches registered", n)
		}
	}
}

// TestWatchList_ShortCallsNeverWatched: calls that stop their watch before
// it is due never have it started, however many, in whatever order they
// stop; the watcher's goroutine ends once nothing is registered.
func TestWatchList_ShortCallsNeverWatched(t *testing.T) {
	t.Parallel()
	conn, _ := connPair(t)
	var launched atomic.Int64
	l := &watchList{tick: time.Millisecond, linger: 3, launch: func(*clientWatch) { launched.Add(1) }}
	const delay = time.Hour // none is ever due
	for range 1000 {
		w := newWatch(t, conn, func() { t.Error("gone called") })
		l.add(w, delay)
		if w.stop() {
			t.Fatal("a watch that never started reported gone")
		}
	}
	// Many registered at once, stopped in any order: the swap-remove keeps
	// every slot right.
	ws := make([]*clientWatch, 200)
	for i := range ws {
		ws[i] = newWatch(t, conn, func() { t.Error("gone called") })
		l.add(ws[i], delay)
	}
	time.Sleep(5 * time.Millisecond) // a few ticks with watches registered
	for _, i := range rand.Perm(len(ws)) {
		if ws[i].stop() {
			t.Fatal("a watch that never started reported gone")
		}
		if ws[i].slot != -1 {
			t.Fatalf("stopped watch still in slot %d", ws[i].slot)
		}
	}
	for _, w := range ws {
		if w.started {
			t.Fatal("a watch stopped before it was due was started")
		}
	}
	if n := launched.Load(); n != 0 {
		t.Fatalf("%d watches started, want none", n)
	}
	waitIdle(t, l)
}

// TestWatchList_LongCallWatched: a watch left registered is started once it
// is due, within a tick (give or take the scheduler), and then sees its
// client leave.
func TestWatchList_LongCallWatched(t *testing.T) {
	conn, client := connPair(t)
	const delay, tick = 20 * time.Millisecond, 5 * time.Millisecond
	startedAt := make(chan time.Time, 1)
	l := &watchList{tick: tick, linger: 3}
	l.launch = func(w *clientWatch) {
		startedAt <- time.Now()
		go w.start()
	}
	// Short calls around the long one do not hold it up.
	for range 100 {
		w := newWatch(t, conn, func() {})
		l.add(w, delay)
		w.stop()
	}
	gone := make(chan struct{})
	w := newWatch(t, conn, func() { close(gone) })
	t0 := time.Now()
	l.add(w, delay)
	// Not before it is due. How soon after, within a tick, is
	// TestWatchList_DueWatchLaunchedWithinATick's, on a fake clock: here the
	// scheduler of a busy machine could delay the ticking goroutine.
	if took := (<-startedAt).Sub(t0); took < delay {
		t.Errorf("watch started %v after it was registered, before its delay of %v", took, delay)
	}
	client.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the client left and gone was not called")
	}
	if !w.stop() {
		t.Error("stop after gone reported false")
	}
	select {
	case <-startedAt:
		t.Error("a watch started twice, or a stopped one started")
	default:
	}
	waitIdle(t, l)
}

// TestWatchList_DueWatchLaunchedWithinATick: on synctest's fake clock, a
// watch left registered is launched within a tick of being due, however
// many short calls came and went around it, and the ticking goroutine ends
// after its linger once nothing is registered.
func TestWatchList_DueWatchLaunchedWithinATick(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const delay, tick = 20 * time.Millisecond, 5 * time.Millisecond
		var launched []time.Duration
		t0 := time.Now()
		l := &watchList{tick: tick, linger: 3, launch: func(*clientWatch) { launched = append(launched, time.Since(t0)) }}
		for range 100 {
			w := &clientWatch{}
			l.add(w, delay)
			w.stop()
		}
		l.add(&clientWatch{}, delay)
		time.Sleep(delay + 2*tick)
		synctest.Wait()
		if len(launched) != 1 || launched[0] < delay || launched[0] > delay+tick {
			t.Fatalf("launched at %v, want one launch within [%v, %v]", launched, delay, delay+tick)
		}
		time.Sleep(time.Duration(l.linger+1) * tick)
		synctest.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.running || len(l.calls) != 0 {
			t.Fatalf("the watcher still runs (%v) with %d watches registered", l.running, len(l.calls))
		}
	})
}
