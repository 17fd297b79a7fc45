package gateway

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// DependencyChange is a dependency of the gateway going down or coming
// back: the counter store, the catalog (checked for /readyz), or a
// provider (judged by its answers).
type DependencyChange struct {
	// Dependency is the Dependency's name ("store", "catalog"),
	// "provider", or "circuit".
	Dependency string
	// Provider names the provider, for a provider or a circuit.
	Provider string
	// Model names the provider's model, for a circuit ("circuit": a
	// deployment's circuit opening, or closing with Up).
	Model string
	// Up is set when it is back.
	Up bool
	// Err is why it went down.
	Err error
}

// providerDownAfter is how many attempts in a row a provider fails (a
// connection error, a timeout, a 5xx) before it is said to be down: one
// failure is weather, three are an outage. Its first answer that is not a
// 5xx brings it back.
const providerDownAfter = 3

// providerHealth follows a provider's answers. It is safe for concurrent
// use; a good answer of a provider that is up takes no lock.
type providerHealth struct {
	failures atomic.Int64
	down     atomic.Bool
	mu       sync.Mutex // orders the changes
}

// note records an attempt's result: err for a connection error or
// timeout, else the status. It returns the change the attempt made, if
// any.
func (h *providerHealth) note(err error, status int) (change *DependencyChange) {
	failed := err != nil || status >= 500
	if !failed && h.failures.Load() == 0 && !h.down.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !failed {
		h.failures.Store(0)
		if h.down.Load() {
			h.down.Store(false)
			return &DependencyChange{Dependency: "provider", Up: true}
		}
		return nil
	}
	n := h.failures.Add(1)
	if h.down.Load() || n < providerDownAfter {
		return nil
	}
	h.down.Store(true)
	if err == nil {
		err = fmt.Errorf("provider answered %d", status)
	}
	return &DependencyChange{Dependency: "provider", Err: fmt.Errorf("%d attempts in a row failed, the last: %w", n, err)}
}

// noteUpstream records an attempt on p, and logs and reports a provider
// going down or coming back.
func (g *Gateway) noteUpstream(p *provider, err error, status int) {
	ch := p.health.note(err, status)
	if ch == nil {
		return
	}
	ch.Provider = p.Name
	if ch.Up {
		g.log.Info("provider back", "provider", p.Name)
	} else {
		g.log.Error("provider down: its calls fail (fallbacks are tried)", "provider", p.Name, "err", ch.Err)
	}
	g.dependencyChanged(*ch)
}

func (g *Gateway) dependencyChanged(ch DependencyChange) {
	if g.opts.OnDependency != nil {
		g.opts.OnDependency(ch)
	}
}
