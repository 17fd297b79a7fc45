package sluice

// features are the installers of the optional features that are leaves of
// the core (waiting, sweep attribution, turns, leases, provider limits,
// classes; fit needs no hook). New calls each with the Options, and a
// feature in use sets its hooks: the core calls a feature only through
// them. This list and ruleFeatures are the one place that names the
// features, as cmd/sluice is for the stores: the core's files name none,
// so each feature is a file the core can do without (scripts/enginesize.sh
// checks it with internal/leaves).
var features = [...]func(*Limiter, *Options){installWaiting, installSweptReports, installTurns, installLeases, installProviderLimits, installClasses}

// ruleFeatures check and prepare, for compileRule, the fields of a rule
// that a feature reads (LimitFrom, Classes), after the core's own checks.
// They are not hooks of a Limiter: Rule.Validate compiles a rule without
// one.
var ruleFeatures = [...]func(*compiledRule) error{checkProviderRule, compileClasses}
