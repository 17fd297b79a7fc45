package gateway

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Circuit breaking, per deployment (a provider serving one upstream
// model): after CircuitFailures attempts in a row fail (a connection error,
// a timeout, a 5xx: never a 4xx, which the call caused, nor a 429, which
// pacing and retries handle), the circuit opens and the deployment is
// skipped, as a model whose rule refuses is, for CircuitCooldown. Then one
// call at a time is let through as a probe: its success closes the
// circuit, its failure opens it for another cooldown. State is each
// replica's own, and a restart starts closed.
const (
	defaultCircuitFailures = 5
	defaultCircuitCooldown = 30 * time.Second
)

// circuit is one deployment's breaker. The closed path with no failure
// takes no lock.
type circuit struct {
	open     atomic.Bool
	failures atomic.Int64

	mu sync.Mutex
	// retryAt is when an open circuit lets a probe through; probeAt is
	// when the probe in flight was let through (zero: none). A probe
	// that never reached the provider (refused, its client gone) is
	// replaced once a cooldown has passed.
	retryAt, probeAt time.Time
}

// circuitFor returns the circuit of upstream (a model's name upstream) on
// p.
func (p *provider) circuitFor(upstream string) *circuit {
	if c, ok := p.circuits.Load(upstream); ok {
		return c.(*circuit)
	}
	c, _ := p.circuits.LoadOrStore(upstream, &circuit{})
	return c.(*circuit)
}

// allow reports whether a call may be sent at now: always while closed;
// while open, only as the one probe once the cooldown has passed. Refused,
// it says when to try again.
func (c *circuit) allow(now time.Time, cooldown time.Duration) (bool, time.Time) {
	if !c.open.Load() {
		return true, time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open.Load() {
		return true, time.Time{}
	}
	if now.Before(c.retryAt) {
		return false, c.retryAt
	}
	if !c.probeAt.IsZero() && now.Before(c.probeAt.Add(cooldown)) {
		// A probe is out: the next one is due if it never comes back.
		return false, c.probeAt.Add(cooldown)
	}
	c.probeAt = now
	return true, time.Time{}
}

// ready is allow without taking the probe's turn: whether a call could be
// let through at now, and when one can when it cannot.
func (c *circuit) ready(now time.Time, cooldown time.Duration) (bool, time.Time) {
	if !c.open.Load() {
		return true, time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.open.Load():
		return true, time.Time{}
	case now.Before(c.retryAt):
		return false, c.retryAt
	case !c.probeAt.IsZero() && now.Before(c.probeAt.Add(cooldown)):
		return false, c.probeAt.Add(cooldown)
	}
	return true, time.Time{}
}

// note records an attempt's outcome at now, and reports whether the
// circuit opened or closed.
func (c *circuit) note(now time.Time, failed bool, threshold int64, cooldown time.Duration) (opened, closed bool) {
	if !failed && !c.open.Load() && c.failures.Load() == 0 {
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !failed {
		c.failures.Store(0)
		if c.open.Load() {
			c.open.Store(false)
			c.probeAt = time.Time{}
			return false, true
		}
		return false, false
	}
	n := c.failures.Add(1)
	if c.open.Load() {
		// The probe (or a call sent before the circuit opened) failed: a
		// cooldown more.
		c.retryAt, c.probeAt = now.Add(cooldown), time.Time{}
		return false, false
	}
	if n < threshold {
		return false, false
	}
	c.open.Store(true)
	c.retryAt, c.probeAt = now.Add(cooldown), time.Time{}
	return true, false
}

// failedAttempt says whether an attempt's outcome counts against its
// deployment's circuit: a connection error or timeout, or a 5xx.
func failedAttempt(err error, status int) bool {
	return err != nil || status >= 500
}

// circuitAllows reports whether d may be sent a call now, and when to
// try again when it may not.
func (g *Gateway) circuitAllows(d *deployment) (bool, time.Time) {
	return d.circuit.allow(g.now(), d.provider.circuitCooldown)
}

// noteCircuit records an attempt on d, and logs and reports its circuit
// opening or closing.
func (g *Gateway) noteCircuit(d *deployment, err error, status int) {
	p := d.provider
	opened, closed := d.circuit.note(g.now(), failedAttempt(err, status), p.circuitFailures, p.circuitCooldown)
	switch {
	case opened:
		why := err
		if why == nil {
			why = fmt.Errorf("provider answered %d", status)
		}
		g.log.Error("circuit open: the deployment is skipped until a probe succeeds", "provider", p.Name, "model", d.upstream,
			"failures", p.circuitFailures, "cooldown", p.circuitCooldown, "err", why)
		g.dependencyChanged(DependencyChange{Dependency: "circuit", Provider: p.Name, Model: d.upstream,
			Err: fmt.Errorf("%d attempts in a row failed, the last: %w", p.circuitFailures, why)})
	case closed:
		g.log.Info("circuit closed: a probe succeeded", "provider", p.Name, "model", d.upstream)
		g.dependencyChanged(DependencyChange{Dependency: "circuit", Provider: p.Name, Model: d.upstream, Up: true})
	}
}

// CircuitState is one deployment's circuit, for the admin API and metrics.
type CircuitState struct {
	Provider, Model string
	Open            bool
	// RetryAt is when an open circuit lets its next probe through.
	RetryAt time.Time
}

// Circuits returns the state of every deployment's circuit that has seen
// a failure since the process started.
func (g *Gateway) Circuits() []CircuitState {
	var out []CircuitState
	for _, p := range g.providers {
		p.circuits.Range(func(k, v any) bool {
			c := v.(*circuit)
			c.mu.Lock()
			st := CircuitState{Provider: p.Name, Model: k.(string), Open: c.open.Load(), RetryAt: c.retryAt}
			c.mu.Unlock()
			if st.Open || c.failures.Load() > 0 {
				out = append(out, st)
			}
			return true
		})
	}
	return out
}

// errProviderUnavailable is the answer when every candidate's circuit is
// open: retry when the soonest lets a probe through.
func errProviderUnavailable(model string, retryAt, now time.Time) error {
	wait := max(retryAt.Sub(now), time.Second)
	return &apiError{status: 503, typ: "server_error", anthType: "overloaded_error", code: "provider_unavailable",
		message:   fmt.Sprintf("The providers of %s are failing; retry in %s.", model, wait.Round(time.Second)),
		retryHint: wait}
}
