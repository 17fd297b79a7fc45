package admin

import (
	"fmt"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLineBuffer_WritesLinesWholeInOrderWithinTheInterval: lines written by
// many goroutines reach the writer whole, each goroutine's in order, within
// the interval and without a Flush.
func TestLineBuffer_WritesLinesWholeInOrderWithinTheInterval(t *testing.T) {
	var out syncbuf.Buffer
	b := NewLineBuffer(&out, 20*time.Millisecond)
	const writers, lines = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(b, "w%d line %d\n", w, i)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "\n") < writers*lines {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines written after 5 s without a Flush", strings.Count(out.String(), "\n"), writers*lines)
		}
		time.Sleep(5 * time.Millisecond)
	}
	next := make([]int, writers)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var w, i int
		if _, err := fmt.Sscanf(l, "w%d line %d", &w, &i); err != nil || w < 0 || w >= writers {
			t.Fatalf("line %q is not whole", l)
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
}

// TestLineBuffer_FlushWritesEverythingAtOnce: Flush leaves nothing behind,
// and a buffer past its size limit is written without waiting.
func TestLineBuffer_FlushWritesEverythingAtOnce(t *testing.T) {
	var out syncbuf.Buffer
	b := NewLineBuffer(&out, time.Hour)
	b.Write([]byte("one\n"))
	b.Write([]byte("two\n"))
	if got := out.String(); got != "" {
		t.Fatalf("written before the interval: %q", got)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "one\ntwo\n" {
		t.Fatalf("after Flush: %q", got)
	}
	big := strings.Repeat("x", lineBufferMax) + "\n"
	b.Write([]byte(big))
	if got := out.String(); got != "one\ntwo\n"+big {
		t.Fatalf("a full buffer was held back (%d bytes written)", len(got))
	}
}
