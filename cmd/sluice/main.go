// Command sluice runs the Sluice gateway and its tools. It only wires: the
// work is in the packages it imports.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

const usage = `usage: sluice <command> [flags]

commands:
  serve            run the gateway (client API and admin API)
  keys create      create an API key: --workspace W --user U [--org O] [--team T] [--tier T]
  keys list        list API keys [--workspace W]
  keys update ID   change a key's name, tier, models, class or max wait
  keys revoke ID   revoke an API key
  check            validate a config and print the effective limits and warnings
  migrate          apply the catalog's and the store's schema migrations
  usage            usage from the ledger of a running server (--admin-url)
  limits           show|set|unset limits of a running server (--admin-url)
  mock             run the mock provider alone: --listen ADDR
  version          print the version (also: sluice --version)

Run "sluice <command> -h" for a command's flags. Flags may come before or
after a command's arguments.
`

const keysUsage = `usage:
  sluice keys create --workspace W --user U [--org O] [--team T] [--tier T] [--name N] [--models M,...]
                     [--class C] [--max-wait D]
  sluice keys list   [--workspace W]
  sluice keys update ID [--name N] [--tier T] [--models M,...] [--class C] [--max-wait D]
  sluice keys revoke ID
Each takes --admin-url URL to work through a running server's admin API
instead of the data directory. Run "sluice keys <subcommand> -h" for its flags.
`

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	// The commands with subcommands answer a bare -h with their list.
	if len(args) == 2 && isHelp(args[1]) {
		switch args[0] {
		case "keys":
			fmt.Print(keysUsage)
			return 0
		case "limits":
			fmt.Println(limitsUsage)
			return 0
		}
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:])
	case "keys":
		err = keys(args[1:])
	case "usage", "limits":
		err = adminCommand(args[0], args[1:])
	case "check":
		err = check(args[1:])
	case "migrate":
		err = migrate(args[1:])
	case "mock":
		err = mock(args[1:])
	case "version", "--version":
		err = versionCommand(args[1:])
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
