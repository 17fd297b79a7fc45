// Command sluice runs the Sluice gateway and its tools.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: sluice <command> [flags]

commands:
  serve    run the gateway (not built yet: see issue "The gateway")
  version  print the version
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		fmt.Fprintln(os.Stderr, "sluice serve: the gateway is not built yet; the engine is usable as a Go library (see README)")
		return 1
	case "version":
		fmt.Println("sluice (development)")
		return 0
	default:
		fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
