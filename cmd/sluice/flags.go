package main

import (
	"errors"
	"flag"
	"os"
)

// parseFlags parses args with fs, flags and positional arguments in any
// order ("keys revoke ID --admin-url URL" as well as "keys revoke
// --admin-url URL ID"); after "--" every argument is positional. The
// positional arguments are then fs.Args(). -h and --help print the flags to
// standard output and return flag.ErrHelp, which run answers with exit 0.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			out := fs.Output()
			fs.SetOutput(os.Stdout)
			usage()
			fs.SetOutput(out)
			return err
		}
		if err != nil {
			usage()
			return err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Parse again with only the positional arguments after "--", so that
	// fs.Args() returns them.
	return fs.Parse(append([]string{"--"}, positional...))
}
