package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseStatTicks_CommandWithSpacesAndParens(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	stat := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 269 0 0 20 0 9 0\n"
	got, err := parseStatTicks([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if got != 1000 {
		t.Errorf("parseStatTicks = %d, want 731+269 = 1000", got)
	}
	if _, err := parseStatTicks([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("parseStatTicks of a short line: no error")
	}
}

func TestPhase_QuantileNearestRank(t *testing.T) {
	ph := &phase{}
	for i := 1; i <= 100; i++ {
		ph.samples = append(ph.samples, time.Duration(i)*time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Microsecond}, {0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}, {1, 100 * time.Microsecond}} {
		if got := ph.quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

func TestMedian_EvenAndOdd(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3 = %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 = %v, want 2.5", got)
	}
}

// pacedServer streams five content chunks interval apart, except that the
// third is held back and written together with the fourth.
func pacedServer(interval time.Duration) *httptest.Server {
	chunk := func(i int) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"w` + string(rune('0'+i)) + ` "}}]}` + "\n\n"
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		write := func(s string) {
			_, _ = w.Write([]byte(s))
			_ = rc.Flush()
		}
		write(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
		write(chunk(0))
		time.Sleep(interval)
		write(chunk(1))
		time.Sleep(2 * interval)
		write(chunk(2) + chunk(3)) // 2 held back until 3 was there
		time.Sleep(interval)
		write(chunk(4))
		write("data: [DONE]\n\n")
	}))
}

func TestMeasurePacing_SeesAChunkHeldBack(t *testing.T) {
	const interval = 30 * time.Millisecond
	srv := pacedServer(interval)
	defer srv.Close()
	tgt := &target{name: "test", addr: strings.TrimPrefix(srv.URL, "http://"), path: "/v1/chat/completions"}
	p, err := measurePacing(context.Background(), tgt, []byte(`{}`), 2, interval)
	if err != nil {
		t.Fatal(err)
	}
	if p.chunks != 10 || len(p.gaps) != 8 {
		t.Fatalf("chunks %d, gaps %d; want 10 and 8 (the role chunk is not content)", p.chunks, len(p.gaps))
	}
	if p.heldBack != 2 {
		t.Errorf("heldBack = %d, want 2 (one per stream)", p.heldBack)
	}
}
