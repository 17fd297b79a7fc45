package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The harnesses build sluice from the repository root and their own peers
// (the bare proxy) from the bench module: two go.mod files, found from
// wherever the harness runs inside the bench module.
func TestRoots_TheSluiceModuleAndTheBenchModule(t *testing.T) {
	for name, tc := range map[string]struct {
		root   func() (string, error)
		module string
	}{
		"SluiceRoot": {SluiceRoot, "module github.com/sluicehq/sluice\n"},
		"BenchRoot":  {BenchRoot, "module github.com/sluicehq/sluice/bench\n"},
	} {
		dir, err := tc.root()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil || !strings.HasPrefix(string(mod), tc.module) {
			t.Errorf("%s = %s, whose go.mod starts %q (%v), want %q", name, dir, firstLine(mod), err, tc.module)
		}
	}
	sluice, _ := SluiceRoot()
	if bench, _ := BenchRoot(); filepath.Join(sluice, "bench") != bench {
		t.Errorf("SluiceRoot %s, BenchRoot %s: want the bench module inside the repository", sluice, bench)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}
