package testenv

import (
	"flag"
	"testing"
)

// WaitingTests sets -parallel unless go test was given one.
func TestWaitingTests_KeepsAGivenParallel(t *testing.T) {
	f := flag.Lookup("test.parallel")
	was := f.Value.String()
	t.Cleanup(func() { _ = flag.Set("test.parallel", was) })
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	WaitingTests(13)
	switch got := f.Value.String(); {
	case given && got != was:
		t.Errorf("-parallel %s given, WaitingTests set %s", was, got)
	case !given && got != "13":
		t.Errorf("no -parallel given, WaitingTests(13) left %s", got)
	}
}
