// Package docs holds Sluice's documentation; its test checks the links
// between the README and these pages.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} `)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	t := strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
	return strings.ReplaceAll(notSlug.ReplaceAllString(t, ""), " ", "-")
}

// anchors lists the headings of a Markdown file, outside code blocks.
func anchors(t *testing.T, path string) map[string]bool {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	code := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			code = !code
			continue
		}
		if !code && heading.MatchString(line) {
			out[slug(line)] = true
		}
	}
	return out
}

// TestLinks_Resolve fails for a relative link of the README or of a page
// here to a file that does not exist, or to a heading it does not have.
func TestLinks_Resolve(t *testing.T) {
	pages, _ := filepath.Glob("*.md")
	more, _ := filepath.Glob("*/*.md")
	pages = append(append([]string{"../README.md"}, pages...), more...)
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links to %s: no such file", page, target)
				continue
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[frag] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, file, frag)
			}
		}
	}
}
