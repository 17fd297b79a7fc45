package sluice

// WithoutFeatures uninstalls every optional feature New installed in l, for
// a benchmark to compare the core alone with the core and its features.
// Call it before l admits anything.
func WithoutFeatures(l *Limiter) { l.hooks = hooks{sweep: l.store.Sweep} }
