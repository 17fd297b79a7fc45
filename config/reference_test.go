package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestReference_NamesEveryField walks the fields of a config file and fails
// for any that docs/configuration.md does not name, as `path.to.field` in
// backquotes.
func TestReference_NamesEveryField(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, path := range fieldPaths(reflect.TypeFor[Config](), "") {
		if !strings.Contains(string(doc), "`"+path+"`") {
			missing = append(missing, path)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("docs/configuration.md does not describe %d config fields: %s", len(missing), strings.Join(missing, ", "))
	}
}

// fieldPaths lists the YAML paths of t's fields (a list's elements' fields
// under the list's name: rules.window).
func fieldPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			out = append(out, fieldPaths(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, prefix+name)
		out = append(out, fieldPaths(f.Type, prefix+name+".")...)
	}
	return out
}
