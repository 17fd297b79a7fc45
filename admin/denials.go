package admin

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// denialWindow is how often an anonymous source's refused writes are
// audited: once per window, with a count of the ones between.
const denialWindow = time.Minute

// maxDenialSources bounds the sources remembered; past it, sources not
// seen for a window are forgotten, and a flood of new ones is audited
// once per window as one source.
const maxDenialSources = 10_000

// denials decides which anonymous denials reach the audit log: a client
// without a token that hammers the admin API must not grow the log by a
// row per request.
type denials struct {
	mu      sync.Mutex
	sources map[string]*denialSource
}

type denialSource struct {
	audited    time.Time
	suppressed int
}

// admit reports whether a denial from source at now is audited, and how
// many from it were not since the last one that was.
func (d *denials) admit(source string, now time.Time) (audit bool, suppressed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sources == nil {
		d.sources = map[string]*denialSource{}
	}
	s := d.sources[source]
	if s == nil && len(d.sources) >= maxDenialSources {
		for k, old := range d.sources {
			if now.Sub(old.audited) >= denialWindow {
				delete(d.sources, k)
			}
		}
		if len(d.sources) >= maxDenialSources {
			source = "(many sources)"
			s = d.sources[source]
		}
	}
	if s == nil {
		d.sources[source] = &denialSource{audited: now}
		return true, 0
	}
	if now.Sub(s.audited) < denialWindow {
		s.suppressed++
		return false, 0
	}
	suppressed, s.audited, s.suppressed = s.suppressed, now, 0
	return true, suppressed
}

// sourceOf is the address a request came from, without its port.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
