package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// pacing is what streams from a mock that waits between chunks look like
// on arrival: the gaps between consecutive content chunks as the client
// read them.
type pacing struct {
	label   string
	streams int
	chunks  int // content chunks received in all
	gaps    []time.Duration
	// heldBack counts gaps under a tenth of the mock's interval: two chunks
	// the mock sent an interval apart arriving together, so the first was
	// held back until the second came.
	heldBack int
	// short counts gaps under half the interval: a chunk that came late
	// but apart from the next, which on a busy machine is also what a
	// descheduled reader (the client, the gateway) looks like.
	short int
}

// contentMarker opens the delta of an OpenAI chat chunk carrying text (the
// first chunk's delta opens with the role instead).
var contentMarker = []byte(`"delta":{"content":"`)

// measurePacing sends n streamed requests one after another to t and
// records when each content chunk arrived. interval is the mock's
// --chunk-interval.
func measurePacing(ctx context.Context, t *target, body []byte, n int, interval time.Duration) (*pacing, error) {
	w := newStreamWorker(t, body)
	p := &pacing{label: t.name}
	for range n {
		arrivals, err := streamArrivals(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("paced stream via %s: %w", t.name, err)
		}
		p.streams++
		p.chunks += len(arrivals)
		for i := 1; i < len(arrivals); i++ {
			gap := arrivals[i].Sub(arrivals[i-1])
			p.gaps = append(p.gaps, gap)
			if gap < interval/10 {
				p.heldBack++
			}
			if gap < interval/2 {
				p.short++
			}
		}
	}
	slices.Sort(p.gaps)
	return p, nil
}

// streamArrivals reads one stream, timestamping every read, and returns
// the arrival time of each content chunk: the time of the read that
// completed its event.
func streamArrivals(ctx context.Context, w *streamWorker) ([]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.t.addr+w.t.path, bytes.NewReader(w.body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", w.t.auth)
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var arrivals []time.Time
	var pending []byte
	for {
		n, err := resp.Body.Read(w.buf)
		now := time.Now()
		pending = append(pending, w.buf[:n]...)
		for {
			i := bytes.Index(pending, []byte("\n\n"))
			if i < 0 {
				break
			}
			if bytes.Contains(pending[:i], contentMarker) {
				arrivals = append(arrivals, now)
			}
			pending = pending[i+2:]
		}
		if errors.Is(err, io.EOF) {
			return arrivals, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// quantile returns the q-quantile of the gaps (nearest rank).
func (p *pacing) quantile(q float64) time.Duration {
	if len(p.gaps) == 0 {
		return 0
	}
	i := int(q*float64(len(p.gaps))+0.5) - 1
	return p.gaps[min(max(i, 0), len(p.gaps)-1)]
}
