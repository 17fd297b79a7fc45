package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and revision are stamped by release builds and by the image
// (-ldflags "-X main.version=v1.2.3 -X main.revision=<commit>"). Unset,
// they come from the build info: the module version that go install
// records, the commit that go build records in a checkout.
var (
	version  string
	revision string
)

// buildVersion is what sluice version reports.
type buildVersion struct {
	// Version is the stamped version, else the module's version, else
	// "(development)".
	Version string
	// Module is the main module's path and version in the build info.
	Module, ModuleVersion string
	// Revision is the VCS commit (build info first, then the stamp), Time
	// its commit time, Modified whether the work tree had changes.
	Revision, Time string
	Modified       bool
	Go             string
}

func readBuildVersion() buildVersion {
	v := buildVersion{Version: version, Revision: revision, Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		v.Module, v.ModuleVersion = info.Main.Path, info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" && v.ModuleVersion != "" && v.ModuleVersion != "(devel)" {
		v.Version = v.ModuleVersion
	}
	if v.Version == "" {
		v.Version = "(development)"
	}
	return v
}

// printVersion writes the version on the first line, then where it came
// from.
func printVersion(w io.Writer, v buildVersion) {
	fmt.Fprintf(w, "sluice %s\n", v.Version)
	if v.Module != "" {
		mv := v.ModuleVersion
		if mv == "" {
			mv = "(devel)"
		}
		fmt.Fprintf(w, "module %s %s\n", v.Module, mv)
	}
	if v.Revision != "" {
		var notes []string
		if v.Time != "" {
			notes = append(notes, v.Time)
		}
		if v.Modified {
			notes = append(notes, "modified")
		}
		line := "revision " + v.Revision
		if len(notes) > 0 {
			line += " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintln(w, line)
	} else {
		fmt.Fprintln(w, "revision unknown (built without VCS information)")
	}
	fmt.Fprintf(w, "%s %s/%s\n", v.Go, runtime.GOOS, runtime.GOARCH)
}

func versionCommand(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	printVersion(os.Stdout, readBuildVersion())
	return nil
}
