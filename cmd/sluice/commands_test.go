package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// commandsOfUsage lists the commands the top-level usage names ("serve",
// "keys create", ...), so that a command added there is covered by the
// tests over every command.
func commandsOfUsage(t *testing.T) [][]string {
	t.Helper()
	_, list, ok := strings.Cut(usage, "commands:\n")
	if !ok {
		t.Fatal("usage has no commands: section")
	}
	list, _, _ = strings.Cut(list, "\n\n")
	columns := regexp.MustCompile(`\s{2,}`)
	var out [][]string
	for _, line := range strings.Split(list, "\n") {
		var words []string
		for _, w := range strings.Fields(columns.Split(strings.TrimSpace(line), 2)[0]) {
			if strings.ToLower(w) == w {
				words = append(words, w)
			}
		}
		out = append(out, words)
	}
	return out
}

// TestRun_HelpExitsZeroOnEveryCommand runs -h and --help on every command and
// subcommand of the built binary: each exits 0, prints its help to standard
// output, not as an error, and touches no state.
func TestRun_HelpExitsZeroOnEveryCommand(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	commands := commandsOfUsage(t)
	for _, sub := range []string{"show", "set", "unset"} {
		commands = append(commands, []string{"limits", sub})
	}
	commands = append(commands, []string{"keys"}, []string{"help"}, []string{})
	for _, want := range [][]string{{"serve"}, {"keys", "create"}, {"keys", "list"}, {"keys", "revoke"}, {"check"},
		{"migrate"}, {"usage"}, {"limits"}, {"mock"}, {"version"}} {
		if !slices.ContainsFunc(commands, func(c []string) bool { return slices.Equal(c, want) }) {
			t.Fatalf("usage does not list %q: %q", want, commands)
		}
	}
	data := t.TempDir()
	for _, command := range commands {
		for _, help := range []string{"-h", "--help"} {
			args := append(slices.Clone(command), help)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				cmd := exec.Command(bin, args...)
				cmd.Env = append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_CONFIG=", "SLUICE_ADMIN_TOKEN=")
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
				}
				if !strings.Contains(strings.ToLower(stdout.String()), "usage") {
					t.Errorf("no usage on stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
				}
				if strings.Contains(stderr.String(), "help requested") {
					t.Errorf("help answered as an error:\n%s", stderr.String())
				}
			})
		}
	}
	if entries, _ := os.ReadDir(data); len(entries) > 0 {
		t.Errorf("help wrote to the data directory: %v", entries)
	}
}

func TestParseFlags_FlagsAfterPositionalArguments(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		tier, name string
		verbose    bool
		positional []string
	}{
		{args: []string{"--tier", "x", "NAME"}, tier: "x", positional: []string{"NAME"}},
		{args: []string{"NAME", "--tier", "x"}, tier: "x", positional: []string{"NAME"}},
		{args: []string{"NAME", "--tier=x", "-v", "OTHER", "--name", "n"}, tier: "x", name: "n", verbose: true, positional: []string{"NAME", "OTHER"}},
		{args: []string{"A", "--", "--tier", "x"}, positional: []string{"A", "--tier", "x"}},
		{args: []string{"--tier", "x", "--", "-v"}, tier: "x", positional: []string{"-v"}},
		{args: nil},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		tier, name := fs.String("tier", "", ""), fs.String("name", "", "")
		verbose := fs.Bool("v", false, "")
		if err := parseFlags(fs, tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if *tier != tc.tier || *name != tc.name || *verbose != tc.verbose || !slices.Equal(fs.Args(), tc.positional) && len(tc.positional)+fs.NArg() > 0 {
			t.Errorf("%q: tier %q name %q v %v positional %q; want %q %q %v %q", tc.args, *tier, *name, *verbose, fs.Args(), tc.tier, tc.name, tc.verbose, tc.positional)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := parseFlags(fs, []string{"NAME", "--unknown"}); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Errorf("an unknown flag after an argument: %v, want an error", err)
	}
}

// TestKeys_FlagsAfterTheKeyID revokes a key with its id before the flags.
func TestKeys_FlagsAfterTheKeyID(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	data := t.TempDir()
	env := append(os.Environ(), "SLUICE_DATA_DIR=", "SLUICE_CONFIG=", "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_ENV=")
	out, err := runBin(bin, env, "keys", "create", "--data", data, "--workspace", "demo", "--user", "me")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	id := regexp.MustCompile(`created key (\S+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no key id in %q", out)
	}
	if out, err := runBin(bin, env, "keys", "revoke", id[1], "--data", data); err != nil || !strings.Contains(out, "revoked "+id[1]) {
		t.Fatalf("keys revoke ID --data DIR: %v\n%s", err, out)
	}
	if out, err := runBin(bin, env, "keys", "list", "--data", data); err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("keys list after the revoke: %v\n%s", err, out)
	}
}

func runBin(bin string, env []string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestServe_BannerNamesConfigAndDataDirectory: in development the banner
// names the config file and the data directory; in production there is no
// banner on standard output, and one log line says the same.
func TestServe_BannerNamesConfigAndDataDirectory(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	defaults, err := os.ReadFile("../../config/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, defaults, 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	for _, tc := range []struct {
		env, token string
		// in is where the config and data directory are named.
		inStdout bool
		want     []string
	}{
		{env: "", inStdout: true, want: []string{"config " + cfgPath + ";", "data directory " + data, "curl http"}},
		{env: "production", token: "banner-test-token-0123456789abcdef0123", want: []string{`"msg":"serving"`, `"config":"` + cfgPath + `"`, `"data_dir":"` + data + `"`}},
	} {
		t.Run("env="+tc.env, func(t *testing.T) {
			cmd := serveCmd(bin, append(os.Environ(), "SLUICE_DATA_DIR="+data, "SLUICE_STORE=", "SLUICE_DATABASE=", "SLUICE_CONFIG="+cfgPath,
				"SLUICE_LISTEN="+anyPort, "SLUICE_ADMIN_LISTEN="+anyPort, "SLUICE_ENV="+tc.env, "SLUICE_ADMIN_TOKEN="+tc.token))
			var stdout, stderr lockedBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			deadline := time.Now().Add(30 * time.Second)
			// The banner and the log line are written once both listeners
			// are up, the banner in several writes: wait for the whole of it.
			out := &stderr
			if tc.inStdout {
				out = &stdout
			}
			hasAll := func() bool {
				for _, want := range tc.want {
					if !strings.Contains(out.String(), want) {
						return false
					}
				}
				return true
			}
			for !hasAll() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			for _, want := range tc.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("lacks %s:\n%s", want, out.String())
				}
			}
			// Asked for port 0, it names the ports the system chose, and
			// the client API answers on the one it names.
			listen, admin := servedAt(out.String())
			if strings.HasSuffix(listen, ":0") || strings.HasSuffix(admin, ":0") || listen == admin {
				t.Fatalf("serve names client %q and admin %q, want the ports it listens on:\n%s", listen, admin, out.String())
			}
			resp, err := http.Get("http://" + listen + "/healthz")
			if err != nil {
				t.Fatalf("the client address serve names: %v\n%s", err, stderr.String())
			}
			resp.Body.Close()
			if !tc.inStdout && stdout.String() != "" {
				t.Errorf("production printed a banner:\n%s", stdout.String())
			}
		})
	}
}
