package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Dependency is something the gateway cannot serve without (the counter
// store, the catalog), checked in the background for /readyz.
type Dependency struct {
	// Name is how /readyz and the log name it ("store", "catalog").
	Name string
	// Check returns nil when the dependency answers; it is given a
	// context that ends after the check's timeout.
	Check func(ctx context.Context) error
}

// readiness is the last result of each dependency's check.
type readiness struct {
	mu      sync.Mutex
	failing map[string]error
}

// down returns the names of the dependencies failing now.
func (r *readiness) down() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for name := range r.failing {
		names = append(names, name)
	}
	return names
}

// CheckDependencies checks Options.Dependencies every interval (each check
// bounded by timeout) until ctx ends: /readyz answers 503 while one fails,
// never checking on a probe's own path. A dependency going down is logged
// once with its cause, and once when it is back.
func (g *Gateway) CheckDependencies(ctx context.Context, interval, timeout time.Duration) {
	for {
		for _, d := range g.opts.Dependencies {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err := d.Check(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			g.ready.mu.Lock()
			_, wasDown := g.ready.failing[d.Name]
			switch {
			case err != nil && !wasDown:
				if g.ready.failing == nil {
					g.ready.failing = map[string]error{}
				}
				g.ready.failing[d.Name] = err
				g.log.Error("dependency down: /readyz answers 503 until it is back", "dependency", d.Name, "err", err)
				g.dependencyChanged(DependencyChange{Dependency: d.Name, Err: err})
			case err == nil && wasDown:
				delete(g.ready.failing, d.Name)
				g.log.Info("dependency back", "dependency", d.Name)
				g.dependencyChanged(DependencyChange{Dependency: d.Name, Up: true})
			}
			g.ready.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-g.clock.After(interval):
		}
	}
}

// unreadyBody is /readyz's answer while dependencies fail: their names,
// never their errors (the client port is not the place for internal
// addresses).
func unreadyBody(down []string) string {
	b, _ := json.Marshal(map[string]any{"status": "unavailable", "down": down})
	return string(b)
}
