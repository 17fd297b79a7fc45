package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestRelease_StampsVersionAndRevision runs scripts/release.sh for this
// machine's platform: the binary is static, says the stamped version on
// the first line of both `sluice version` and `sluice --version`, and the
// module and commit from the build info after it; the sums file lists it.
func TestRelease_StampsVersionAndRevision(t *testing.T) {
	t.Parallel()
	buildSluice(t) // compiles what the release build links (see buildSluice)
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	const version = "v9.9.9-releasetest"
	cmd := exec.Command("../../scripts/release.sh", version)
	cmd.Env = append(os.Environ(), "PLATFORMS="+platform, "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	bin := filepath.Join(out, "sluice-"+version+"-"+runtime.GOOS+"-"+runtime.GOARCH)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	for _, arg := range []string{"version", "--version"} {
		b, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", arg, err, b)
		}
		got := string(b)
		for _, want := range []string{"sluice " + version + "\n", "module github.com/sluicehq/sluice ", "revision " + strings.TrimSpace(string(head))} {
			if !strings.Contains(got, want) {
				t.Errorf("sluice %s lacks %q:\n%s", arg, want, got)
			}
		}
		if !strings.HasPrefix(got, "sluice "+version+"\n") {
			t.Errorf("sluice %s does not start with the version:\n%s", arg, got)
		}
	}
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a dynamic loader: not static", bin)
			}
		}
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS-"+version))
	if err != nil || !strings.Contains(string(sums), filepath.Base(bin)) {
		t.Errorf("sums file: %v\n%s", err, sums)
	}
}

func TestPrintVersion(t *testing.T) {
	for _, tc := range []struct {
		v    buildVersion
		want []string
	}{
		{buildVersion{Version: "v1.2.3", Module: "github.com/sluicehq/sluice", ModuleVersion: "(devel)", Revision: "abc123", Time: "2026-12-01T00:00:00Z", Modified: true, Go: "go1.26"},
			[]string{"sluice v1.2.3\n", "module github.com/sluicehq/sluice (devel)\n", "revision abc123 (2026-12-01T00:00:00Z, modified)\n", "go1.26 "}},
		{buildVersion{Version: "(development)", Go: "go1.26"},
			[]string{"sluice (development)\n", "revision unknown (built without VCS information)\n"}},
	} {
		var b bytes.Buffer
		printVersion(&b, tc.v)
		for _, want := range tc.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%+v: lacks %q:\n%s", tc.v, want, b.String())
			}
		}
	}
}

// TestReadBuildVersion_StampWinsOverBuildInfo: a stamped version is the
// version; unstamped, a test binary is "(development)" with the module path.
func TestReadBuildVersion_StampWinsOverBuildInfo(t *testing.T) {
	if v := readBuildVersion(); v.Version != "(development)" || v.Module != "github.com/sluicehq/sluice" {
		t.Errorf("unstamped: %+v", v)
	}
	old := version
	version = "v2.0.0"
	t.Cleanup(func() { version = old })
	if v := readBuildVersion(); v.Version != "v2.0.0" {
		t.Errorf("stamped: %+v", v)
	}
}
