package config

import (
	"reflect"
	"regexp"
	"strings"
)

// unknownField matches the decoder's word for a field a type does not have.
var unknownField = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)

// fieldsByType holds, by the name the decoder gives a type ("config.Provider"),
// the YAML field names it has: every struct a Config is made of.
var fieldsByType = func() map[string][]string {
	out := map[string][]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || out[t.String()] != nil {
			return
		}
		out[t.String()] = []string{}
		var names []string
		var collect func(t reflect.Type)
		collect = func(t reflect.Type) {
			for f := range t.Fields() {
				name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				switch {
				case strings.Contains(opts, "inline"):
					collect(f.Type)
				case name != "" && name != "-" && f.IsExported():
					names = append(names, name)
					walk(f.Type)
				}
			}
		}
		collect(t)
		out[t.String()] = names
	}
	walk(reflect.TypeFor[Config]())
	out["config.Rule"] = ruleFields
	out["sluice.Match"] = matchFields
	return out
}()

// suggestField returns the field of the type named in message (the
// decoder's "field x not found in type T") nearest to the one written, ""
// when none is near: a typo or a neighbour's spelling, not another field.
func suggestField(message string) string {
	m := unknownField.FindStringSubmatch(message)
	if m == nil {
		return ""
	}
	written, best, bestDistance := m[1], "", 0
	for _, name := range fieldsByType[m[2]] {
		d := editDistance(strings.ToLower(written), name)
		if len(written) >= 4 && strings.HasPrefix(name, written) {
			d = 1 // a field cut short: cached for cached_input
		}
		if best == "" || d < bestDistance {
			best, bestDistance = name, d
		}
	}
	if best == "" || bestDistance > max(2, len(written)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
