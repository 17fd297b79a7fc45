package config

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParse_BadFiles parses every testdata/*.bad.yaml and expects the error
// its leading "# error: ..." comment lines give, each line a part of the
// message, in order.
func TestParse_BadFiles(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no bad configs: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".bad.yaml"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := expectedErrors(data)
			if len(want) == 0 {
				t.Fatalf("%s has no leading '# error: ' line", path)
			}
			_, err = Parse(data, nil)
			if err == nil {
				t.Fatalf("Parse succeeded; want an error containing %q", want)
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Errorf("error %T does not wrap a *config.Error", err)
			}
			got := err.Error()
			rest := got
			for _, w := range want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error:\n%s\nwant it to contain, in order:\n%s", got, strings.Join(want, "\n"))
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// expectedErrors returns the text of the file's leading "# error: " lines.
func expectedErrors(data []byte) []string {
	var want []string
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		msg, ok := strings.CutPrefix(s.Text(), "# error: ")
		if !ok {
			break
		}
		want = append(want, msg)
	}
	return want
}

// TestLoad_NamesTheFile checks that Load puts the path in front of the
// problems, and reports a missing file.
func TestLoad_NamesTheFile(t *testing.T) {
	_, err := Load("testdata/env_unknown.bad.yaml", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "config: testdata/env_unknown.bad.yaml: env: ") {
		t.Errorf("Load error = %v", err)
	}
	_, err = Load("testdata/missing.yaml", nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want os.ErrNotExist", err)
	}
}

// FuzzParse feeds arbitrary files to Parse: it must not panic, and what it
// accepts must validate and resolve to valid rules.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add(defaultYAML)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, nil)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		for _, r := range c.EffectiveRules() {
			if err := r.Validate(); err != nil {
				t.Fatalf("effective rule %q is invalid: %v", r.Name, err)
			}
		}
		_ = c.Warnings()
	})
}
