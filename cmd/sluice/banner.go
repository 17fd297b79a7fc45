package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// builtInLines describes the built-in rules in force among rules, one line
// each with how to turn it off: they apply to every key beside its own
// limits and the config file's rules, so an operator must not meet them
// first in a refusal. A rule of the same name in the config file or the
// database replaces the built-in one and is not listed.
func builtInLines(rules []sluice.Rule) []string {
	var out []string
	for _, r := range rules {
		variable := config.KnobVariable(r.Name)
		if variable == "" || (r.Source != config.SourceDefault && r.Source != config.SourceEnv) || r.Limit == 0 || r.Disabled {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s per %s; %s=0 turns it off", r.Name, limitWithUnit(r), r.Subject, variable))
	}
	return out
}

// printBuiltIns writes the built-in rules in force among rules, if any,
// under a line that says what they are.
func printBuiltIns(out io.Writer, rules []sluice.Rule) {
	lines := builtInLines(rules)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(out, "Built-in rules in force: every key's calls count against them too, beside its own limits")
	fmt.Fprintln(out, "(a rule of the same name in the config file replaces one, and limit: 0 there turns it off as well):")
	for _, l := range lines {
		fmt.Fprintln(out, "  "+l)
	}
	fmt.Fprintln(out)
}

// commonFlags repeats the --config, --data and --database flags c was
// given, for a command printed to run beside it on the same state.
func commonFlags(c *common) string {
	var b strings.Builder
	if c.configPath != "" {
		fmt.Fprintf(&b, " --config %s", shellQuote(absPath(c.configPath)))
	}
	for _, f := range []struct{ name, variable string }{{"data", config.VarDataDir}, {"database", config.VarDatabase}} {
		if p := c.flags[f.variable]; p != nil && *p != "" {
			v := *p
			if f.name == "data" {
				v = absPath(v)
			}
			fmt.Fprintf(&b, " --%s %s", f.name, shellQuote(v))
		}
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// configName names the config file serve runs with.
func configName(path string) string {
	if path == "" {
		return "(embedded default: set SLUICE_CONFIG or --config for a file)"
	}
	return absPath(path)
}

// absPath is path made absolute, or path itself when the working directory
// is unknown.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
