package testenv

import (
	"flag"
	"strconv"
)

// WaitingTests lets n of a package's parallel tests (t.Parallel) run at
// once, where go test's default (-parallel) is one per CPU. It is for a
// package whose parallel tests mostly wait: on a database, a stalled
// server, a proxy's delay, a child process. A -parallel given to go test
// wins. A package's TestMain calls it before Run, whose m.Run reads it.
func WaitingTests(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
